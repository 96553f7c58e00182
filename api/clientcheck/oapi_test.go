package clientcheck

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/repolock/repolock/api/clientcheck/oapi"
)

// TestOAPICodegenClient starts the real binary (REPOLOCK_BIN, else built
// from ../../cmd/api) on a database of its own on TEST_DATABASE_URL's server
// and calls three endpoints through the client oapi-codegen generated:
// createUser (admin), acquireLock (a claim, then another tenant's claim
// refused with 409 repository_claimed naming the owner) and listLocks.
func TestOAPICodegenClient(t *testing.T) {
	admin := os.Getenv("TEST_DATABASE_URL")
	if admin == "" {
		t.Skip("TEST_DATABASE_URL is not set: the oapi-codegen client was generated and compiled, but not run against the binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dbURL := createDatabase(t, ctx, admin)
	adminToken := "rla_" + randomHex(t, 24)
	base := startServer(t, ctx, binary(t), dbURL, adminToken)

	bearer := func(token string) oapi.ClientOption {
		return oapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		})
	}
	asAdmin, err := oapi.NewClientWithResponses(base, bearer(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	tenant := func(name string) *oapi.ClientWithResponses {
		t.Helper()
		r, err := asAdmin.CreateUserWithResponse(ctx, oapi.CreateUserJSONRequestBody{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if r.JSON201 == nil || r.JSON201.Name != name || !strings.HasPrefix(r.JSON201.Token, "rlt_") {
			t.Fatalf("createUser %s: %d %s", name, r.StatusCode(), r.Body)
		}
		c, err := oapi.NewClientWithResponses(base, bearer(r.JSON201.Token))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := tenant("alice"), tenant("bob")

	claim, err := alice.AcquireLockWithResponse(ctx, oapi.AcquireLockJSONRequestBody{RepoUrl: "git@github.com:argoproj/argocd-example-apps.git"})
	if err != nil {
		t.Fatal(err)
	}
	if claim.JSON200 == nil || claim.JSON200.NormalizedUrl == "" {
		t.Fatalf("acquireLock: %d %s", claim.StatusCode(), claim.Body)
	}
	refused, err := bob.AcquireLockWithResponse(ctx, oapi.AcquireLockJSONRequestBody{RepoUrl: "https://github.com/argoproj/argocd-example-apps"})
	if err != nil {
		t.Fatal(err)
	}
	if refused.JSON409 == nil || refused.JSON409.Error.Code != oapi.ErrorCodeRepositoryClaimed ||
		refused.JSON409.Error.Owner == nil || *refused.JSON409.Error.Owner != "alice" {
		t.Fatalf("acquireLock of alice's repository by bob: %d %s, want 409 repository_claimed owner alice", refused.StatusCode(), refused.Body)
	}

	size := 10
	locks, err := alice.ListLocksWithResponse(ctx, &oapi.ListLocksParams{PageSize: &size})
	if err != nil {
		t.Fatal(err)
	}
	if locks.JSON200 == nil || len(locks.JSON200.Items) != 1 || locks.JSON200.Items[0].Id != claim.JSON200.LockId {
		t.Fatalf("listLocks: %d %s, want alice's one lock %s", locks.StatusCode(), locks.Body, claim.JSON200.LockId)
	}
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// createDatabase creates an empty database on admin's server, dropped at
// the end of the test, and returns its URL.
func createDatabase(t *testing.T, ctx context.Context, admin string) string {
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	name := "repolock_test_clientcheck_" + randomHex(t, 6)
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database (TEST_DATABASE_URL): %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// binary is REPOLOCK_BIN or the binary built from ../../cmd/api.
func binary(t *testing.T) string {
	if b := os.Getenv("REPOLOCK_BIN"); b != "" {
		return b
	}
	out := filepath.Join(t.TempDir(), "api")
	build := exec.Command("go", "build", "-o", out, "./cmd/api")
	build.Dir = filepath.Join("..", "..")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/api: %v\n%s", err, b)
	}
	return out
}

// startServer runs `serve` on a free port, waits until it is ready and
// returns its base URL; the server is stopped at the end of the test.
func startServer(t *testing.T, ctx context.Context, bin, dbURL, adminToken string) string {
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "ADMIN_TOKEN="+adminToken,
		"LISTEN_ADDR=127.0.0.1:0", "LOG_FORMAT=json", "MIGRATE_ON_START=true")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cmd.Stdout = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-done
		_ = cmd.Wait()
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-done:
		t.Fatalf("serve exited before listening")
	case <-ctx.Done():
		t.Fatalf("serve did not listen in time")
	}
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/readyz never answered 200: %v", base, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
