//go:build ha || chaos || patroni

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
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
