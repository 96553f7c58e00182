package pagetoken_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/pagetoken"
)

const (
	tenantA = "11111111-1111-1111-1111-111111111111"
	tenantB = "22222222-2222-2222-2222-222222222222"
	lockID  = "33333333-3333-3333-3333-333333333333"
)

func raw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// bound builds a token by hand with the envelope of a real one for
// kind "locks", tenant A, and the given cursor JSON.
func bound(t *testing.T, cursorJSON string) string {
	t.Helper()
	real := pagetoken.Encode("locks", tenantA, pagetoken.TimeID{CreatedAt: time.Unix(0, 0), ID: lockID})
	b, err := base64.RawURLEncoding.DecodeString(real)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	i := strings.Index(env, `"c":`)
	return raw(env[:i] + `"c":` + cursorJSON + `}`)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 4, 5, 6, 7, 890, time.FixedZone("x", 3600))
	tok := pagetoken.Encode("locks", tenantA, pagetoken.TimeID{CreatedAt: at, ID: lockID})
	c, first, err := pagetoken.Decode[pagetoken.TimeID]("locks", tenantA, tok)
	if err != nil || first || !c.CreatedAt.Equal(at) || c.CreatedAt.Location() != time.UTC || c.ID != lockID {
		t.Fatalf("Decode = %+v %v %v", c, first, err)
	}
	n, first, err := pagetoken.Decode[pagetoken.Name]("branches", pagetoken.Scope(tenantA, "repo"),
		pagetoken.Encode("branches", pagetoken.Scope(tenantA, "repo"), pagetoken.Name{Name: "feature/x"}))
	if err != nil || first || n.Name != "feature/x" {
		t.Fatalf("Decode name = %+v %v %v", n, first, err)
	}
	if c, first, err := pagetoken.Decode[pagetoken.TimeID]("locks", tenantA, ""); err != nil || !first || c != (pagetoken.TimeID{}) {
		t.Fatalf("empty token = %+v %v %v", c, first, err)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	good := pagetoken.Encode("locks", tenantA, pagetoken.TimeID{CreatedAt: time.Unix(0, 0), ID: lockID})
	tests := []struct {
		name, kind, scope, token string
	}{
		{"not base64", "locks", tenantA, "!!!"},
		{"base64 of garbage", "locks", tenantA, "W1tbW1tb"},
		{"too long", "locks", tenantA, strings.Repeat("A", pagetoken.MaxLen+1)},
		{"another list's token", "applications", tenantA, good},
		{"another tenant's token", "locks", tenantB, good},
		{"unknown envelope field", "locks", tenantA, raw(`{"k":"locks","b":"x","c":{},"z":1}`)},
		{"trailing data", "locks", tenantA, raw(`{"k":"locks"} {}`)},
		{"offset +23:59 at year 1 is before year 1 in UTC", "locks", tenantA, bound(t, `{"t":"0001-01-01T00:00:00+23:59","i":"`+lockID+`"}`)},
		{"offset -23:59 at 9999-12-31 is year 10000 in UTC", "locks", tenantA, bound(t, `{"t":"9999-12-31T23:00:00-23:59","i":"`+lockID+`"}`)},
		{"zero time", "locks", tenantA, bound(t, `{"t":"0001-01-01T00:00:00Z","i":"`+lockID+`"}`)},
		{"id not a uuid", "locks", tenantA, bound(t, `{"t":"2025-01-01T00:00:00Z","i":"x"}`)},
		{"id in braces", "locks", tenantA, bound(t, `{"t":"2025-01-01T00:00:00Z","i":"{`+lockID+`}"}`)},
		{"unknown cursor field", "locks", tenantA, bound(t, `{"t":"2025-01-01T00:00:00Z","i":"`+lockID+`","x":1}`)},
		{"cursor not an object", "locks", tenantA, bound(t, `[]`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := pagetoken.Decode[pagetoken.TimeID](tc.kind, tc.scope, tc.token)
			if repolock.ErrorCode(err) != repolock.EInvalid || repolock.ErrorMessage(err) != "page_token is not valid for this list" {
				t.Fatalf("err = %v, want invalid_argument", err)
			}
		})
	}
	names := []struct{ name, cursor string }{
		{"empty name", `{"n":""}`},
		{"overlong name", `{"n":"` + strings.Repeat("a", pagetoken.MaxNameLen+1) + `"}`},
		{"NUL in name", `{"n":"a\u0000b"}`},
	}
	for _, tc := range names {
		t.Run(tc.name, func(t *testing.T) {
			tok := pagetoken.Encode("tags", tenantA, pagetoken.Name{Name: "x"})
			b, _ := base64.RawURLEncoding.DecodeString(tok)
			env := string(b)
			tok = raw(env[:strings.Index(env, `"c":`)] + `"c":` + tc.cursor + `}`)
			if _, _, err := pagetoken.Decode[pagetoken.Name]("tags", tenantA, tok); repolock.ErrorCode(err) != repolock.EInvalid {
				t.Fatalf("err = %v, want invalid_argument", err)
			}
		})
	}
}
