package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
)

// TestNormalizeCommandAppliesStoredAliases: with a database, `repolock normalize`
// keys under the deployment's stored aliases, as the server does (issue 23:
// it printed the built-in key while the server keyed under the alias);
// without one it prints the built-in key and says on stderr that aliases
// are not applied.
func TestNormalizeCommandAppliesStoredAliases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := dbtest.NewWithURL(t)
	run := func(vars map[string]string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
		code := run(ctx, e, args)
		return code, out.String(), errb.String()
	}
	withDB := map[string]string{"DATABASE_URL": url, "LOG_LEVEL": "error"}
	noDB := map[string]string{"LOG_LEVEL": "error"}
	const raw = "git@gitlab-ssh.example.com:o/r.git"

	// Before the alias, the database's rules are the built-in ones.
	if code, out, errOut := run(withDB, "normalize", raw); code != 0 || out != "gitlab-ssh.example.com/o/r\n" || errOut != "" {
		t.Fatalf("normalize before the alias: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(withDB, "alias", "add", "gitlab-ssh.example.com", "gitlab.example.com"); code != 0 ||
		!strings.Contains(out, `"from": "gitlab-ssh.example.com"`) || !strings.Contains(out, `"to": "gitlab.example.com"`) {
		t.Fatalf("alias add: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run(withDB, "normalize", raw); code != 0 || out != "gitlab.example.com/o/r\n" || errOut != "" {
		t.Fatalf("normalize with the alias stored: %d %q %q; want gitlab.example.com/o/r", code, out, errOut)
	}
	// --database-url is a database too.
	if code, out, errOut := run(noDB, "normalize", "--database-url", url, raw); code != 0 || out != "gitlab.example.com/o/r\n" || errOut != "" {
		t.Fatalf("normalize --database-url: %d %q %q; want gitlab.example.com/o/r", code, out, errOut)
	}
	// Without a database: the built-in key, and a note that the
	// configured aliases were not applied.
	code, out, errOut := run(noDB, "normalize", raw)
	if code != 0 || out != "gitlab-ssh.example.com/o/r\n" ||
		errOut != "repolock normalize: no database (DATABASE_URL or --database-url): keyed under the built-in rules only; configured aliases are not applied\n" {
		t.Fatalf("normalize without a database: %d %q %q", code, out, errOut)
	}
}
