//go:build ha || chaos || patroni

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pgBinDir holds Debian's PostgreSQL server binaries (initdb, pg_ctl,
// pg_basebackup). PG_BINDIR overrides it.
func pgBinDir() string {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d
	}
	return "/usr/lib/postgresql/15/bin"
}

// pgNode is one PostgreSQL server the test built under its own directory.
type pgNode struct {
	name string
	dir  string // data directory
	port int
	log  string
	c    *haCluster
}

// haCluster is a primary and a streaming standby with synchronous
// replication, built with initdb and pg_basebackup on free ports.
type haCluster struct {
	t       testing.TB
	root    string
	runAs   []string // runuser prefix when the test runs as root
	primary *pgNode
	standby *pgNode
}

// newHACluster builds and starts the primary and the standby and waits
// until the standby is the synchronous one. Both are stopped (immediately)
// when t ends.
func newHACluster(t testing.TB) *haCluster {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBinDir(), "initdb")); err != nil {
		t.Fatalf("no PostgreSQL server binaries in %s (install Debian's postgresql, or set PG_BINDIR): %v", pgBinDir(), err)
	}
	c := newHARoot(t, "repolock-ha-")
	root := c.root
	c.primary = &pgNode{name: "primary", dir: filepath.Join(root, "primary"), port: freePort(t), log: filepath.Join(root, "primary.log"), c: c}
	c.standby = &pgNode{name: "standby", dir: filepath.Join(root, "standby"), port: freePort(t), log: filepath.Join(root, "standby.log"), c: c}

	c.run("initdb", "-D", c.primary.dir, "-U", "postgres", "--auth=trust", "--no-sync")
	c.appendConf(c.primary, fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
wal_level = replica
max_wal_senders = 5
hot_standby = on
synchronous_standby_names = 'standby1'
synchronous_commit = on
shared_buffers = 32MB
max_connections = 60
`, c.primary.port, root))
	c.primary.start()
	t.Cleanup(func() { c.primary.stopImmediate() })

	c.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.primary.port), "-U", "postgres",
		"-D", c.standby.dir, "-X", "stream", "-R", "--no-sync")
	c.appendConf(c.standby, fmt.Sprintf(`
port = %d
primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=standby1'
# Once promoted it has no standby of its own: commits must not wait for one
# (Patroni clears synchronous_standby_names the same way when the last
# synchronous standby is gone, unless synchronous_mode_strict is set).
synchronous_standby_names = ''
`, c.standby.port, c.primary.port))
	c.standby.start()
	t.Cleanup(func() { c.standby.stopImmediate() })

	// Synchronous: the primary reports the standby as its sync standby.
	c.waitFor(c.primary, `SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'standby1' AND sync_state = 'sync'`, 60*time.Second)
	return c
}

// newHARoot makes the directory the servers live in (removed when t ends)
// and, when the test runs as root, hands it to the postgres user the
// servers then run as (Postgres refuses to run as root).
func newHARoot(t testing.TB, prefix string) *haCluster {
	t.Helper()
	root, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	c := &haCluster{t: t, root: root}
	t.Cleanup(func() { os.RemoveAll(root) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and there is no postgres user to run the servers as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.runAs = []string{"runuser", "-u", "postgres", "--"}
	}
	return c
}

// run runs one of the server binaries as the servers' user.
func (c *haCluster) run(bin string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(append([]string{}, c.runAs...), filepath.Join(pgBinDir(), bin)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func (c *haCluster) appendConf(n *pgNode, conf string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(conf); err != nil {
		c.t.Fatal(err)
	}
}

// waitFor polls query (a boolean) on n until it is true.
func (c *haCluster) waitFor(n *pgNode, query string, timeout time.Duration) {
	c.t.Helper()
	db := n.open(c.t, "postgres")
	defer db.Close()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		var ok bool
		if lastErr = db.QueryRow(query).Scan(&ok); lastErr == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling a server state; no signal to wait on
	}
	c.t.Fatalf("%s: %q not true within %s (last error %v)\n%s", n.name, query, timeout, lastErr, n.logs())
}

// url is a direct URL to database db on n.
func (n *pgNode) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", n.port, db)
}

func (n *pgNode) open(t testing.TB, db string) *sql.DB {
	t.Helper()
	d, err := sql.Open("postgres", n.url(db))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (n *pgNode) start() {
	n.c.t.Helper()
	n.c.run("pg_ctl", "-D", n.dir, "-l", n.log, "-w", "-t", "60", "start")
}

// stopImmediate stops the server the way a crash would (no shutdown
// checkpoint); a server already stopped is left alone.
func (n *pgNode) stopImmediate() {
	argv := append(append(append([]string{}, n.c.runAs...), filepath.Join(pgBinDir(), "pg_ctl")), "-D", n.dir, "-m", "immediate", "-w", "stop")
	_ = exec.Command(argv[0], argv[1:]...).Run()
}

func (n *pgNode) promote() {
	n.c.t.Helper()
	n.c.run("pg_ctl", "-D", n.dir, "-w", "-t", "60", "promote")
}

func (n *pgNode) logs() string {
	b, _ := os.ReadFile(n.log)
	return string(b)
}

// waitUntil polls cond until it is true or fails the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond) // the workload's goroutines move the counters
	}
}

// deleteOutcome is what a failover test knows of a DELETE it sent.
type deleteOutcome int

const (
	deleteNotSent deleteOutcome = iota // no delete was sent
	deleteApplied                      // answered 204, or 404 after an attempt whose outcome was unknown
	deleteUnknown                      // no definite answer before the load stopped, or an unexpected one
)

// deleteApplication deletes an application the way a client that follows
// the 503's advice ("the outcome is unknown; re-read before retrying")
// does: a 503 may come after the commit (the connection to a primary that
// was killed was lost while committing), so the DELETE is sent again until
// the answer is definite. 204 means this attempt deleted it; 404 after a
// 503 means an earlier attempt did. Counting such a delete as refused would
// count its application as an acknowledged create lost in the failover,
// which is what a run of make test-patroni once reported. Each answer goes
// to note (retry: whether an attempt went before it, so a 404 is expected).
// It gives up when done is closed: the outcome then stays unknown.
func deleteApplication(t *testing.T, s *server, token, id string, done <-chan struct{},
	note func(start time.Time, status int, raw []byte, retry bool)) deleteOutcome {
	t.Helper()
	for attempt := 0; ; attempt++ {
		start := time.Now()
		status, _, raw := s.doRaw(t, http.MethodDelete, "/v1/applications/"+id, token, nil, nil)
		note(start, status, raw, attempt > 0)
		switch {
		case status == http.StatusNoContent, status == http.StatusNotFound && attempt > 0:
			return deleteApplied
		case status != http.StatusServiceUnavailable:
			return deleteUnknown // note listed it as unexpected
		}
		select {
		case <-done:
			return deleteUnknown
		case <-time.After(20 * time.Millisecond): // the 503's Retry-After, shortened: the test measures the recovery
		}
	}
}

// failureRecap repeats a test's failures after everything its cleanups
// print (the server and daemon logs, hundreds of lines): CI shows the tail
// of the output, which would otherwise hold only logs. Create it before
// anything that registers cleanups, so that its own runs last.
type failureRecap struct {
	t     *testing.T
	mu    sync.Mutex
	stage string
	msgs  []string
}

func newFailureRecap(t *testing.T) *failureRecap {
	r := &failureRecap{t: t, stage: "setting up"}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		what := strings.Join(r.msgs, "; ")
		if what == "" {
			what = "see the first error above the logs"
		}
		t.Logf("%s FAILED while %s: %s", t.Name(), r.stage, what)
	})
	return r
}

// Stage names what the test is doing, for the recap of a failure a helper
// reported (waitUntil's "condition not reached").
func (r *failureRecap) Stage(s string) {
	r.mu.Lock()
	r.stage = s
	r.mu.Unlock()
}

func (r *failureRecap) record(format string, args []any) string {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	return msg
}

func (r *failureRecap) Errorf(format string, args ...any) {
	r.t.Helper()
	r.t.Error(r.record(format, args))
}

func (r *failureRecap) Fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatal(r.record(format, args))
}
