package tests

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// The replica race test through a real PgBouncer in transaction pooling mode
// (Debian's 1.18, which has no prepared-statement support in that mode): the
// replicas and the CLI run with DB_PREPARED_STATEMENTS=false through the
// pooler, migrations go through MIGRATE_DATABASE_URL directly to Postgres.
func TestThreeReplicasThroughPgBouncer(t *testing.T) {
	t.Parallel()
	direct := dbtest.NewDatabase(t, false)
	pb := startPgBouncer(t, direct)
	pooled := pb.url(t, direct)
	env := []string{"DATABASE_URL=" + pooled, "DB_PREPARED_STATEMENTS=false", "MIGRATE_DATABASE_URL=" + direct}
	runReplicaRace(t, replicaSetup{
		ServeURL:  pooled,
		ServeEnv:  env[1:],
		CLIEnv:    env,
		DirectURL: direct,
	})
	// The traffic went through the pooler, multiplexed on its few server
	// connections.
	xacts, serverConns := pb.stats(t, direct)
	t.Logf("pgbouncer: %d transactions over at most %d server connections", xacts, serverConns)
	if xacts < 500 {
		t.Fatalf("pgbouncer counted %d transactions for the database; the workload did not go through it", xacts)
	}
}

// pgBouncer is a pgbouncer process the test started.
type pgBouncer struct {
	port int
	dir  string
}

// startPgBouncer starts pgbouncer (installed by scripts/pgbouncer-ensure.sh
// when missing; the test skips, saying why, when it cannot be had) on a free
// port, in transaction pooling mode, in front of the Postgres of upstream,
// with its own configuration in a temporary directory. It stops it when t
// ends.
func startPgBouncer(t *testing.T, upstream string) *pgBouncer {
	t.Helper()
	ensure := exec.Command("../scripts/pgbouncer-ensure.sh")
	var ensureErr bytes.Buffer
	ensure.Stderr = &ensureErr
	out, err := ensure.Output()
	if err != nil {
		t.Skipf("no pgbouncer: %s (%v)", strings.TrimSpace(ensureErr.String()), err)
	}
	bin := strings.TrimSpace(string(out))

	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	dbUser := u.User.Username()

	dir, err := os.MkdirTemp("", "repolock-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// pgbouncer refuses to run as root: it then switches to the postgres
	// user (-u), which must be able to read its files.
	var runAs []string
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skipf("no pgbouncer: running as root and there is no postgres user to run it as")
		}
		runAs = []string{"-u", "postgres"}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pb := &pgBouncer{port: freePort(t), dir: dir}
	userlist := filepath.Join(dir, "userlist.txt")
	writeFile(t, userlist, fmt.Sprintf("%q \"\"\n", dbUser))
	conf := filepath.Join(dir, "pgbouncer.ini")
	writeFile(t, conf, fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = 8
max_client_conn = 400
ignore_startup_parameters = extra_float_digits
server_reset_query =
`, host, port, pb.port, userlist, dbUser))

	cmd := exec.Command(bin, append(runAs, conf)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd.Stdout = logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	listening := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		marker := fmt.Sprintf("listening on 127.0.0.1:%d", pb.port)
		sent := false
		for sc.Scan() {
			logs.WriteLine(sc.Text())
			if !sent && strings.Contains(sc.Text(), marker) {
				close(listening)
				sent = true
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // immediate shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pgbouncer logs:\n%s", logs.String())
		}
	})
	select {
	case <-listening:
	case <-exited:
		t.Fatalf("pgbouncer exited before listening:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("pgbouncer did not listen within 30s:\n%s", logs.String())
	}
	return pb
}

// url is upstream's URL with pgbouncer's address in place of Postgres's.
func (pb *pgBouncer) url(t *testing.T, upstream string) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", pb.port)
	return u.String()
}

// stats reads pgbouncer's admin console: the transactions it counted for
// the database of upstream, and the most server connections it had open.
func (pb *pgBouncer) stats(t *testing.T, upstream string) (xacts, serverConns int64) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	u.Host = fmt.Sprintf("127.0.0.1:%d", pb.port)
	u.Path = "/pgbouncer"
	// The admin console speaks only the simple query protocol.
	admin, err := sql.Open("postgres", u.String()+"&binary_parameters=yes")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	rows, err := admin.Query(`SHOW STATS`)
	if err != nil {
		t.Fatalf("pgbouncer SHOW STATS: %v", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if vals[0].String != dbName {
			continue
		}
		for i, c := range cols {
			if c == "total_xact_count" {
				fmt.Sscan(vals[i].String, &xacts)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var n int64
	prow, err := admin.Query(`SHOW POOLS`)
	if err != nil {
		t.Fatalf("pgbouncer SHOW POOLS: %v", err)
	}
	defer prow.Close()
	cols, _ = prow.Columns()
	for prow.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := prow.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if vals[0].String != dbName {
			continue
		}
		for i, c := range cols {
			if c == "sv_active" || c == "sv_idle" || c == "sv_used" || c == "sv_tested" || c == "sv_login" {
				var v int64
				fmt.Sscan(vals[i].String, &v)
				n += v
			}
		}
	}
	return xacts, n
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
