package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
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

// newFlagSet returns a flagSet that reports errors instead of exiting, with
// a usage text naming the command.
func newFlagSet(e *env, name, argsUsage, summary string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet("api "+name, flag.ContinueOnError), env: e}
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: api %s [flags] %s\n\n%s\n\nFlags (each defaults to the environment variable named in brackets):\n", name, argsUsage, summary)
		fs.PrintDefaults()
	}
	return fs
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

func (c *commonFlags) register(fs *flagSet) {
	// Secrets are read from the environment after parsing, never used as
	// flag defaults: --help would print them.
	fs.StringVar(&c.databaseURL, "database-url", "", "Postgres connection URL [DATABASE_URL]")
	c.env = fs.env
	c.db.register(fs)
	fs.StringVar(&c.logLevel, "log-level", fs.envOr("LOG_LEVEL", "info"), "log level: debug, info, warn, error [LOG_LEVEL]")
	fs.StringVar(&c.logFormat, "log-format", fs.envOr("LOG_FORMAT", "json"), "log format: json or text [LOG_FORMAT]")
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
	default:
		return logConfig{}, &exitError{code: 2, err: fmt.Errorf("invalid --log-format / LOG_FORMAT %q: want json or text", c.logFormat)}
	}
	return lc, nil
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

// noArgs prints the usage and returns errUsage when positional arguments
// were given to a command that takes none.
func noArgs(fs *flagSet, pos []string) error {
	if len(pos) != 0 {
		fs.Usage()
		return errUsage
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
