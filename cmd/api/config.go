package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/repolock/repolock/internal/database"
)

// flagSet is one command's flags. Its env* helpers give a flag its default
// from the environment and keep the variables that did not parse; parse
// reports them before it parses the arguments. Nothing is shared between
// commands: each command makes its own flagSet.
type flagSet struct {
	*flag.FlagSet
	env     *env
	envErrs []string // environment variables that did not parse (badEnv)
}

// progName is the binary's one name: what `make install` installs, the
// image runs and every help text and message says.
const progName = "repolock"

// newFlagSet returns a flagSet that reports errors instead of exiting, with
// a usage text naming the command and listing only the flags it registers
// (printFlags).
func newFlagSet(e *env, name, argsUsage, summary string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(progName+" "+name, flag.ContinueOnError), env: e}
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		line := "Usage: " + fs.Name()
		if hasFlags(fs.FlagSet) {
			line += " [flags]"
		}
		if argsUsage != "" {
			line += " " + argsUsage
		}
		fmt.Fprintf(fs.Output(), "%s\n\n%s\n", line, strings.TrimRight(summary, "\n"))
		printFlags(fs.Output(), fs.FlagSet)
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// helpWidth is where printFlags wraps the descriptions.
const helpWidth = 100

// printFlags lists fs's flags, one aligned entry each ("--name TYPE" then
// the description, wrapped under itself), under a heading only when there
// are flags.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	type entry struct{ name, usage string }
	var entries []entry
	env := false
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		if def := f.DefValue; def != "" && def != "false" && def != "0" {
			if typ == "string" {
				def = strconv.Quote(def)
			}
			usage += " (default " + def + ")"
		}
		env = env || strings.Contains(usage, "[")
		entries = append(entries, entry{name, usage})
	})
	if len(entries) == 0 {
		return
	}
	if env {
		fmt.Fprintln(w, "\nFlags (a NAME in brackets is the environment variable the flag defaults from):")
	} else {
		fmt.Fprintln(w, "\nFlags:")
	}
	col := 0
	for _, e := range entries {
		col = max(col, len(e.name))
	}
	col = min(col, 30) + 4 // two spaces before, two after
	for _, e := range entries {
		line := "  " + e.name
		if len(line)+2 > col {
			fmt.Fprintln(w, line)
			line = ""
		}
		words := strings.Fields(e.usage)
		cur := line + strings.Repeat(" ", col-len(line))
		first := true
		for _, word := range words {
			if !first && len(cur)+1+len(word) > helpWidth {
				fmt.Fprintln(w, cur)
				cur = strings.Repeat(" ", col)
				first = true
			}
			if !first {
				cur += " "
			}
			cur += word
			first = false
		}
		fmt.Fprintln(w, cur)
	}
}

// argError prints one line saying what is wrong with the command's
// arguments, then where to read its usage, and returns errUsage (exit 2):
// never the whole usage.
func argError(fs *flagSet, format string, args ...any) error {
	fmt.Fprintf(fs.env.stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(fs.env.stderr, "Run '%s --help' for usage.\n", fs.Name())
	return errUsage
}

// wantAction checks a command with actions (repolock user create NAME,
// ...): pos[0] is one of actions' keys, and the rest are that action's
// arguments (wantArgs). missing says what to do when no action is given.
func wantAction(fs *flagSet, pos []string, missing string, actions map[string][]string) error {
	if len(pos) == 0 {
		return argError(fs, "missing what to do: %s", missing)
	}
	names, ok := actions[pos[0]]
	if !ok {
		return errUnknownAction(fs, pos[0])
	}
	return wantArgs(fs, strings.TrimPrefix(fs.Name(), progName+" ")+" "+pos[0], pos[1:], names...)
}

// wantArgs checks the arguments got of the form "form" (the command and
// its action, such as "user token"), whose arguments are names (a last
// name ending in "..." takes one or more): the first one missing, or the
// first one too many, is argError.
func wantArgs(fs *flagSet, form string, got []string, names ...string) error {
	variadic := len(names) > 0 && strings.HasSuffix(names[len(names)-1], "...")
	usage := strings.TrimSpace(form + " " + strings.Join(names, " "))
	if len(got) < len(names) {
		return argError(fs, "missing %s (%s %s)", strings.TrimSuffix(names[len(got)], "..."), progName, usage)
	}
	if len(got) > len(names) && !variadic {
		return argError(fs, "unexpected argument %q (%s %s)", got[len(names)], progName, usage)
	}
	return nil
}

// parse parses args, allowing flags before, between and after the
// positional arguments (as in "migrate down --all"), and returns the
// positional ones. Asked for help, it prints the usage on stdout and
// returns flag.ErrHelp (exit 0). An environment variable that did not
// parse, or a flag that does not, is errUsage (exit 2); everything after
// "--" is positional.
func (fs *flagSet) parse(args []string) ([]string, error) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--h" || a == "-help" || a == "--help" {
			fs.SetOutput(fs.env.stdout)
			fs.Usage()
			return nil, flag.ErrHelp
		}
	}
	if len(fs.envErrs) > 0 {
		for _, msg := range fs.envErrs {
			fmt.Fprintf(fs.env.stderr, "%s: %s\n", fs.Name(), msg)
		}
		return nil, errUsage
	}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// fs.Parse stops at the first non-flag, or consumes "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// commonFlags are the flags every database-using command has.
type commonFlags struct {
	databaseURL string
	logLevel    string
	logFormat   string
	env         *env
	db          dbFlags // dbflags.go
}

// registerPatience adds --connect-timeout, for the commands that connect
// and then work (every one but serve, which listens while the database is
// down and waits for it on its own).
func (c *commonFlags) registerPatience(fs *flagSet) {
	fs.DurationVar(&c.db.connectTimeout, "connect-timeout", fs.envDuration("CONNECT_TIMEOUT", DefaultConnectTimeout),
		"wait this long for an unreachable database (refused, restarting, failing over), retrying with backoff and logging what the command waits for; 0 is one attempt [CONNECT_TIMEOUT]")
}

// register adds the database URL, the log flags and the database settings
// that apply to the command (uses: dbflags.go).
func (c *commonFlags) register(fs *flagSet, uses dbUses) {
	// Secrets are read from the environment after parsing, never used as
	// flag defaults: --help would print them.
	fs.StringVar(&c.databaseURL, "database-url", "", "Postgres connection URL [DATABASE_URL]")
	c.env = fs.env
	c.db.register(fs, uses)
	c.registerLog(fs)
}

// registerLog adds --log-level and --log-format.
func (c *commonFlags) registerLog(fs *flagSet) {
	c.env = fs.env
	fs.StringVar(&c.logLevel, "log-level", fs.envOr("LOG_LEVEL", "info"), "log level: debug, info, warn, error [LOG_LEVEL]")
	fs.StringVar(&c.logFormat, "log-format", fs.envOr("LOG_FORMAT", "auto"), "log format: text, json, or auto: text on a terminal, json otherwise [LOG_FORMAT]")
}

// logConfig is the validated --log-level and --log-format.
type logConfig struct {
	Level slog.Level
	JSON  bool // false: text
}

func (c *commonFlags) logConfig() (logConfig, error) {
	var lc logConfig
	if err := lc.Level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return logConfig{}, &exitError{code: 2, err: fmt.Errorf("invalid --log-level / LOG_LEVEL %q: want debug, info, warn or error", c.logLevel)}
	}
	switch strings.ToLower(c.logFormat) {
	case "json":
		lc.JSON = true
	case "text":
	case "auto", "":
		lc.JSON = c.env == nil || !isTerminal(c.env.stderr)
	default:
		return logConfig{}, &exitError{code: 2, err: fmt.Errorf("invalid --log-format / LOG_FORMAT %q: want text, json or auto", c.logFormat)}
	}
	return lc, nil
}

// isTerminal reports whether w is a terminal: where logs are read by a
// person, as text; anything else (a file, a pipe, /dev/null, a journal, a
// container runtime's log) gets JSON.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && fileIsTerminal(f)
}

// newLogger returns the logger lc describes, writing to w.
func newLogger(w io.Writer, lc logConfig) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lc.Level}
	if lc.JSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func (c *commonFlags) logger(e *env) (*slog.Logger, error) {
	lc, err := c.logConfig()
	if err != nil {
		return nil, err
	}
	return newLogger(e.stderr, lc), nil
}

func (c *commonFlags) open(ctx context.Context) (*database.DB, error) {
	if c.databaseURL == "" {
		c.databaseURL = c.env.getenv("DATABASE_URL")
	}
	if c.databaseURL == "" {
		return nil, fmt.Errorf("no database: set DATABASE_URL or --database-url (make run and make test find or start one with scripts/pg-ensure.sh)")
	}
	if c.db.connectTimeout < 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("--connect-timeout must not be negative")}
	}
	if c.db.logger == nil {
		logger, err := c.logger(c.env)
		if err != nil {
			return nil, err
		}
		c.db.logger = logger
	}
	return c.db.open(ctx, c.databaseURL, database.PoolConfig{})
}

// connect returns the logger and an open pool: what every command that
// talks to the database starts with.
func (c *commonFlags) connect(ctx context.Context, e *env) (*slog.Logger, *database.DB, error) {
	logger, err := c.logger(e)
	if err != nil {
		return nil, nil, err
	}
	c.db.logger = logger
	db, err := c.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	return logger, db, nil
}

// noArgs is argError when positional arguments were given to a command
// that takes none.
func noArgs(fs *flagSet, pos []string) error {
	if len(pos) != 0 {
		return argError(fs, "unexpected argument %q: %s takes no arguments", pos[0], fs.Name())
	}
	return nil
}

// The env* helpers give a flag its default from an environment variable,
// parsed as strictly as the flag itself: a value that does not parse is
// recorded on fs (the flag keeps its built-in default for --help) and parse
// then stops the command with exit 2 and a message naming the variable and
// the accepted form. An empty variable is unset.

func (fs *flagSet) envOr(key, def string) string {
	if v := fs.env.getenv(key); v != "" {
		return v
	}
	return def
}

func (fs *flagSet) envBool(key string, def bool) bool {
	if v := fs.env.getenv(key); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fs.badEnv(key, v, "true or false (also 1/0, t/f)")
			return def
		}
		return b
	}
	return def
}

func (fs *flagSet) envDuration(key string, def time.Duration) time.Duration {
	if v := fs.env.getenv(key); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fs.badEnv(key, v, "a duration with a unit, such as 30s, 5m or 1h30m")
			return def
		}
		return d
	}
	return def
}

func (fs *flagSet) envInt(key string, def int) int {
	if v := fs.env.getenv(key); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fs.badEnv(key, v, "a whole number, such as 500")
			return def
		}
		return n
	}
	return def
}

func (fs *flagSet) envFloat(key string, def float64) float64 {
	if v := fs.env.getenv(key); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			fs.badEnv(key, v, "a number, such as 50 or 0.5")
			return def
		}
		return f
	}
	return def
}

// badEnv records an environment variable that does not parse. A long
// value is cut: the variable may hold a secret.
func (fs *flagSet) badEnv(key, value, form string) {
	if len(value) > 64 {
		value = value[:64] + "..."
	}
	fs.envErrs = append(fs.envErrs, fmt.Sprintf("invalid %s=%q: want %s", key, value, form))
}
