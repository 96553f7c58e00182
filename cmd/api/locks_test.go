package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/dbtest"
)

func TestLocksCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := dbtest.NewWithURL(t)
	svc := testServices(t, db)
	alice, _, err := svc.tenants.Create(ctx, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	app, err := svc.apps.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "web", RepoURL: "https://github.com/acme/web"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.apps.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{Name: "c", RepoURL: "git@github.com:acme/web.git", SecretRef: "vault://w"}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return url
			}
			return ""
		}}
		code := run(ctx, e, args)
		return code, out.String(), errb.String()
	}

	code, out, errOut := run("locks", "owner", "ssh://git@GitHub.com/acme/web.git")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "NORMALIZED URL") ||
		strings.Join(strings.Fields(lines[1])[:5], " ") != "github.com/acme/web alice "+app.LockID+" 1 1" {
		t.Fatalf("owner: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run("locks", "owner", "https://github.com/acme/free", "https://tok:SECRET@/bad")
	if code != 1 || !strings.Contains(out, "github.com/acme/free  ") || !strings.Contains(errOut, "argument 2: invalid repository URL") || strings.Contains(errOut, "SECRET") {
		t.Fatalf("free and invalid: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run("locks", "list", "alice")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[1])[:4], " ") != app.LockID+" github.com/acme/web 1 1" {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = run("locks", "list", "nobody"); code != 1 || !strings.Contains(errOut, `user "nobody" not found`) {
		t.Fatalf("list unknown: %d %q", code, errOut)
	}
	if code, _, _ = run("locks", "frobnicate", "x"); code != 2 {
		t.Fatalf("usage: %d", code)
	}

	// transfer: refused while alice uses the lock (listed, exit 1), then
	// with -references delete; by URL or by lock id.
	if _, _, err := svc.tenants.Create(ctx, "bob", ""); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run("locks", "transfer", "https://github.com/acme/web", "bob")
	if code != 1 || !strings.Contains(errOut, "still used by alice") || !strings.Contains(errOut, "in use by application web") ||
		!strings.Contains(errOut, "in use by credential c") {
		t.Fatalf("refused transfer: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run("locks", "transfer", "-references", "delete", app.LockID, "bob")
	if code != 0 || !strings.Contains(out, "transferred github.com/acme/web ("+app.LockID+") from alice to bob; deleted 2 references") {
		t.Fatalf("transfer: %d %q %q", code, out, errOut)
	}
	code, out, _ = run("locks", "owner", "https://github.com/acme/web")
	if code != 0 || !strings.Contains(out, " bob ") {
		t.Fatalf("owner after transfer: %d %q", code, out)
	}
	if code, _, errOut = run("locks", "transfer", "https://github.com/acme/free", "bob"); code != 1 || !strings.Contains(errOut, "no lock on") {
		t.Fatalf("transfer of a free URL: %d %q", code, errOut)
	}
	if code, _, _ = run("locks", "transfer", app.LockID); code != 2 {
		t.Fatalf("transfer usage: %d", code)
	}
}
