//go:build patroni

package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Automatic failover (make test-patroni): Patroni (Debian's `patroni`)
// manages two Postgres servers with a one-member etcd (`etcd-server`) as its
// store and `synchronous_mode: true`. Three `repolock serve` replicas take claims:
// two reach the database through a TCP proxy that sends connections to the
// node whose Patroni REST API answers `GET /primary` 200 (what HAProxy does in
// Patroni's documentation), one through a multi-host DATABASE_URL with
// target_session_attrs=read-write. Mid-load the primary's postmaster is
// killed with SIGKILL; nothing in the test promotes anything: Patroni fails
// over to the synchronous standby on its own (primary_start_timeout: 0). The
// service recovers (every replica answers claims from the new primary and
// acknowledges writes again), every acknowledged write is on the new primary
// and no repository has two owners. The figures (time to promotion and to
// recovery, writes acknowledged, lost, double owners) are printed; none is
// asserted against a wall-clock bound (the machine is shared).
func TestPatroniFailover(t *testing.T) {
	fail := newFailureRecap(t)
	pc := newPatroniCluster(t)
	fail.Stage("starting the replicas and the load")
	n1, n2 := pc.nodes[0], pc.nodes[1]

	admin := n1.pg.open(t, "postgres")
	if _, err := admin.Exec(`CREATE DATABASE repolock`); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	proxy := startPrimaryProxy(t, pc.nodes)
	viaProxy := fmt.Sprintf("postgres://postgres@%s/repolock?sslmode=disable&connect_timeout=3", proxy.addr())
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/repolock?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
		n1.pg.port, n2.pg.port)
	// No per-tenant rate limit: its 429s would hide the answers during the
	// switch, which are what this test is about.
	env := []string{"GC_INTERVAL=0", "REQUEST_TIMEOUT=5s", "RATE_LIMIT=0"}
	routes := []string{"proxy", "proxy", "multi-host"}
	replicas := make([]*server, len(routes))
	for i, route := range routes {
		u := viaProxy
		if route == "multi-host" {
			u = multi
		}
		replicas[i] = startServerWith(t, serverOptions{DatabaseURL: u, Env: env})
	}

	const tenants, workersPerTenant, repos = 6, 2, 24
	tokens := make([]string, tenants)
	for i := range tokens {
		tokens[i] = replicas[i%len(replicas)].createTenant(t, fmt.Sprintf("patroni-%d", i))
	}

	type write struct {
		tenant  string
		deleted deleteOutcome
	}
	var (
		mu         sync.Mutex
		acked      = map[string]*write{} // acknowledged creates by application id
		statuses   = map[int]int{}
		unexpected []string
		killedAt   time.Time    // when the postmaster got SIGKILL
		answered   []time.Time  // per replica: first request sent after the kill answered from the database (201, 204, 409)
		wrote      []time.Time  // per replica: first write sent after the kill and acknowledged (201, 204)
		afterKill  atomic.Int64 // writes sent after the kill and acknowledged
		okCount    atomic.Int64
		done       = make(chan struct{})
		wg         sync.WaitGroup
	)
	answered, wrote = make([]time.Time, len(replicas)), make([]time.Time, len(replicas))
	var stopLoad sync.Once
	stop := func() { stopLoad.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop) // on failure: the clients stop before the replicas do
	note := func(replica int, start time.Time, status int, raw []byte, retry bool) {
		mu.Lock()
		defer mu.Unlock()
		statuses[status]++
		switch {
		case status == http.StatusCreated, status == http.StatusNoContent, status == http.StatusConflict, status == http.StatusServiceUnavailable:
		case status == http.StatusNotFound && retry: // a delete sent again after a 503: the first one was applied
		default:
			unexpected = append(unexpected, fmt.Sprintf("%d %s", status, raw))
		}
		after := !killedAt.IsZero() && start.After(killedAt)
		if after && answered[replica].IsZero() && status != http.StatusServiceUnavailable {
			answered[replica] = time.Now() // a 409 repository_claimed was read from the new primary too
		}
		if status == http.StatusCreated || status == http.StatusNoContent {
			okCount.Add(1)
			if after {
				if wrote[replica].IsZero() {
					wrote[replica] = time.Now()
				}
				afterKill.Add(1)
			}
		}
	}
	for ti, token := range tokens {
		for w := range workersPerTenant {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					ri := (ti + w + i) % len(replicas) // every worker uses every replica
					s := replicas[ri]
					name := fmt.Sprintf("w%d-%d", w, i)
					url := fmt.Sprintf("https://github.com/patroni/repo-%d", (ti*7+w*5+i)%repos)
					start := time.Now()
					status, raw := postJSON(t, s, "/v1/applications", token, map[string]any{"name": name, "repo_url": url})
					note(ri, start, status, raw, false)
					if status != http.StatusCreated {
						continue
					}
					var app struct{ ID string }
					_ = json.Unmarshal(raw, &app)
					mu.Lock()
					acked[app.ID] = &write{tenant: fmt.Sprintf("patroni-%d", ti)}
					mu.Unlock()
					if i%2 == 0 { // release half of them again: the repository goes back to the pool
						outcome := deleteApplication(t, s, token, app.ID, done, func(start time.Time, status int, raw []byte, retry bool) {
							note(ri, start, status, raw, retry)
						})
						mu.Lock()
						acked[app.ID].deleted = outcome
						mu.Unlock()
					}
				}
			})
		}
	}

	// Mid-load: SIGKILL to the primary's postmaster. Patroni notices on its
	// next loop, releases the leader key (primary_start_timeout: 0: fail over
	// rather than restart in place) and the synchronous standby's Patroni
	// takes it and promotes.
	fail.Stage("waiting for 200 acknowledged writes before the crash")
	waitUntil(t, 2*time.Minute, func() bool { return okCount.Load() >= 200 })
	if !n1.isPrimary() {
		fail.Fatalf("%s is not the primary before the crash", n1.name)
	}
	pid := n1.postmasterPID(t)
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (postmaster of %s): %v", pid, n1.name, err)
	}
	t.Logf("kill -9 %d: the postmaster of %s, the primary, after %d acknowledged writes", pid, n1.name, okCount.Load())

	// Patroni promotes the standby by itself: node2's /primary answers 200.
	deadline := time.Now().Add(90 * time.Second)
	for !n2.isPrimary() {
		if time.Now().After(deadline) {
			fail.Fatalf("Patroni did not promote %s within 90s of the crash", n2.name)
		}
		time.Sleep(50 * time.Millisecond) // polling Patroni's REST API; nothing to wait on
	}
	promoted := time.Since(killedAt)

	// Every replica acknowledges writes again, and the load goes on a while.
	fail.Stage("waiting for every replica to acknowledge writes after the promotion")
	waitUntil(t, 90*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range wrote {
			if r.IsZero() {
				return false
			}
		}
		return true
	})
	fail.Stage("waiting for 150 acknowledged writes after the crash")
	waitUntil(t, 90*time.Second, func() bool { return afterKill.Load() >= 150 })
	stop()
	fail.Stage("checking the answers and the new primary's data")
	t.Logf("the failover in Patroni's and Postgres' logs (kill -9 at %s):\n%s", killedAt.UTC().Format("15:04:05.000"), pc.failoverLines())

	mu.Lock()
	defer mu.Unlock()
	var first, all, firstWrite time.Duration
	for i := range replicas {
		a, w := answered[i].Sub(killedAt), wrote[i].Sub(killedAt)
		if i == 0 || a < first {
			first = a
		}
		if i == 0 || w < firstWrite {
			firstWrite = w
		}
		all = max(all, a)
		t.Logf("replica %d (%s): after the kill, first answer from the database %s, first acknowledged write %s",
			i, routes[i], a.Round(time.Millisecond), w.Round(time.Millisecond))
	}
	t.Logf("statuses %v; the proxy changed its target %d times", statuses, proxy.switches.Load())
	if len(unexpected) > 0 {
		sort.Strings(unexpected)
		fail.Errorf("%d responses other than 201/204/409/503 (and 404 to a delete sent again), e.g. %s", len(unexpected), unexpected[0])
	}

	// The data: every acknowledged create on the new primary, owned by its
	// creator, no acknowledged delete undone, no repository with two owners.
	db := n2.pg.open(t, "repolock")
	defer db.Close()
	var inRecovery bool
	if err := db.QueryRow(`SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil || inRecovery {
		fail.Fatalf("%s (the new primary by Patroni's API) is in recovery: %v, %v", n2.name, inRecovery, err)
	}
	present := map[string]string{}
	rows, err := db.Query(`SELECT a.id, u.name FROM applications a JOIN cluster_users u ON u.id = a.cluster_user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tenant string
		if err := rows.Scan(&id, &tenant); err != nil {
			t.Fatal(err)
		}
		present[id] = tenant
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	var lost, resurrected, wrongOwner, deletes, unknown int
	var lostIDs []string
	for id, w := range acked {
		owner, ok := present[id]
		switch {
		case w.deleted == deleteUnknown:
			unknown++ // either way is right
		case w.deleted == deleteApplied && ok:
			resurrected++
		case w.deleted == deleteApplied:
			deletes++
		case !ok:
			lost++
			lostIDs = append(lostIDs, id)
		case owner != w.tenant:
			wrongOwner++
		}
	}
	var doubleOwners int
	if err := db.QueryRow(`
SELECT (SELECT count(*) FROM (SELECT git_repository_url FROM RepositoryLockOwner GROUP BY 1 HAVING count(*) > 1) d)
     + (SELECT count(*) FROM (
          SELECT url FROM (SELECT normalized_url AS url, cluster_user_id FROM applications
                           UNION SELECT normalized_url, cluster_user_id FROM repository_credentials) refs
           GROUP BY url HAVING count(DISTINCT cluster_user_id) > 1) s)`).Scan(&doubleOwners); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("patroni failover: promoted by Patroni %s after kill -9; recovered (claims answered from the new primary) after %s (first replica), %s (all three); first acknowledged write after %s; "+
		"%d writes acknowledged (%d creates, %d deletes; %d after the kill; %d deletes left without a definite answer when the load stopped); lost %d, deletes undone %d, wrong owner %d, repositories with two owners %d\n",
		promoted.Round(time.Millisecond), first.Round(time.Millisecond), all.Round(time.Millisecond), firstWrite.Round(time.Millisecond),
		len(acked)+deletes+resurrected, len(acked), deletes+resurrected, afterKill.Load(), unknown, lost, resurrected, wrongOwner, doubleOwners)
	if lost != 0 || resurrected != 0 || wrongOwner != 0 || doubleOwners != 0 {
		fail.Fatalf("on the new primary: %d acknowledged creates lost %v, %d acknowledged deletes undone, %d with another owner, %d repositories with two owners",
			lost, lostIDs, resurrected, wrongOwner, doubleOwners)
	}
	fail.Stage("checking ownership on the new primary")
	checkOwnership(t, n2.pg.url("repolock"))
}

// patroniCluster is a one-member etcd and two Patroni nodes, each managing
// one Postgres server, all on free ports under one temporary directory.
type patroniCluster struct {
	*haCluster
	cred     *syscall.Credential // the servers' user when the test runs as root
	etcd     string              // client URL
	nodes    []*patroniNode
	procs    []*daemon // every daemon started, for the logs
	etcdProc *daemon
}

type patroniNode struct {
	name string
	dir  string
	api  string // REST API base URL
	pg   *pgNode
	proc *daemon
}

// daemon is a long-running process the test started (etcd, patroni).
type daemon struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// newPatroniCluster starts etcd, then Patroni on node1 (it bootstraps the
// cluster with initdb and becomes the primary), then Patroni on node2 (it
// clones node1 with pg_basebackup), and waits until node2 is the
// synchronous standby. Everything it started is stopped when t ends, also
// when the test fails, and the directory is removed.
func newPatroniCluster(t *testing.T) *patroniCluster {
	t.Helper()
	for _, bin := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("SKIPPED: no %s here (Debian packages patroni and etcd-server; make test-patroni installs them as root): %v", bin, err)
		}
	}
	if _, err := os.Stat(filepath.Join(pgBinDir(), "initdb")); err != nil {
		t.Skipf("SKIPPED: no PostgreSQL server binaries in %s (install Debian's postgresql, or set PG_BINDIR): %v", pgBinDir(), err)
	}
	began := time.Now()
	pc := &patroniCluster{haCluster: newHARoot(t, "repolock-patroni-")}
	// Cleanups run last first: stop everything, then (on failure) show
	// the logs, then remove the directory (newHARoot's).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon logs:\n%s", pc.logTails())
		}
	})
	t.Cleanup(func() { pc.stopAll(t) })
	if os.Geteuid() == 0 {
		u, _ := user.Lookup("postgres") // newHARoot checked it exists
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pc.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	// etcd, one member: Patroni's store (leader key, members, sync state).
	clientPort, peerPort := freePort(t), freePort(t)
	pc.etcd = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	pc.etcdProc = pc.start(t, "etcd", filepath.Join(pc.root, "etcd.log"), "etcd",
		"--name", "etcd1", "--data-dir", filepath.Join(pc.root, "etcd"),
		"--listen-client-urls", pc.etcd, "--advertise-client-urls", pc.etcd,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "etcd1="+peer, "--initial-cluster-state", "new",
		"--initial-cluster-token", "repolock-"+randomHex(4))
	pc.waitHTTP(t, pc.etcd+"/health", 30*time.Second)

	scope := "repolock-" + randomHex(4)
	for i := range 2 {
		name := fmt.Sprintf("node%d", i+1)
		n := &patroniNode{name: name, dir: filepath.Join(pc.root, name)}
		n.pg = &pgNode{name: name, dir: filepath.Join(n.dir, "data"), port: freePort(t), log: filepath.Join(n.dir, "patroni.log"), c: pc.haCluster}
		apiPort := freePort(t)
		n.api = fmt.Sprintf("http://127.0.0.1:%d", apiPort)
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(n.dir, "patroni.yml")
		writeFile(t, conf, patroniConfig(scope, name, n.dir, pc.root, clientPort, apiPort, n.pg.port))
		if pc.cred != nil {
			for _, p := range []string{n.dir, conf} {
				if err := os.Chown(p, int(pc.cred.Uid), int(pc.cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		pc.nodes = append(pc.nodes, n)
	}
	for i, n := range pc.nodes {
		n.proc = pc.start(t, "patroni "+n.name, n.pg.log, "patroni", filepath.Join(n.dir, "patroni.yml"))
		if i == 0 {
			deadline := time.Now().Add(90 * time.Second)
			for !n.isPrimary() {
				if time.Now().After(deadline) {
					t.Fatalf("%s did not bootstrap and become the primary within 90s", n.name)
				}
				select {
				case <-n.proc.exited:
					t.Fatalf("patroni %s exited", n.name)
				case <-time.After(200 * time.Millisecond): // polling Patroni's REST API
				}
			}
		}
	}
	// node2 cloned and streaming, and the synchronous standby: Patroni set
	// synchronous_standby_names on node1 to it (synchronous_mode).
	pc.waitFor(pc.nodes[0].pg, `SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = 'node2' AND sync_state = 'sync'`, 2*time.Minute)
	pc.waitHTTP(t, pc.nodes[1].api+"/sync", 60*time.Second)
	t.Logf("etcd, Patroni on node1 (primary) and node2 (synchronous standby) up in %s", time.Since(began).Round(time.Millisecond))
	return pc
}

// patroniConfig is one node's Patroni configuration: short loop times so the
// test is quick (production values: docs/operations.md), synchronous_mode,
// and primary_start_timeout 0: a crashed primary is failed over to the
// synchronous standby at once instead of being restarted in place.
func patroniConfig(scope, name, dir, socketDir string, etcdPort, apiPort, pgPort int) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
restapi:
  listen: 127.0.0.1:%[5]d
  connect_address: 127.0.0.1:%[5]d
etcd3:
  hosts: 127.0.0.1:%[4]d
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 16777216
    primary_start_timeout: 0
    synchronous_mode: true
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        synchronous_commit: "on"
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 5
        max_replication_slots: 5
        max_connections: 60
        shared_buffers: 32MB
  initdb:
    - encoding: UTF8
    - no-sync
postgresql:
  listen: 127.0.0.1:%[6]d
  connect_address: 127.0.0.1:%[6]d
  data_dir: %[3]s/data
  bin_dir: %[7]s
  pgpass: %[3]s/pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: '%[8]s'
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
`, scope, name, dir, etcdPort, apiPort, pgPort, pgBinDir(), socketDir)
}

// start runs a daemon as the servers' user in its own process group, its
// output in logPath; stopAll stops it when t ends.
func (pc *patroniCluster) start(t *testing.T, name, logPath string, argv ...string) *daemon {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = pc.root
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "HOME="+pc.root, "PYTHONUNBUFFERED=1")
	// Setpgid: one signal reaches the daemon and its helpers. Pdeathsig:
	// if the test binary dies (a panic, go test's -timeout) the daemon dies
	// with it instead of holding its ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: pc.cred}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	pc.procs = append(pc.procs, d)
	return d
}

// stop sends SIGTERM to d's process group, waits up to grace, then SIGKILLs
// what is left of the group.
func (d *daemon) stop(t *testing.T, grace time.Duration) {
	pgid := d.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(grace):
		t.Logf("%s did not stop within %s of SIGTERM: SIGKILL", d.name, grace)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // helpers left in the group, if any
	<-d.exited
}

// stopAll stops everything the cluster started, in order: every Patroni at
// once (each stops its Postgres), then any Postgres still running in a data
// directory (Patroni detaches the postmaster into its own session, so it
// outlives a Patroni that was killed), then etcd.
func (pc *patroniCluster) stopAll(t *testing.T) {
	var wg sync.WaitGroup
	for _, n := range pc.nodes {
		if n.proc != nil {
			wg.Go(func() { n.proc.stop(t, 15*time.Second) })
		}
	}
	wg.Wait()
	for _, n := range pc.nodes {
		n.pg.stopImmediate()
		n.killPostmaster()
	}
	if pc.etcdProc != nil {
		pc.etcdProc.stop(t, 10*time.Second)
	}
}

// waitHTTP polls url until it answers 200.
func (pc *patroniCluster) waitHTTP(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if httpStatus(url) == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %s", url, timeout)
		}
		time.Sleep(200 * time.Millisecond) // polling a daemon's HTTP API; nothing to wait on
	}
}

// logTails is the end of every daemon's log, for failure messages.
func (pc *patroniCluster) logTails() string {
	var b strings.Builder
	for _, d := range pc.procs {
		raw, _ := os.ReadFile(d.log)
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", d.name, d.log, strings.Join(lines[max(0, len(lines)-100):], "\n"))
	}
	return b.String()
}

// failoverLines are the lines of the Patroni logs that tell the failover.
func (pc *patroniCluster) failoverLines() string {
	var out []string
	for _, n := range pc.nodes {
		raw, _ := os.ReadFile(n.pg.log)
		for _, line := range strings.Split(string(raw), "\n") {
			for _, m := range []string{"crashed", "Failing over", "promot", "acquired session lock", "synchronous", "selected new timeline", "ready to accept"} {
				if strings.Contains(line, m) {
					out = append(out, n.name+": "+line)
					break
				}
			}
		}
	}
	return strings.Join(out, "\n")
}

// httpStatus is the status of GET url, 0 when it did not answer.
func httpStatus(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// isPrimary: Patroni's GET /primary answers 200 only on the node that holds
// the leader key and runs Postgres as the primary.
func (n *patroniNode) isPrimary() bool { return httpStatus(n.api+"/primary") == http.StatusOK }

// postmasterPID reads the first line of postmaster.pid.
func (n *patroniNode) postmasterPID(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(n.pg.dir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 1 {
		t.Fatalf("postmaster.pid of %s: %q", n.name, line)
	}
	return pid
}

// killPostmaster SIGKILLs a postmaster still running in n's data directory
// (the last resort of the cleanup).
func (n *patroniNode) killPostmaster() {
	raw, err := os.ReadFile(filepath.Join(n.pg.dir, "postmaster.pid"))
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pid > 1 {
		// Only if it is a postgres process of this data directory.
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), n.pg.dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// primaryProxy is the test's stand-in for HAProxy as Patroni's
// documentation configures it: a TCP listener that forwards each new
// connection to the node whose REST API answers GET /primary with 200,
// checked every 250 ms (HAProxy's inter). A node that answers 200 while the
// current one does not becomes the target at once (only the holder of the
// leader key answers 200); the current one is dropped after 3 failed checks
// in a row (fall 3: a slow answer under load is not a failover). On every
// change it closes the connections it forwarded (on-marked-down
// shutdown-sessions), so clients reconnect to the new primary; while no
// node is the target it refuses connections.
type primaryProxy struct {
	ln       net.Listener
	nodes    []*patroniNode
	current  atomic.Int32 // index into nodes, -1 for none
	fails    int          // failed checks of current in a row (check's goroutine only)
	switches atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

const proxyFall = 3

func startPrimaryProxy(t *testing.T, nodes []*patroniNode) *primaryProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &primaryProxy{ln: ln, nodes: nodes, conns: map[net.Conn]struct{}{}}
	p.current.Store(-1)
	p.check()
	if p.current.Load() < 0 {
		t.Fatal("proxy: no node answers GET /primary with 200")
	}
	p.switches.Store(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				p.check()
			}
		}
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		p.closeAll()
		wg.Wait()
	})
	return p
}

func (p *primaryProxy) addr() string { return p.ln.Addr().String() }

// check asks every node's GET /primary and follows the answer.
func (p *primaryProxy) check() {
	cur := p.current.Load()
	next := cur
	var up []int32
	for i, n := range p.nodes {
		if n.isPrimary() {
			up = append(up, int32(i))
		}
	}
	switch {
	case len(up) == 1:
		next, p.fails = up[0], 0
	case len(up) > 1: // two claim it: trust neither
		next = -1
	case cur >= 0:
		if p.fails++; p.fails >= proxyFall {
			next = -1
		}
	}
	if next != cur {
		p.current.Store(next)
		p.switches.Add(1)
		p.closeAll()
	}
}

func (p *primaryProxy) forward(client net.Conn) {
	i := p.current.Load()
	if i < 0 {
		client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.nodes[i].pg.port), 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	if p.current.Load() != i { // switched while dialing
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	// Either side ending (or closeAll) ends both.
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		client.Close()
		server.Close()
	}
	wg.Go(func() { pipe(server, client) })
	wg.Go(func() { pipe(client, server) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

func (p *primaryProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}
