// Package pagetoken is the one format of the page tokens of every paginated
// list. A token is opaque to callers: base64url of a small JSON envelope that
// carries
//
//   - the kind of list it came from ("locks", "branches", ...),
//   - a binding: a hash of the kind and the list's scope (the tenant, and for
//     nested lists the repository, branch or host), so a token of one
//     tenant's list, or of another list, is refused by every other list,
//   - the keyset cursor: the position after the last row of the page.
//
// Decoding caps the length, refuses unknown fields, checks kind and binding,
// and range-checks every field of the cursor (Cursor.Validate) before the
// cursor can reach SQL. Every refusal is invalid_argument (HTTP 400) with the
// same message, so a corrupt token never becomes a 500 or a silent first
// page.
//
// The binding is a check, not a secret: a token grants nothing (every query
// is filtered by the caller's tenant anyway); it only makes misuse an error.
package pagetoken

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
)

// MaxLen caps the length of a token, before anything is decoded.
const MaxLen = 1024

// Cursor is a keyset position carried by a token. Validate range-checks
// every field: it runs on every decoded cursor before the caller sees it.
type Cursor interface {
	Validate() error
}

// envelope is the JSON inside a token.
type envelope struct {
	Kind   string          `json:"k"`
	Bind   string          `json:"b"`
	Cursor json.RawMessage `json:"c"`
}

// Scope joins the parts that identify one list (tenant id, repository
// name, ...) into the scope string of Encode and Decode.
func Scope(parts ...string) string { return strings.Join(parts, "\x00") }

func bind(kind, scope string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + scope))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// Encode returns the token of cursor c (a TimeID, a Name or a package's own
// Cursor type) for the list kind/scope.
func Encode(kind, scope string, c any) string {
	cb, err := json.Marshal(c)
	if err != nil {
		panic("pagetoken: encoding a cursor: " + err.Error())
	}
	b, err := json.Marshal(envelope{Kind: kind, Bind: bind(kind, scope), Cursor: cb})
	if err != nil {
		panic("pagetoken: encoding a token: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Invalid is the error of every refused token.
func Invalid() error {
	return repolock.Errorf(repolock.EInvalid, "page_token is not valid for this list")
}

// Decode returns the cursor of token, which must have been issued by Encode
// for the same kind and scope. The empty token is the first page: Decode
// returns the zero C and first = true.
func Decode[C any, PC interface {
	*C
	Cursor
}](kind, scope, token string) (c C, first bool, err error) {
	defer repolock.WrapOp(&err, "pagetoken.Decode")
	var zero C
	if token == "" {
		return zero, true, nil
	}
	if len(token) > MaxLen {
		return zero, false, Invalid()
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return zero, false, Invalid()
	}
	var env envelope
	if err := strictUnmarshal(b, &env); err != nil || env.Kind != kind || env.Bind != bind(kind, scope) {
		return zero, false, Invalid()
	}
	if err := strictUnmarshal(env.Cursor, &c); err != nil {
		return zero, false, Invalid()
	}
	if err := PC(&c).Validate(); err != nil {
		return zero, false, Invalid()
	}
	return c, false, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return Invalid()
	}
	return nil
}

// TimeID is the cursor of lists ordered by (created_at, id).
type TimeID struct {
	CreatedAt time.Time `json:"t"`
	ID        string    `json:"i"`
}

// minTime and maxTime bound the timestamps a TimeID may carry: wide enough
// for any row, narrow enough that Postgres' timestamptz takes them whatever
// the offset the text carried.
var (
	minTime = time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 30, 0, 0, 0, 0, time.UTC)
)

// Validate checks that CreatedAt is within years 1..9999 (in UTC) and ID is
// a UUID. It also normalizes CreatedAt to UTC.
func (c *TimeID) Validate() error {
	c.CreatedAt = c.CreatedAt.UTC()
	if c.CreatedAt.Before(minTime) || c.CreatedAt.After(maxTime) {
		return Invalid()
	}
	if _, err := uuid.Parse(c.ID); err != nil || len(c.ID) != 36 {
		return Invalid()
	}
	return nil
}

// Start is the TimeID before every row: the first page of a (created_at,
// id) list.
func Start() TimeID {
	return TimeID{CreatedAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), ID: uuid.Nil.String()}
}

// MaxNameLen caps the name a Name cursor carries.
const MaxNameLen = 512

// Name is the cursor of lists ordered by a name (repositories, branches,
// tags, hosts) or resumed at an id (commits): the last name of the page.
type Name struct {
	Name string `json:"n"`
}

// Validate checks that Name is 1..MaxNameLen bytes of UTF-8 without NUL.
func (c *Name) Validate() error {
	if c.Name == "" || len(c.Name) > MaxNameLen || !utf8.ValidString(c.Name) || strings.ContainsRune(c.Name, 0) {
		return Invalid()
	}
	return nil
}

// The kinds of list, one per paginated route.
const (
	KindLocks                 = "locks"
	KindApplications          = "applications"
	KindRepositoryCredentials = "repository_credentials"
	KindGCRuns                = "gc_runs"
	KindRepositories          = "repositories"
	KindBranches              = "branches"
	KindTags                  = "tags"
	KindCommits               = "commits"
	KindSyncHosts             = "sync_hosts"
	KindSyncRepos             = "sync_repos"
	KindTenants               = "tenants"
	KindReservations          = "reservations"
	KindHandovers             = "handovers"
	KindDenials               = "denials"
	KindEvents                = "events" // the watch's cursors (internal/watch)
)

// DecodeTimeID decodes a (created_at, id) token; the empty token is Start().
func DecodeTimeID(kind, scope, token string) (TimeID, error) {
	c, first, err := Decode[TimeID](kind, scope, token)
	if first {
		return Start(), nil
	}
	return c, err
}

// Trim cuts rows, fetched with a limit of size+1, to the page of the first
// size rows. When rows held more than size, a next page exists and Trim
// returns next(the page's last row) as its token; otherwise the token is
// "" (the last page). rows is returned as it came (nil stays nil) when it
// is not longer than size.
//
// size must be at least 1 (a page of 0 rows has no last row to continue
// after); Trim panics otherwise. Every list validates its page size first.
func Trim[T any](rows []T, size int, next func(last T) string) ([]T, string) {
	if size < 1 {
		panic("pagetoken: Trim of a page of size < 1")
	}
	if len(rows) <= size {
		return rows, ""
	}
	rows = rows[:size]
	return rows, next(rows[size-1])
}
