package tenants_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/tenants"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"alice", true},
		{"team-42", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"Alice", false},
		{"-alice", false},
		{"alice-", false},
		{"al_ice", false},
		{"al ice", false},
		{"ali.ce", false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.name), func(t *testing.T) {
			err := tenants.ValidateName(tc.name)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			}
			if err != nil && repolock.ErrorCode(err) != repolock.EInvalid {
				t.Fatalf("code %q", repolock.ErrorCode(err))
			}
		})
	}
}

func TestCreateAuthenticateRevoke(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	ts := newTenants(db)

	u, token, err := ts.Create(ctx, "alice", "Alice A")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(token, tenants.TokenPrefix) || len(token) < 40 {
		t.Fatalf("token %q", token)
	}
	got, err := ts.Authenticate(ctx, token)
	if err != nil || got.ID != u.ID || got.Name != "alice" || got.DisplayName != "Alice A" {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}
	// Only the hash is stored.
	var stored [][]byte
	if err := db.SelectContext(ctx, &stored, `SELECT token_hash FROM api_tokens`); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || !bytes.Equal(stored[0], tenants.HashToken(token)) {
		t.Fatalf("stored %x", stored)
	}

	second, err := ts.IssueToken(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "rlt_", token + "x", strings.ToUpper(token), "rla_" + token[4:]} {
		if _, err := ts.Authenticate(ctx, bad); repolock.ErrorCode(err) != repolock.EUnauthenticated {
			t.Errorf("Authenticate(%q) = %v, want unauthenticated", bad, err)
		}
	}
	n, err := ts.RevokeTokens(ctx, "alice")
	if err != nil || n != 2 {
		t.Fatalf("RevokeTokens = %d, %v; want 2", n, err)
	}
	for _, tok := range []string{token, second} {
		if _, err := ts.Authenticate(ctx, tok); repolock.ErrorCode(err) != repolock.EUnauthenticated {
			t.Errorf("revoked token still authenticates: %v", err)
		}
	}
	if n, err := ts.RevokeTokens(ctx, "alice"); err != nil || n != 0 {
		t.Fatalf("second revoke = %d, %v", n, err)
	}
	if _, err := ts.RevokeTokens(ctx, "nobody"); repolock.ErrorCode(err) != repolock.ENotFound {
		t.Fatalf("revoke unknown user: %v", err)
	}
}

// TestCreateConcurrentSameName: exactly one of many concurrent creations of
// one name wins; the others get already_exists and leave no token behind.
func TestCreateConcurrentSameName(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	ts := newTenants(db)
	const n = 16
	var wg sync.WaitGroup
	codes := make([]repolock.Code, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := ts.Create(ctx, "contested", "")
			codes[i] = repolock.ErrorCode(err)
		}()
	}
	wg.Wait()
	wins := 0
	for _, c := range codes {
		switch c {
		case "":
			wins++
		case repolock.EAlreadyExists:
		default:
			t.Errorf("unexpected code %q", c)
		}
	}
	if wins != 1 {
		t.Fatalf("%d creations won, want 1", wins)
	}
	var tokens int
	if err := db.GetContext(ctx, &tokens, `SELECT count(*) FROM api_tokens`); err != nil || tokens != 1 {
		t.Fatalf("tokens = %d, %v; want 1", tokens, err)
	}
	list, err := ts.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "contested" {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

func TestExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	ts := newTenants(db)
	tests := []struct {
		id   string
		want bool
	}{
		{alice.ID, true},
		{"00000000-0000-0000-0000-000000000000", false},
		{"not-a-uuid", false},
		{"", false},
	}
	for _, tc := range tests {
		got, err := ts.Exists(ctx, tc.id)
		if err != nil || got != tc.want {
			t.Errorf("Exists(%q) = %v, %v; want %v", tc.id, got, err, tc.want)
		}
	}
}
