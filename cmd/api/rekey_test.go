package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/rekey"
)

func TestRekeyAndAliasCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := dbtest.NewWithURL(t)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return url
			}
			if k == "LOG_LEVEL" {
				return "error"
			}
			return ""
		}}
		code := run(ctx, e, args)
		return code, out.String(), errb.String()
	}
	// A lock written by a version 1 service: v1 wrote ports with ':'.
	bob := dbtest.NewTenant(t, db, "bob").ID
	var lockID string
	if err := db.GetContext(ctx, &lockID, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		VALUES ('gitlab.example.com:2222/g/r', 1, $1) RETURNING id`, bob); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `WITH a AS (INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
		VALUES ($1, 'web', 'ssh://git@gitlab.example.com:2222/g/r.git', 'gitlab.example.com:2222/g/r') RETURNING id)
		INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT id, $2 FROM a`, bob, lockID); err != nil {
		t.Fatal(err)
	}

	decode := func(out string) rekey.Report {
		t.Helper()
		var r rekey.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("report %q: %v", out, err)
		}
		return r
	}
	// The v1 key moves in place to its current key (no lock created).
	code, out, errOut := run("rekey", "--dry-run")
	if r := decode(out); code != 0 || !r.DryRun || r.StaleLocks != 1 || r.MovedReferences != 1 || r.CreatedLocks != 0 {
		t.Fatalf("rekey --dry-run: %d %+v %q", code, r, errOut)
	}
	// The alias: SSH on 2222 is the same GitLab as HTTPS. It re-keys the
	// locks on its endpoint at once; the v1 lock's key
	// (gitlab.example.com:2222/...) is on no endpoint it touches, so api
	// rekey moves it below.
	if code, out, errOut = run("alias", "add", "GitLab.example.com+2222", "gitlab.example.com"); code != 0 ||
		!strings.Contains(out, `"from": "gitlab.example.com+2222"`) || !strings.Contains(out, `"rekeyed_locks": 0`) ||
		!strings.Contains(errOut, "0 locks re-keyed") {
		t.Fatalf("alias add: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = run("alias", "add", "gitlab.example.com+2222", "x.example"); code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("alias add twice: %d %q", code, errOut)
	}
	if code, _, errOut = run("alias", "add", "gitlab.example.com", "gitlab.example.com+2222"); code != 2 || !strings.Contains(errOut, "alias target lies under an alias source") {
		t.Fatalf("alias add a chain: %d %q", code, errOut)
	}
	if code, out, _ = run("alias", "list"); code != 0 || !strings.Contains(out, "gitlab.example.com+2222  gitlab.example.com  ") {
		t.Fatalf("alias list: %d %q", code, out)
	}
	code, out, errOut = run("rekey", "--batch-size", "1")
	r := decode(out)
	if code != 0 || r.StaleLocks != 1 || r.Rekeyed != 1 || r.MovedReferences != 1 || r.ReleasedLocks != 0 || r.CreatedLocks != 0 {
		t.Fatalf("rekey: %d %+v %q", code, r, errOut)
	}
	var key string
	if err := db.GetContext(ctx, &key, `SELECT o.git_repository_url FROM RepositoryLockOwner o`); err != nil || key != "gitlab.example.com/g/r" {
		t.Fatalf("lock after rekey: %q %v", key, err)
	}
	if code, out, _ = run("rekey"); code != 0 || decode(out).StaleLocks != 0 {
		t.Fatalf("second rekey: %d %q", code, out)
	}
	if code, _, _ = run("rekey", "--batch-size", "0"); code != 2 {
		t.Fatalf("rekey --batch-size 0: %d", code)
	}
	// Removing the alias moves the lock back: its application is spelled
	// with port 2222.
	if code, _, errOut = run("alias", "remove", "gitlab.example.com+2222"); code != 0 || !strings.Contains(errOut, "1 locks re-keyed") {
		t.Fatalf("alias remove: %d %q", code, errOut)
	}
	if err := db.GetContext(ctx, &key, `SELECT o.git_repository_url FROM RepositoryLockOwner o`); err != nil || key != "gitlab.example.com+2222/g/r" {
		t.Fatalf("lock after the alias's removal: %q %v", key, err)
	}
	if code, _, errOut = run("alias", "remove", "gitlab.example.com+2222"); code != 1 || !strings.Contains(errOut, "no alias from gitlab.example.com+2222") {
		t.Fatalf("alias remove twice: %d %q", code, errOut)
	}
	if code, _, _ = run("alias", "frobnicate"); code != 2 {
		t.Fatalf("alias usage: %d", code)
	}
}
