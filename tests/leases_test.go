package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/leases/leasecheck"
)

// replicaTarget is the leasecheck.Target of replicas of the real binary,
// through the public client: each operation goes to a replica picked at
// random among those not killed. The register of a lease key
// "repositories/R/branches/B" is branch B of repository R, written by a
// commit that carries the fencing token.
type replicaTarget struct {
	t       *testing.T
	repo    string
	clients []*client.Client
	dead    []atomic.Bool
	// choose, when set, picks the replica instead (the chaos suite,
	// whose killed replicas come back on another address).
	choose func() *client.Client
}

func (r *replicaTarget) pick() *client.Client {
	if r.choose != nil {
		return r.choose()
	}
	for {
		i := rand.IntN(len(r.clients))
		if !r.dead[i].Load() {
			return r.clients[i]
		}
	}
}

func (r *replicaTarget) status(op string, err error) leasecheck.Status {
	switch {
	case err == nil:
		return leasecheck.OK
	case client.IsLeaseHeld(err):
		return leasecheck.Held
	case client.IsNotFound(err):
		return leasecheck.Lost
	case client.IsFenced(err):
		return leasecheck.Fenced
	case client.IsCode(err, client.CodeConflict):
		return leasecheck.Conflict
	case client.IsCode(err, client.CodeInvalidArgument), client.IsCode(err, client.CodeInternal):
		r.t.Errorf("%s: %v", op, err) // a bug, not a fault
	case client.IsCode(err, client.CodeUnavailable) && !client.IsOutcomeUnknown(err):
		return leasecheck.Failed // the server promises nothing was applied
	case errors.Is(err, syscall.ECONNREFUSED):
		return leasecheck.Failed // never sent (a killed replica)
	}
	return leasecheck.Unknown
}

func (r *replicaTarget) Acquire(ctx context.Context, key string, ttl, wait time.Duration) (string, int64, leasecheck.Status) {
	l, err := r.pick().AcquireLease(ctx, client.AcquireLeaseRequest{Key: key, TTL: ttl, Wait: wait})
	st := r.status("acquire", err)
	if st == leasecheck.Lost {
		st = leasecheck.Unknown
	}
	return l.LeaseID, l.FencingToken, st
}

func (r *replicaTarget) Keepalive(ctx context.Context, _, id string) leasecheck.Status {
	_, err := r.pick().KeepaliveLease(ctx, id)
	return r.status("keepalive", err)
}

func (r *replicaTarget) Release(ctx context.Context, _, id string) leasecheck.Status {
	return r.status("release", r.pick().ReleaseLease(ctx, id))
}

func (r *replicaTarget) Write(ctx context.Context, key string, token int64) leasecheck.Status {
	branch := key[len("repositories/"+r.repo+"/branches/"):]
	_, err := r.pick().WithFencingToken(token).Commit(ctx, r.repo, branch, client.CommitRequest{Message: "fenced write"})
	return r.status("write", err)
}

// TestLeasesLinearizableThreeReplicas records a history of concurrent
// lease clients (some paused past their TTL, then writing with their
// stale token) through three replicas of the real binary, while the
// replicas' database sessions are killed with pg_terminate_backend and
// one replica is killed with SIGKILL, and checks it with Porcupine
// against leasecheck.Model (LEASE_HISTORY_DURATION for a longer run).
func TestLeasesLinearizableThreeReplicas(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	first := startServerWith(t, serverOptions{DatabaseURL: dbURL})
	replicas := []*server{first,
		startServerWith(t, serverOptions{DatabaseURL: dbURL}),
		startServerWith(t, serverOptions{DatabaseURL: dbURL})}
	token := first.createTenant(t, "leases")
	ctx := t.Context()
	alice := first.client(t, token)
	const repo = "lease-history"
	if _, err := alice.CreateRepository(ctx, client.CreateRepositoryRequest{Name: repo, StorageNamespace: "s3://b/h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CreateBranch(ctx, repo, "other", "main"); err != nil {
		t.Fatal(err)
	}
	target := &replicaTarget{t: t, repo: repo, dead: make([]atomic.Bool, len(replicas))}
	for _, s := range replicas {
		target.clients = append(target.clients, s.client(t, token))
	}

	duration := 5 * time.Second
	if v := os.Getenv("LEASE_HISTORY_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LEASE_HISTORY_DURATION=%q: %v", v, err)
		}
		duration = d
	}
	killer, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close()
	runCtx, stop := context.WithCancel(ctx)
	var (
		bg         sync.WaitGroup
		terminated atomic.Int64
	)
	bg.Go(func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(time.Duration(200+rand.IntN(400)) * time.Millisecond):
			}
			var n int64
			if err := killer.QueryRowContext(runCtx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND random() < 0.3`).Scan(&n); err == nil {
				terminated.Add(n)
			}
		}
	})
	// kill -9 of the third replica a third of the way in: its requests
	// in flight end with an unknown outcome, its leases expire.
	bg.Go(func() {
		select {
		case <-runCtx.Done():
			return
		case <-time.After(duration / 3):
		}
		victim := replicas[2]
		target.dead[2].Store(true)
		_ = victim.cmd.Process.Kill()
		<-victim.exited
		victim.err = nil // killed on purpose
	})
	rec := leasecheck.NewRecorder()
	leasecheck.Run(runCtx, rec, target, leasecheck.Workload{
		Keys:    []string{"repositories/" + repo + "/branches/main", "repositories/" + repo + "/branches/other"},
		Clients: 4, Pausers: 2,
		TTL: time.Second, Wait: 2 * time.Second, Pause: 200 * time.Millisecond,
		Duration: duration,
	})
	stop()
	bg.Wait()
	ops := rec.Operations()
	counts := leasecheck.Counts(ops)
	t.Logf("%d operations, %d sessions terminated, one replica killed: %v", len(ops), terminated.Load(), counts)
	for _, want := range []string{"acquire/ok", "write/ok", "write/fenced", "keepalive/ok", "keepalive/lost", "release/ok"} {
		if counts[want] == 0 {
			t.Errorf("the history has no %s", want)
		}
	}
	leasecheck.Check(t, "replicas", ops, time.Minute)
}

// TestLeaseRunCLI: `repolock lease run` runs the command with the lease's token
// in its environment and exits with its status; a held key exits 3; a
// lease lost while the command runs stops the command and exits 4.
func TestLeaseRunCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.createTenant(t, "cron")
	c := s.client(t, token)
	ctx := t.Context()
	lease := func(args ...string) *exec.Cmd {
		cmd := exec.Command(binPath, append([]string{"lease", "run", "--url", s.URL, "--key", "cron/nightly", "--ttl", "1s"}, args...)...)
		cmd.Env = append(cleanEnv(), "REPOLOCK_TOKEN="+token)
		return cmd
	}
	exitCode := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}

	out, err := lease("--", "sh", "-c", `echo "$REPOLOCK_LEASE_KEY $REPOLOCK_FENCING_TOKEN"; exit 7`).Output()
	if code := exitCode(err); code != 7 || strings.TrimSpace(string(out)) != "cron/nightly 1" {
		t.Fatalf("run: exit %d, output %q; want 7 and the key and token 1", code, out)
	}
	// Released at the end: the key is free.
	held, err := c.AcquireLease(ctx, client.AcquireLeaseRequest{Key: "cron/nightly", TTL: time.Minute})
	if err != nil || held.FencingToken != 2 {
		t.Fatalf("after the run: %+v, %v", held, err)
	}
	var stderr bytes.Buffer
	cmd := lease("--", "true")
	cmd.Stderr = &stderr
	if code := exitCode(cmd.Run()); code != 3 {
		t.Fatalf("held key: exit %d (%s), want 3", code, stderr.String())
	}
	if err := c.ReleaseLease(ctx, held.LeaseID); err != nil {
		t.Fatal(err)
	}

	// Lost while running: the lease is released behind its back.
	marker := filepath.Join(t.TempDir(), "running")
	cmd = lease("--kill-after", "1s", "--", "sh", "-c", `touch "$0"; exec sleep 300`, marker)
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var id string
	for id == "" {
		select {
		case err := <-done:
			t.Fatalf("repolock lease run ended early: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := os.Stat(marker); err != nil {
			continue
		}
		for l, err := range c.ListLeases(ctx, client.LeaseListOptions{KeyPrefix: "cron/"}) {
			if err != nil {
				t.Fatal(err)
			}
			id = l.LeaseID
		}
	}
	if err := c.ReleaseLease(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code := exitCode(err); code != 4 || !strings.Contains(stderr.String(), "was lost") {
			t.Fatalf("lost lease: exit %d, stderr %q; want 4", code, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("repolock lease run did not stop after its lease was lost")
	}
}

// TestLeaseRunSIGSTOP: a real pause, not a client that stops its
// keepalives. `repolock lease run` holds a lease (TTL 1s) and runs a command
// that waits for a line on its stdin and then commits to the guarded
// branch with the lease's token. The whole process group (api and its
// command, as a stopped machine would be) is stopped with SIGSTOP past the
// TTL; another acquirer takes the lease (it waits for the expiry by the
// database's clock) and commits with the new token. Then SIGCONT: the
// stale holder's commit, made at once, still believing it holds the
// lease, is refused with 409 fenced; api notices the loss, stops its
// command (SIGTERM, ignored by it until the write is done, then SIGKILL)
// and exits 4.
func TestLeaseRunSIGSTOP(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.createTenant(t, "paused")
	c := s.client(t, token)
	ctx := t.Context()
	const repo, key = "paused-site", "repositories/paused-site/branches/main"
	if _, err := c.CreateRepository(ctx, client.CreateRepositoryRequest{Name: repo, StorageNamespace: "s3://b/paused"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile, result := filepath.Join(dir, "token"), filepath.Join(dir, "result")
	// The command: record the token, wait for "go" on stdin, commit with
	// the token (SIGTERM ignored until the commit has its answer), record
	// the status and body, then wait to be stopped.
	script := `trap '' TERM
echo "$REPOLOCK_FENCING_TOKEN" > "$0.tmp" && mv "$0.tmp" "$0"
read line
curl -s -o "$1.body" -w '%{http_code}' -X POST \
	-H "Authorization: Bearer $REPOLOCK_TOKEN" -H 'Content-Type: application/json' \
	-H "Repolock-Fencing-Token: $REPOLOCK_FENCING_TOKEN" -d '{"message":"stale holder"}' \
	"$REPOLOCK_URL/v1/repositories/` + repo + `/branches/main/commits" > "$1.tmp" && mv "$1.tmp" "$1"
exec sleep 300`
	cmd := exec.Command(binPath, "lease", "run", "--url", s.URL, "--key", key, "--ttl", "1s", "--kill-after", "2s",
		"--", "sh", "-c", script, tokenFile, result)
	cmd.Env = append(cleanEnv(), "REPOLOCK_TOKEN="+token, "REPOLOCK_URL="+s.URL)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	var stale string
	for stale == "" {
		select {
		case err := <-done:
			t.Fatalf("repolock lease run ended early: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if b, err := os.ReadFile(tokenFile); err == nil {
			stale = strings.TrimSpace(string(b))
		}
	}

	// Pause the holder past its TTL.
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Another acquirer takes the key once the paused lease expired by the
	// database's clock, and writes with its token.
	l, err := c.AcquireLease(ctx, client.AcquireLeaseRequest{Key: key, TTL: time.Minute, Wait: 20 * time.Second})
	if err != nil {
		t.Fatalf("the second acquirer: %v (the paused holder's token %s)", err, stale)
	}
	if got := strconv.FormatInt(l.FencingToken-1, 10); got != stale {
		t.Fatalf("the second acquirer's token %d does not follow the paused holder's %s", l.FencingToken, stale)
	}
	if _, err := c.WithFencingToken(l.FencingToken).Commit(ctx, repo, "main", client.CommitRequest{Message: "new holder"}); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}

	// Resume: the command gets "go" at once and writes with the stale
	// token before anything tells it the lease is gone.
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(stderr.String(), "was lost") {
			t.Fatalf("repolock lease run after SIGCONT: %v, stderr %q; want exit 4, lease lost", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("repolock lease run did not stop its command after SIGCONT; stderr %q", stderr.String())
	}
	status, err := os.ReadFile(result)
	if err != nil {
		t.Fatalf("the stale holder's write has no answer: %v", err)
	}
	body, _ := os.ReadFile(result + ".body")
	var resp map[string]any
	if err := json.Unmarshal(body, &resp); err != nil || string(status) != "409" || errorCode(resp) != "fenced" {
		t.Fatalf("the stale holder's write: %s %s; want 409 fenced", status, body)
	}
	// The branch holds the new holder's commit, not the stale one.
	b, err := c.GetBranch(ctx, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	commit, err := c.GetCommit(ctx, repo, b.CommitID)
	if err != nil || commit.Message != "new holder" {
		t.Fatalf("branch head: %+v, %v; want the new holder's commit", commit, err)
	}
}
