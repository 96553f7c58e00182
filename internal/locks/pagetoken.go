package locks

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
)

// Lists are paginated by keyset on (created_at, id): a page token is the
// position of the last row of the previous page, opaque to callers
// (base64url of a small JSON object). The kind is part of the token so a
// token of one list is refused by another.
const (
	KindLocks                 = "locks"
	KindApplications          = "applications"
	KindRepositoryCredentials = "repository_credentials"
)

// Cursor is a keyset position: rows strictly after (CreatedAt, ID) follow.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// start is before every row: the first page.
var start = Cursor{CreatedAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), ID: uuid.Nil.String()}

type pageToken struct {
	Kind      string    `json:"k"`
	CreatedAt time.Time `json:"t"`
	ID        string    `json:"i"`
}

// EncodePageToken returns the opaque token of the page after c.
func EncodePageToken(kind string, c Cursor) string {
	b, err := json.Marshal(pageToken{Kind: kind, CreatedAt: c.CreatedAt.UTC(), ID: c.ID})
	if err != nil {
		panic("locks: encoding a page token: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePageToken returns the position a token of the given kind stands for;
// the empty token is the first page. A token that is not one this service
// issued for this list is invalid_argument (HTTP 400).
func DecodePageToken(kind, token string) (_ Cursor, err error) {
	defer repolock.WrapOp(&err, "locks.DecodePageToken")
	if token == "" {
		return start, nil
	}
	invalid := repolock.Errorf(repolock.EInvalid, "page_token is not valid for this list")
	if len(token) > 512 {
		return Cursor{}, invalid
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Cursor{}, invalid
	}
	var pt pageToken
	if err := json.Unmarshal(b, &pt); err != nil || pt.Kind != kind || pt.CreatedAt.IsZero() {
		return Cursor{}, invalid
	}
	if _, err := uuid.Parse(pt.ID); err != nil {
		return Cursor{}, invalid
	}
	return Cursor{CreatedAt: pt.CreatedAt, ID: pt.ID}, nil
}
