package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// cli runs the api binary's run() in-process with the given environment.
func cli(t *testing.T, envv map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncBuffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return envv[k] }}
	code = run(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// TestStrictEnvironment: every environment variable is parsed as strictly
// as its flag: a value that does not parse stops the command with exit 2
// and a message naming the variable and the accepted form, before anything
// connects (no database is given).
func TestStrictEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		key  string
		val  string
		want string
	}{
		{[]string{"gc"}, "GC_MIN_AGE", "5", `invalid GC_MIN_AGE="5": want a duration with a unit, such as 30s, 5m or 1h30m`},
		{[]string{"gc"}, "GC_BATCH_SIZE", "abc", `invalid GC_BATCH_SIZE="abc": want a whole number, such as 500`},
		{[]string{"serve"}, "MIGRATE_ON_START", "no", `invalid MIGRATE_ON_START="no": want true or false (also 1/0, t/f)`},
		{[]string{"serve"}, "REQUEST_TIMEOUT", "30", `invalid REQUEST_TIMEOUT="30": want a duration with a unit, such as 30s, 5m or 1h30m`},
		{[]string{"serve"}, "GC_INTERVAL", "10", `invalid GC_INTERVAL="10": want a duration with a unit`},
		{[]string{"serve"}, "RATE_LIMIT", "fast", `invalid RATE_LIMIT="fast": want a number, such as 50 or 0.5`},
		{[]string{"serve"}, "RATE_BURST", "1.5", `invalid RATE_BURST="1.5": want a whole number`},
		{[]string{"serve"}, "RATE_ROWS_PER_REQUEST", "ten", `invalid RATE_ROWS_PER_REQUEST="ten": want a whole number`},
		{[]string{"serve"}, "TENANT_POOL_SHARE", "half", `invalid TENANT_POOL_SHARE="half": want a number`},
		{[]string{"serve"}, "TENANT_POOL_WAIT", "100", `invalid TENANT_POOL_WAIT="100": want a duration with a unit`},
		{[]string{"clean"}, "GC_TIMEOUT", "1", `invalid GC_TIMEOUT="1": want a duration with a unit`},
		{[]string{"gc"}, "EVENT_RETENTION", "90d", `invalid EVENT_RETENTION="90d": want a duration with a unit`},
		{[]string{"gc"}, "EVENT_RETENTION", "90s", `event retention must be at least 24h (or negative to keep rows forever), got 1m30s`},
		{[]string{"gc"}, "GC_RUNS_KEPT", "many", `invalid GC_RUNS_KEPT="many": want a whole number`},
		{[]string{"gc"}, "LOG_LEVEL", "verbose", `invalid --log-level / LOG_LEVEL "verbose": want debug, info, warn or error`},
		{[]string{"migrate", "up"}, "LOG_FORMAT", "xml", `invalid --log-format / LOG_FORMAT "xml": want text, json or auto`},
	} {
		t.Run(tc.key+"="+tc.val, func(t *testing.T) {
			code, stdout, stderr := cli(t, map[string]string{tc.key: tc.val}, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("api %s with %s=%s: exit %d, stderr %q; want 2 and %q", tc.args[0], tc.key, tc.val, code, stderr, tc.want)
			}
		})
	}
}

// TestCLIBehaviour: help on stdout with exit 0, the version, unknown
// commands naming themselves, usage errors with exit 2.
func TestCLIBehaviour(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		code       int
		stdout     string // substring ("" = must be empty)
		stderr     string // substring ("" = must be empty)
		stdoutNone bool
	}{
		{[]string{"--help"}, 0, "Usage: repolock COMMAND", "", false},
		{[]string{"help"}, 0, "Usage: repolock COMMAND", "", false},
		{[]string{"migrate", "--help"}, 0, "Usage: repolock migrate [flags] up | down", "", false},
		{[]string{"serve", "-h"}, 0, "--rate-limit", "", false},
		{[]string{"user", "create", "--help"}, 0, "Usage: repolock user", "", false},
		{[]string{"--version"}, 0, "revision ", "", false},
		{[]string{"version"}, 0, "built with go", "", false},
		{[]string{}, 2, "", "Usage: repolock COMMAND", true},
		{[]string{"frobnicate"}, 2, "", "repolock: unknown command \"frobnicate\"\nRun 'repolock --help' for the commands.\n", true},
		{[]string{"migrate", "sideways"}, 2, "", "repolock migrate: unknown command migrate sideways", true},
		{[]string{"user", "rename", "x"}, 2, "", "repolock user: unknown command user rename", true},
		{[]string{"locks", "steal", "x"}, 2, "", "repolock locks: unknown command locks steal", true},
		{[]string{"migrate", "down", "abc"}, 2, "", `repolock migrate: down takes a positive number of migrations to roll back (repolock migrate down 2), got "abc"`, true},
		{[]string{"migrate", "down", "0"}, 2, "", `got "0"`, true},
		{[]string{"migrate", "force"}, 2, "", "repolock migrate: missing N (repolock migrate force N)\nRun 'repolock migrate --help' for usage.\n", true},
		{[]string{"migrate", "force", "x"}, 2, "", `force takes a migration version, a whole number >= 0, got "x"`, true},
		{[]string{"migrate", "force", "999"}, 2, "", "force 999: this binary's migrations end at version", true},
		{[]string{"version", "extra"}, 2, "", `repolock version: unexpected argument "extra": repolock version takes no arguments`, true},
		{[]string{"console", "--help"}, 0, "Usage: repolock console", "", false},
		{[]string{"console"}, 2, "", "repolock console: missing what to do (repolock console sessions revoke)", true},
		{[]string{"console", "users"}, 2, "", "repolock console: unknown command console users", true},
		{[]string{"console", "sessions", "extend"}, 2, "", "repolock console: unknown command console sessions extend", true},
		{[]string{"console", "sessions"}, 2, "", "repolock console: missing the action on sessions", true},
		// A missing argument: one line naming it, one line of hint, never
		// the whole usage.
		{[]string{"normalize"}, 2, "", "repolock normalize: missing URL (repolock normalize URL...)\nRun 'repolock normalize --help' for usage.\n", true},
		{[]string{"report"}, 2, "", "repolock report: missing NAME (repolock report NAME)\n", true},
		{[]string{"user", "token"}, 2, "", "repolock user: missing NAME (repolock user token NAME)\n", true},
		{[]string{"user"}, 2, "", "repolock user: missing what to do: create NAME, list, token NAME, revoke NAME or delete NAME\n", true},
		{[]string{"user", "list", "x"}, 2, "", `repolock user: unexpected argument "x" (repolock user list)`, true},
		{[]string{"locks", "transfer", "id"}, 2, "", "repolock locks: missing USER (repolock locks transfer LOCK_ID|URL USER)\n", true},
		{[]string{"alias", "add", "a"}, 2, "", "repolock alias: missing TO (repolock alias add FROM TO)\n", true},
		{[]string{"reservation", "remove"}, 2, "", "repolock reservation: missing ID (repolock reservation remove ID)\n", true},
		{[]string{"migrate"}, 2, "", "repolock migrate: missing what to do: up, down [N|--all], version or force N\n", true},
	} {
		code, stdout, stderr := cli(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) ||
			(tc.stdoutNone && stdout != "") || (tc.stderr == "" && stderr != "") {
			t.Errorf("repolock %s: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout ~%q, stderr ~%q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestMigrateMessages: migrate down at version 0, a command against an
// unmigrated database, a dirty database and its way out (force).
func TestMigrateMessages(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t, false)
	envv := map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "error"}

	code, _, stderr := cli(t, envv, "migrate", "down")
	if code != 2 || !strings.Contains(stderr, "nothing to roll back: no migration is applied (version 0)") {
		t.Fatalf("down at version 0: exit %d %q", code, stderr)
	}
	code, _, stderr = cli(t, envv, "user", "list")
	if code != 1 || !strings.Contains(stderr, "run `repolock migrate up` first") || strings.Contains(stderr, "does not exist") {
		t.Fatalf("user list on an unmigrated database: exit %d %q", code, stderr)
	}
	code, stdout, stderr := cli(t, envv, "migrate", "up")
	if code != 0 {
		t.Fatalf("up: exit %d %q", code, stderr)
	}
	var st struct {
		Version, Latest uint
		Dirty           bool
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || st.Version != st.Latest || st.Dirty {
		t.Fatalf("up: %q %v", stdout, err)
	}
	code, _, stderr = cli(t, envv, "migrate", "down", "99")
	if code != 2 || !strings.Contains(stderr, "cannot roll back 99 migrations") {
		t.Fatalf("down 99: exit %d %q", code, stderr)
	}

	// Mark the last migration as failed half-way, as golang-migrate does.
	db := openURL(t, url)
	if _, err := db.ExecContext(t.Context(), `UPDATE schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	v := st.Version
	want := "migration " + itoa(v) + " failed half-way"
	code, _, stderr = cli(t, envv, "migrate", "up")
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "`repolock migrate force "+itoa(v)+"`") {
		t.Fatalf("up on a dirty database: exit %d %q", code, stderr)
	}
	code, _, stderr = cli(t, envv, "migrate", "version")
	if code != 0 || !strings.Contains(stderr, want) {
		t.Fatalf("version on a dirty database: exit %d %q", code, stderr)
	}
	code, stdout, stderr = cli(t, envv, "migrate", "force", itoa(v))
	if code != 0 || !strings.Contains(stdout, `"dirty":false`) || stderr != "" {
		t.Fatalf("force: exit %d %q %q", code, stdout, stderr)
	}
	code, _, stderr = cli(t, envv, "migrate", "up")
	if code != 0 {
		t.Fatalf("up after force: exit %d %q", code, stderr)
	}

	// Domain errors print their message only: no code prefix, no pq text.
	if code, _, stderr := cli(t, envv, "user", "create", "alice"); code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	code, _, stderr = cli(t, envv, "user", "create", "alice")
	if code != 1 || stderr != "repolock user: a user named \"alice\" already exists\n" {
		t.Fatalf("second create: exit %d %q", code, stderr)
	}
	code, _, stderr = cli(t, envv, "user", "token", "nobody")
	if code != 1 || strings.Contains(stderr, "not_found:") || strings.Contains(stderr, "pq:") || strings.Contains(stderr, "sql:") {
		t.Fatalf("token of nobody: exit %d %q", code, stderr)
	}
}

func itoa(v uint) string { return strconv.FormatUint(uint64(v), 10) }

// openURL opens a pool on url, closed when t ends.
func openURL(t *testing.T, url string) *database.DB {
	t.Helper()
	db, err := database.Open(t.Context(), url, database.PoolConfig{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestHelpListsOwnFlags: each command's --help lists the flags it has and
// no other: the migration URL where it migrates or listens, the reports URL
// where it reads reports, the prepared-statements flag where it works
// through DATABASE_URL (a pooler); no empty "Flags" heading; every
// description starts in one column; the usage never says "[flags]" for a
// command without any, and names the binary repolock.
func TestHelpListsOwnFlags(t *testing.T) {
	t.Parallel()
	has := map[string]map[string]bool{
		"migrate-database-url":   {"migrate": true, "serve": true, "events": true},
		"reports-database-url":   {"report": true, "serve": true},
		"db-prepared-statements": {"serve": true, "gc": true, "clean": true, "user": true, "locks": true, "normalize": true, "rekey": true, "alias": true, "report": true, "reservation": true, "console": true, "events": true},
	}
	for name := range commands {
		args := []string{name, "--help"}
		if name == "lease" {
			args = []string{"lease", "run", "--help"}
		}
		code, out, errOut := cli(t, nil, args...)
		if code != 0 || errOut != "" {
			t.Errorf("%s --help: exit %d, stderr %q", name, code, errOut)
			continue
		}
		if !strings.HasPrefix(out, "Usage: repolock "+strings.Join(args[:len(args)-1], " ")) || strings.Contains(out, "api ") {
			t.Errorf("%s --help does not name the binary repolock:\n%s", name, out)
		}
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		col, flags := -1, map[string]bool{}
		for i, line := range lines {
			if strings.HasPrefix(line, "Flags") && (i+1 == len(lines) || !strings.HasPrefix(lines[i+1], "  --")) {
				t.Errorf("%s --help: a Flags heading without flags:\n%s", name, out)
			}
			if !strings.HasPrefix(line, "  --") {
				continue
			}
			f := strings.Fields(line)
			flags[strings.TrimPrefix(f[0], "--")] = true
			// The description column: the first non-space after the
			// name (and its type), when on the same line.
			rest := strings.TrimPrefix(line, "  "+f[0])
			if len(f) > 1 && !strings.HasPrefix(rest, "  ") {
				rest = strings.TrimPrefix(rest, " "+f[1])
			}
			if trimmed := strings.TrimLeft(rest, " "); trimmed != "" {
				c := len(line) - len(trimmed)
				if col >= 0 && c != col {
					t.Errorf("%s --help: descriptions start in columns %d and %d:\n%s", name, col, c, out)
				}
				col = c
			}
		}
		if len(flags) == 0 && strings.Contains(out, "[flags]") {
			t.Errorf("%s --help says [flags] and lists none:\n%s", name, out)
		}
		for flag, where := range has {
			if flags[flag] != where[name] {
				t.Errorf("%s --help lists --%s: %v, want %v", name, flag, flags[flag], where[name])
			}
		}
	}
}

// TestLogFormat: auto (the default) is text on a terminal and JSON
// otherwise (a buffer, a pipe, a file); LOG_FORMAT or --log-format
// override it.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		format string
		json   bool
	}{{"", true}, {"auto", true}, {"json", true}, {"text", false}, {"TEXT", false}} {
		c := commonFlags{logLevel: "info", logFormat: tc.format, env: &env{stderr: &syncBuffer{}}}
		lc, err := c.logConfig()
		if err != nil || lc.JSON != tc.json {
			t.Errorf("log format %q to a buffer: JSON %v, %v; want %v", tc.format, lc.JSON, err, tc.json)
		}
	}
	c := commonFlags{logLevel: "info", logFormat: "yaml", env: &env{stderr: &syncBuffer{}}}
	if _, err := c.logConfig(); err == nil || !strings.Contains(err.Error(), "want text, json or auto") {
		t.Errorf("log format yaml: %v", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(devnull) || isTerminal(w) {
		t.Error("/dev/null or a pipe taken for a terminal")
	}
	// A terminal, where the test has one (go test's output usually is not).
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !isTerminal(tty) {
			t.Error("/dev/tty not taken for a terminal")
		}
		c := commonFlags{logLevel: "info", logFormat: "auto", env: &env{stderr: tty}}
		if lc, err := c.logConfig(); err != nil || lc.JSON {
			t.Errorf("auto on a terminal: JSON %v, %v", lc.JSON, err)
		}
	}
}
