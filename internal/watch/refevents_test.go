package watch_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/watch"
)

// TestApplicationAndCredentialEvents: a tenant's watch sees its
// Applications and Credentials come and go, one event each, naming them:
// the create that makes the lock and the delete that frees it as the
// lock's acquired and released events, the others as their own kinds. The
// kinds filter selects them either way, from the database and from the
// buffer alike; another tenant sees none of them.
func TestApplicationAndCredentialEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := dbtest.NewWithURL(t)
	svc := apps.New(db, locks.New(db, locks.Fixed(normalize.Default()), nil))
	alice, bob := dbtest.NewTenant(t, db, "alice"), dbtest.NewTenant(t, db, "bob")
	aliceSc, bobSc := watch.Scope{TenantID: alice.ID}, watch.Scope{TenantID: bob.ID}
	fromDB := newService(db) // never started: every read is a database read
	buffered := listening(t, db, url, false, 50*time.Millisecond)
	waitFor(t, "listener connected", buffered.Listening)
	heads := map[*watch.Service]map[string]string{}
	for _, s := range []*watch.Service{fromDB, buffered} {
		heads[s] = map[string]string{"alice": awaitHead(t, s, aliceSc), "bob": awaitHead(t, s, bobSc)}
	}

	const repo = "https://github.com/acme/events"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	a1, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a1", RepoURL: repo})
	must(err)
	a2, err := svc.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a2", RepoURL: repo + ".git"})
	must(err)
	c1, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c1", RepoURL: repo, SecretRef: "k8s://ns/key"})
	must(err)
	if _, err := svc.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "b1", RepoURL: repo}); err == nil {
		t.Fatal("bob created an application on alice's repository")
	}
	must(svc.DeleteApplication(ctx, alice.ID, a1.ID))
	must(svc.DeleteRepositoryCredential(ctx, alice.ID, c1.ID))
	// A credential on its own repository: created with its lock, deleted
	// with it.
	c2, err := svc.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c2", RepoURL: "https://github.com/acme/other", SecretRef: "k8s://ns/key"})
	must(err)
	must(svc.DeleteRepositoryCredential(ctx, alice.ID, c2.ID))
	must(svc.DeleteApplication(ctx, alice.ID, a2.ID))

	lock := a1.LockID
	all := []string{
		"acquired application a1 " + a1.ID + " " + lock,
		"application_created application a2 " + a2.ID + " " + lock,
		"credential_created credential c1 " + c1.ID + " " + lock,
		"denied  " + lock,
		"application_deleted application a1 " + a1.ID + " " + lock,
		"credential_deleted credential c1 " + c1.ID + " " + lock,
		"acquired credential c2 " + c2.ID + " " + c2.LockID,
		"released credential c2 " + c2.ID + " " + c2.LockID,
		"released application a2 " + a2.ID + " " + lock,
	}
	pick := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	for _, tc := range []struct {
		who   string
		kinds []string
		want  []string
	}{
		{"alice", nil, all},
		{"alice", []string{"application_created", "application_deleted"}, pick(0, 1, 4, 8)},
		{"alice", []string{"credential_created"}, pick(2, 6)},
		{"alice", []string{"credential_deleted", "denied"}, pick(3, 5, 7)},
		{"alice", []string{"acquired"}, pick(0, 6)},
		{"bob", nil, pick(3)},
	} {
		for name, s := range map[string]*watch.Service{"database": fromDB, "buffer": buffered} {
			t.Run(fmt.Sprintf("%s/%s/%s", name, tc.who, strings.Join(tc.kinds, ",")), func(t *testing.T) {
				sc := aliceSc
				if tc.who == "bob" {
					sc = bobSc
				}
				got := readAll(t, s, sc, heads[s][tc.who], tc.kinds, len(tc.want))
				if !slices.Equal(got, tc.want) {
					t.Fatalf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
				}
			})
		}
	}
}

// readAll reads the events of kinds after cursor until want have come
// (the horizon may trail behind other tests' transactions), as "kind
// application|credential name id lock".
func readAll(t *testing.T, s *watch.Service, sc watch.Scope, cursor string, kinds []string, want int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		ch := s.Changed()
		p, err := s.Read(ctx, sc, cursor, kinds, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			what := ""
			switch {
			case e.Application != "":
				what = "application " + e.Application + " " + e.ApplicationID
			case e.Credential != "":
				what = "credential " + e.Credential + " " + e.CredentialID
			}
			got = append(got, e.Kind+" "+what+" "+e.LockID)
		}
		cursor = p.Cursor
		if len(got) >= want || len(p.Events) > 0 {
			continue
		}
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond): // the unstarted service is never woken
		case <-ctx.Done():
			t.Fatalf("waiting for %d events: got %v", want, got)
		}
	}
	return got
}

func TestMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kinds       []string
		kind        string
		app, cred   bool
		want        bool
		description string
	}{
		{nil, "acquired", false, false, true, "no filter"},
		{[]string{"acquired"}, "acquired", true, false, true, "its own kind"},
		{[]string{"application_created"}, "acquired", true, false, true, "a create that made the lock"},
		{[]string{"application_created"}, "acquired", false, false, false, "a bare acquire"},
		{[]string{"application_created"}, "acquired", false, true, false, "a credential's"},
		{[]string{"credential_created"}, "acquired", false, true, true, "a credential's create"},
		{[]string{"application_deleted"}, "released", true, false, true, "a delete that freed the lock"},
		{[]string{"credential_deleted"}, "released", false, true, true, "a credential's delete"},
		{[]string{"application_deleted"}, "collected", true, false, false, "not a delete"},
		{[]string{"released"}, "application_deleted", true, false, false, "a lock that stays"},
	} {
		if got := watch.Matches(tc.kinds, tc.kind, tc.app, tc.cred); got != tc.want {
			t.Errorf("%s: Matches(%v, %s, %v, %v) = %v", tc.description, tc.kinds, tc.kind, tc.app, tc.cred, got)
		}
	}
}
