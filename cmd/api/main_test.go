package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the package's tests with TMPDIR set to a directory of
// their own, removed at the end: servers built without ADMIN_TOKEN
// generate one into a new temporary file (generateAdminToken), and the
// tests used to leave those files behind in /tmp, five per run.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "repolock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Setenv("TMPDIR", dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}
