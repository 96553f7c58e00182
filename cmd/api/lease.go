package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/repolock/repolock/client"
)

// Exit codes of `repolock lease run` besides the command's own.
const (
	exitLeaseHeld = 3 // the key was held (at the end of --wait)
	exitLeaseLost = 4 // the lease was lost while the command ran
)

// runLease is `repolock lease run`: the "run once across the fleet" tool.
func runLease(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "run" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(e.stdout, "Usage: repolock lease run [flags] -- COMMAND [ARG...]")
			return flag.ErrHelp
		}
		fmt.Fprintln(e.stderr, "Usage: repolock lease run [flags] -- COMMAND [ARG...]")
		return errUsage
	}
	fs := newFlagSet(e, "lease run", "-- COMMAND [ARG...]",
		"Holds a lease on KEY (through the HTTP API of a repolock server) while COMMAND runs, keeping it\n"+
			"alive every TTL/3. COMMAND gets REPOLOCK_LEASE_ID, REPOLOCK_LEASE_KEY and REPOLOCK_FENCING_TOKEN\n"+
			"(send it as the Repolock-Fencing-Token header of its guarded writes). When the lease is lost\n"+
			"(a keepalive found it expired or taken over, or none succeeded for a whole TTL) COMMAND gets\n"+
			"SIGTERM, then SIGKILL after --kill-after, and repolock exits 4. A key still held at the end of\n"+
			"--wait exits 3. Otherwise repolock releases the lease and exits with COMMAND's status.")
	var (
		url       = fs.String("url", fs.envOr("REPOLOCK_URL", ""), "base URL of the repolock API, such as http://127.0.0.1:8080 [REPOLOCK_URL]")
		token     = fs.String("token", "", "tenant API token; default from the environment [REPOLOCK_TOKEN]")
		key       = fs.String("key", "", "the lease key: a name, or a repository URL (normalized like a claim)")
		ttl       = fs.Duration("ttl", 15*time.Second, "the lease's time to live; kept alive every ttl/3")
		wait      = fs.Duration("wait", 0, "how long to wait for a held key; 0 exits 3 at once when it is held")
		holder    = fs.String("holder", "", "a description of this holder shown in lease lists; default host:pid")
		killAfter = fs.Duration("kill-after", 10*time.Second, "time between SIGTERM and SIGKILL when the lease is lost")
	)
	pos, err := fs.parse(args[1:])
	if err != nil {
		return err
	}
	if *token == "" {
		*token = e.getenv("REPOLOCK_TOKEN")
	}
	switch {
	case len(pos) == 0:
		fmt.Fprintln(e.stderr, "repolock lease run: a command to run is required (after --)")
		return errUsage
	case *url == "" || *token == "" || *key == "":
		fmt.Fprintln(e.stderr, "repolock lease run: --url, --token and --key are required")
		return errUsage
	}
	if *holder == "" {
		host, _ := os.Hostname()
		*holder = host + ":" + strconv.Itoa(os.Getpid())
	}
	c := client.New(*url, client.WithToken(*token))
	// The lease lives until the command ends, not until ctx (a SIGTERM
	// to api stops the command first).
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLease()
	l, err := c.Lease(leaseCtx, client.AcquireLeaseRequest{Key: *key, TTL: *ttl, Wait: *wait, Holder: *holder})
	if client.IsLeaseHeld(err) {
		return &exitError{code: exitLeaseHeld, err: err}
	}
	if err != nil {
		return err
	}
	st := l.State()
	cmd := exec.Command(pos[0], pos[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), "REPOLOCK_LEASE_ID="+st.LeaseID, "REPOLOCK_LEASE_KEY="+st.Key,
		"REPOLOCK_FENCING_TOKEN="+strconv.FormatInt(st.FencingToken, 10))
	if err := cmd.Start(); err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return &exitError{code: 127, err: fmt.Errorf("start %s: %w", pos[0], err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopCommand := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(*killAfter):
			_ = cmd.Process.Kill()
			return <-exited
		}
	}
	var runErr error
	select {
	case runErr = <-exited:
	case <-l.Done():
		_ = stopCommand()
		return &exitError{code: exitLeaseLost, err: fmt.Errorf("the lease on %s (fencing token %d) was lost; the command was stopped: %w", st.Key, st.FencingToken, l.Err())}
	case <-ctx.Done():
		runErr = stopCommand()
	}
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := l.Release(relCtx); err != nil && !errors.Is(err, client.ErrLeaseReleased) {
		fmt.Fprintf(e.stderr, "repolock lease run: releasing the lease: %v\n", err)
	}
	var ee *exec.ExitError
	switch {
	case runErr == nil:
		return nil
	case errors.As(runErr, &ee):
		code := ee.ExitCode()
		if code < 0 {
			code = 128 + int(syscall.SIGTERM)
		}
		return &exitError{code: code}
	default:
		return runErr
	}
}
