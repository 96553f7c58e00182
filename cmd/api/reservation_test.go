package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
)

func TestReservationCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := dbtest.NewWithURL(t)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			switch k {
			case "DATABASE_URL":
				return url
			case "LOG_LEVEL":
				return "error"
			}
			return ""
		}}
		code := run(ctx, e, args)
		return code, out.String(), errb.String()
	}
	dbtest.NewTenant(t, db, "acme")
	eve := dbtest.NewTenant(t, db, "eve")
	dbtest.NewLock(t, db, eve.ID, "github.com/acme/old", 0)

	if code, out, errOut := run("reservation", "--dry-run", "add", "https://GitHub.com/Acme", "acme"); code != 0 ||
		!strings.Contains(out, `"prefix": "github.com/acme"`) || !strings.Contains(out, "github.com/acme/old") {
		t.Fatalf("add --dry-run: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run("reservation", "add", "github.com/acme", "acme"); code != 3 || !strings.Contains(out, "github.com/acme/old") || !strings.Contains(errOut, "keep") {
		t.Fatalf("add over eve's lock: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run("reservation", "add", "", "acme"); code != 2 {
		t.Fatalf("add an empty prefix: %d %q", code, errOut)
	}
	if code, out, errOut := run("reservation", "--keep", "add", "github.com/acme", "acme"); code != 0 || !strings.Contains(errOut, "1 locks of other users grandfathered") {
		t.Fatalf("add --keep: %d %q %q", code, out, errOut)
	}
	code, out, _ := run("reservation", "list")
	if code != 0 || !strings.Contains(out, "github.com/acme  acme  ") {
		t.Fatalf("list: %d %q", code, out)
	}
	var id string
	if err := db.GetContext(ctx, &id, `SELECT id FROM reservations`); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run("reservation", "remove", id); code != 0 {
		t.Fatalf("remove: %d %q", code, errOut)
	}
	if code, _, errOut := run("reservation", "remove", id); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("remove again: %d %q", code, errOut)
	}
	if code, _, _ := run("reservation", "bogus"); code != 2 {
		t.Fatalf("bogus: %d", code)
	}
}
