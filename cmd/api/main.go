// Command api builds repolock's one binary, installed as repolock: the HTTP server and the operators'
// commands (migrations, tenants, GC, reports, URL normalization).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"

	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/version"
)

// command is one subcommand. run gets the arguments after the command name
// and returns an error to report; errUsage means the arguments were wrong.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// commands is the subcommand table.
var commands = map[string]command{
	"serve":   {"run the HTTP API server", runServe},
	"migrate": {"apply or roll back database migrations: up | down [N] | version | force N", runMigrate},
	"version": {"print the version and VCS revision of this binary (also: repolock --version)", runVersion},
	"user":    {"manage tenants: create NAME | list | token NAME | revoke NAME | delete NAME", runTenant},
	// Domain commands, one line each; their code lives in <command>.go.
	"gc":        {"run one global lock GC (and the repository Cleaner); skipped when another is running", runGC},
	"clean":     {"run the repository Cleaner alone (data of deleted repository instances)", runClean},
	"report":    {"print a reporting view: ownership | locks | orphan_locks | denials | gc_runs | normalizer_versions | rekey_conflicts | transfers | reservations; verify (exit 1 on drift of the ownership figures) | fold", runReport},
	"normalize": {"print the lock key of each repository URL", runNormalize},
	"locks":     {"show ownership locks: owner URL... | list USER", runLocks},
	"rekey":     {"re-key locks made under older normalization rules or another alias set", runRekey},
	"alias":     {"manage normalizer aliases: list | add FROM TO | remove FROM", runAlias},
	"console":   {"manage the operator console: sessions revoke (ends every session)", runConsole},
	"lease":     {"hold a lease while a command runs: run --key K --ttl 15s -- COMMAND [ARG...]", runLease},
	"events":    {"print lock events in the watch's order; --follow tails them", runEvents},

	// Reservations (issue 25): reservation.go.
	"reservation": {"manage reservations (key prefixes of a tenant): list | add PREFIX TENANT | remove ID", runReservation},
}

// env is what commands share: the streams and the environment, so tests
// can capture and set them.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// syncWriter serializes the writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

var errUsage = errors.New("usage")

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, e *env, args []string) int {
	// The logger (background goroutines: the watch's listener, the
	// scheduled GC) and the command itself both write to stderr; an
	// *os.File takes concurrent writes, a test's bytes.Buffer does not.
	if _, isFile := e.stderr.(*os.File); !isFile {
		e = &env{stdout: e.stdout, stderr: &syncWriter{w: e.stderr}, getenv: e.getenv}
	}
	if len(args) == 0 {
		usage(e.stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(e.stdout)
		return 0
	case "--version", "-version", "-v":
		if len(args) != 1 {
			fmt.Fprintf(e.stderr, "%s: %s takes no arguments\n", progName, args[0])
			return 2
		}
		printVersion(e.stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "%s: unknown command %q\nRun '%s --help' for the commands.\n", progName, args[0], progName)
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ee):
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(e.stderr, "%s %s: %s\n", progName, args[0], cliMessage(ee.err))
		}
		return ee.code
	default:
		fmt.Fprintf(e.stderr, "%s %s: %s\n", progName, args[0], cliMessage(err))
		return 1
	}
}

// cliMessage is what the CLI prints for an error: the domain message of a
// *repolock.Error (no code prefix, no Postgres text), with the cause only
// when the error is internal or the database is unavailable (the operator
// needs it then); a missing table is the hint to migrate; everything else
// without operation prefixes.
func cliMessage(err error) string {
	if msg, ok := migrationMessage(err); ok {
		return msg
	}
	var de *repolock.Error
	if errors.As(err, &de) {
		switch de.Code {
		case repolock.EInternal, repolock.EUnavailable:
			if de.Err != nil {
				return de.Message + ": " + repolock.WithoutOps(de.Err)
			}
		}
		return de.Message
	}
	return repolock.WithoutOps(err)
}

// errUnknownAction is errUsage for an unknown action of a command with
// actions (migrate, user, locks): it names the whole command.
func errUnknownAction(fs *flagSet, action string) error {
	return argError(fs, "unknown command %s %s", strings.TrimPrefix(fs.Name(), progName+" "), action)
}

func printVersion(w io.Writer) {
	v := version.Get()
	rev := v.Revision
	if rev == "" {
		rev = "unknown"
	}
	if v.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "%s %s\nrevision %s\n", progName, v.Version, rev)
	if v.Time != "" {
		fmt.Fprintf(w, "commit time %s\n", v.Time)
	}
	fmt.Fprintf(w, "built with %s\n", v.GoVersion)
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "", "Prints the version and the VCS revision the binary was built from (what GET /version answers).")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	printVersion(e.stdout)
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s COMMAND [flags] [args]\n", progName)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Run '%s COMMAND --help' for a command's flags; '%s --version' for the build.\n", progName, progName)
}
