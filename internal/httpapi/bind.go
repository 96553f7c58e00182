package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/pagetoken"
)

// DecodeJSON decodes the request body into v strictly: the content type must
// be JSON, the body valid UTF-8, field names must match v's json tags exactly
// (encoding/json alone matches them case-insensitively), a duplicate key is
// refused (encoding/json alone keeps the last), so are unknown fields and
// trailing data; every string (keys included) must pass
// repolock.ValidateText (fields tagged `text:"multiline"` may hold tab, CR
// and LF). A body over the limit is 413.
func DecodeJSON(c echo.Context, v any) error {
	req := c.Request()
	ct := req.Header.Get(echo.HeaderContentType)
	if ct == "" {
		return repolock.Errorf(repolock.EUnsupportedMedia, "Content-Type must be application/json")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return repolock.Errorf(repolock.EUnsupportedMedia, "Content-Type must be application/json")
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return jsonError(err)
	}
	return decodeStrict(body, v)
}

// decodeStrict is DecodeJSON after the body is read.
func decodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return jsonError(io.EOF)
	}
	if !utf8.Valid(body) {
		return repolock.Errorf(repolock.EInvalid, "request body is not valid UTF-8")
	}
	if esc, ok := loneSurrogate(body); ok {
		return repolock.Errorf(repolock.EInvalid, "request body holds the escape %s, a lone UTF-16 surrogate: not a character", esc)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := scanValue(dec, reflect.TypeOf(v), "request body", repolock.SingleLine); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return repolock.Errorf(repolock.EInvalid, "request body must hold a single JSON value")
	}
	full := json.NewDecoder(bytes.NewReader(body))
	full.DisallowUnknownFields()
	if err := full.Decode(v); err != nil {
		return jsonError(err)
	}
	return nil
}

// loneSurrogate finds a \uXXXX escape of a UTF-16 surrogate (D800-DFFF) that
// is not half of a pair (a high one followed at once by a low one), which
// encoding/json would silently turn into U+FFFD. It returns the escape as
// written. Only escapes inside strings count; body is valid UTF-8.
func loneSurrogate(body []byte) (string, bool) {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		if err != nil {
			return 0, false
		}
		return rune(n), true
	}
	inString := false
	for i := 0; i < len(body); i++ {
		b := body[i]
		if !inString {
			if b == '"' {
				inString = true
			}
			continue
		}
		switch b {
		case '"':
			inString = false
		case '\\':
			r, ok := hex4(i)
			if !ok {
				i++ // a one-character escape: skip the escaped byte
				continue
			}
			switch {
			case r >= 0xD800 && r <= 0xDBFF:
				if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11
					continue
				}
				return string(body[i : i+6]), true
			case r >= 0xDC00 && r <= 0xDFFF:
				return string(body[i : i+6]), true
			}
			i += 5
		}
	}
	return "", false
}

// scanValue reads one JSON value from dec, checking it against t (nil: any
// type): object keys must be unique and, for structs, exactly a field's json
// name; strings must be text of the given mode.
func scanValue(dec *json.Decoder, t reflect.Type, field string, mode repolock.TextMode) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return scanError(err)
	}
	switch tok := tok.(type) {
	case string:
		return repolock.ValidateText(field, tok, mode)
	case json.Delim:
		switch tok {
		case '{':
			var fields map[string]jsonField
			var elem reflect.Type
			if t != nil && t.Kind() == reflect.Struct && t != rawMessageType {
				fields = structFields(t)
			} else if t != nil && t.Kind() == reflect.Map {
				elem = t.Elem()
			}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return scanError(err)
				}
				key, _ := kt.(string)
				if err := repolock.ValidateText("a field name", key, repolock.SingleLine); err != nil {
					return err
				}
				if seen[key] {
					return repolock.Errorf(repolock.EInvalid, "duplicate field %q", key)
				}
				seen[key] = true
				ft, fmode := elem, mode
				if fields != nil {
					f, ok := fields[key]
					if !ok {
						return &repolock.Error{Code: repolock.EInvalid, Message: fmt.Sprintf("unknown field %q", key),
							Err: fmt.Errorf("json: unknown field %q", key)}
					}
					ft, fmode = f.typ, f.mode
				}
				if err := scanValue(dec, ft, key, fmode); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return scanError(err)
			}
		case '[':
			var elem reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t != rawMessageType {
				elem = t.Elem()
			}
			for dec.More() {
				if err := scanValue(dec, elem, field, mode); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return scanError(err)
			}
		}
	}
	return nil
}

// scanError is jsonError where the body is known to be non-empty: an end
// of input inside a value is an unexpected end.
func scanError(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return jsonError(err)
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

type jsonField struct {
	typ  reflect.Type
	mode repolock.TextMode
}

var fieldCache sync.Map // reflect.Type -> map[string]jsonField

// structFields returns the exact JSON names of t's fields (embedded structs
// flattened, as encoding/json does).
func structFields(t reflect.Type) map[string]jsonField {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]jsonField)
	}
	m := map[string]jsonField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range structFields(ft) {
					if _, dup := m[k]; !dup {
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		mode := repolock.SingleLine
		if f.Tag.Get("text") == "multiline" {
			mode = repolock.MultiLine
		}
		m[name] = jsonField{typ: f.Type, mode: mode}
	}
	fieldCache.Store(t, m)
	return m
}

func jsonError(err error) error {
	var (
		mbe  *http.MaxBytesError
		se   *json.SyntaxError
		ute  *json.UnmarshalTypeError
		msg  string
		code = repolock.EInvalid
	)
	switch {
	case errors.As(err, &mbe):
		code, msg = repolock.EPayloadTooLarge, fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		msg = "request body is empty; a JSON object is required"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "request body is not valid JSON: unexpected end"
	case errors.As(err, &se):
		msg = fmt.Sprintf("request body is not valid JSON at offset %d", se.Offset)
	case errors.As(err, &ute):
		msg = fmt.Sprintf("field %q must be of type %s", ute.Field, ute.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		msg = "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		msg = "request body is not valid JSON"
	}
	return &repolock.Error{Code: code, Message: msg, Err: err}
}

// Page is a validated page request.
type Page struct {
	Size  int
	Token string
}

// Page sizes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// ParsePage reads ?page_size= (1..500, default 50) and ?page_token=.
func ParsePage(c echo.Context) (Page, error) {
	p := Page{Size: DefaultPageSize, Token: c.QueryParam("page_token")}
	if s := c.QueryParam("page_size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return Page{}, repolock.Errorf(repolock.EInvalid, "page_size must be an integer from 1 to %d", MaxPageSize)
		}
		p.Size = n
	}
	if len(p.Token) > pagetoken.MaxLen {
		return Page{}, pagetoken.Invalid()
	}
	return p, nil
}

// ListResponse is the shape of every paginated list.
type ListResponse[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token"`
}

// ParseBool reads an optional boolean query parameter.
func ParseBool(c echo.Context, name string) (bool, error) {
	s := c.QueryParam(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, repolock.Errorf(repolock.EInvalid, "%s must be true or false", name)
	}
	return b, nil
}

// pathParam returns a path parameter decoded. Echo matches on the escaped
// path when the request has escapes Go would not produce itself (such as
// %2F), and then hands out escaped values.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", repolock.Errorf(repolock.EInvalid, "path parameter %s is not validly escaped", name)
	}
	return u, nil
}
