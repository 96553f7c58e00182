package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/pagetoken"
)

// DecodeJSON decodes the request body into v strictly: the content type must
// be JSON, unknown fields and trailing data are rejected, and a body over the
// limit is 413.
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
	dec := json.NewDecoder(req.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return jsonError(err)
		}
		return repolock.Errorf(repolock.EInvalid, "request body must hold a single JSON value")
	}
	return nil
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
