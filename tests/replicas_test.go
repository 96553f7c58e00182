package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// Three `repolock serve` replicas on one database, with `repolock gc` and `api
// migrate up` processes running at the same time, under the lock race
// workload: every key has exactly one owner, no request answers 5xx, and
// collections never overlap.
func TestThreeReplicasEndToEnd(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	runReplicaRace(t, replicaSetup{
		ServeURL:  dbURL,
		CLIEnv:    []string{"DATABASE_URL=" + dbURL},
		DirectURL: dbURL,
	})
}

// replicaSetup says how the replicas and the CLI reach the database.
type replicaSetup struct {
	// ServeURL is the replicas' DATABASE_URL.
	ServeURL string
	// ServeEnv is added to the replicas' environment.
	ServeEnv []string
	// CLIEnv is the environment of the `repolock gc` and `repolock migrate up`
	// processes (DATABASE_URL and anything else).
	CLIEnv []string
	// DirectURL is a direct connection the test checks the outcome with.
	DirectURL string
}

// runReplicaRace starts three replicas on an empty database after three
// concurrent `repolock migrate up`, runs the race workload over them while `api
// gc` and `repolock migrate up` processes run, and checks the outcome.
func runReplicaRace(t *testing.T, setup replicaSetup) {
	t.Helper()
	// The schema is created by three concurrent migrations.
	runConcurrentCLI(t, setup.CLIEnv, 3, "migrate", "up")

	serveEnv := append([]string{"GC_INTERVAL=150ms", "GC_MIN_AGE=0s"}, setup.ServeEnv...)
	var replicas []*server
	for range 3 {
		replicas = append(replicas, startServerWith(t, serverOptions{DatabaseURL: setup.ServeURL, Env: serveEnv}))
	}
	// The fleet heartbeat (the rate limit's membership) works on this
	// connection, direct or through PgBouncer: every replica counts three.
	for _, s := range replicas {
		waitFleet(t, s, 3)
	}
	// Tenants are created through different replicas; tokens work on all.
	const tenants = 12
	tokens := make([]string, tenants)
	for i := range tokens {
		tokens[i] = replicas[i%3].createTenant(t, fmt.Sprintf("tenant-%02d", i))
	}

	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	// Operators' processes while the workload runs: `repolock gc` (three at a
	// time, again and again) and `repolock migrate up` (three at a time).
	bg.Add(2)
	go func() {
		defer bg.Done()
		for ctx.Err() == nil {
			runConcurrentCLI(t, setup.CLIEnv, 3, "gc", "--min-age", "0s", "--batch-size", "5")
		}
	}()
	go func() {
		defer bg.Done()
		for i := 0; i < 3 && ctx.Err() == nil; i++ {
			runConcurrentCLI(t, setup.CLIEnv, 3, "migrate", "up")
		}
	}()

	statuses := raceWorkload(t, replicas, tokens)
	cancel()
	bg.Wait()
	t.Logf("statuses: %v", statuses)

	checkOwnership(t, setup.DirectURL)
	checkGCRuns(t, setup.DirectURL)
}

// spellings of one repository: every request picks one, so the replicas see
// the same key written many ways.
var spellings = []string{
	"https://github.com/race/repo-%d",
	"git@github.com:Race/Repo-%d.git",
	"ssh://git@github.com:22/race/repo-%d/",
	"HTTPS://GitHub.com/race/repo-%d/",
	"github.com/race/repo-%d",
}

// raceWorkload has every tenant claim, release and re-claim a shared set
// of repositories through all replicas at once (applications,
// credentials and bare acquires), and returns the count of each status.
// Anything but the expected answers fails the test; 5xx never is one.
func raceWorkload(t *testing.T, replicas []*server, tokens []string) map[int]int {
	t.Helper()
	const repos, workersPerTenant, rounds = 8, 2, 24
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		wg       sync.WaitGroup
	)
	record := func(what string, status int, raw []byte, ok ...int) {
		mu.Lock()
		statuses[status]++
		mu.Unlock()
		for _, o := range ok {
			if status == o {
				return
			}
		}
		t.Errorf("%s: unexpected %d %s", what, status, raw)
	}
	for ti, token := range tokens {
		for w := range workersPerTenant {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					s := replicas[(ti+w+r)%len(replicas)]
					repo := (ti*7 + w*3 + r) % repos
					url := fmt.Sprintf(spellings[(ti+r+w)%len(spellings)], repo)
					name := fmt.Sprintf("w%d-r%d", w, r)
					switch r % 3 {
					case 0, 1: // an application or a credential, then (every other time) its deletion
						path, body := "/v1/applications", map[string]any{"name": name, "repo_url": url}
						if r%3 == 1 {
							path, body = "/v1/repository-credentials", map[string]any{"name": name, "repo_url": url, "secret_ref": "vault://race/" + name}
						}
						status, raw := postJSON(t, s, path, token, body)
						record("create "+path, status, raw, http.StatusCreated, http.StatusConflict)
						if status == http.StatusConflict && !bytes.Contains(raw, []byte(`"repository_claimed"`)) {
							t.Errorf("create %s: 409 that is not repository_claimed: %s", path, raw)
						}
						if status == http.StatusCreated && r%2 == 0 {
							var created struct{ ID string }
							_ = json.Unmarshal(raw, &created)
							st, _, raw := replicas[(ti+w+r+1)%len(replicas)].doRaw(t, http.MethodDelete, path+"/"+created.ID, token, nil, nil)
							record("delete "+path, st, raw, http.StatusNoContent)
						}
					case 2: // a bare acquire: an unreferenced lock the GC collects
						status, raw := postJSON(t, s, "/v1/locks/acquire", token, map[string]any{"repo_url": url})
						record("acquire", status, raw, http.StatusOK, http.StatusConflict)
					}
				}
			}()
		}
	}
	wg.Wait()
	for status, n := range statuses {
		if status >= 500 {
			t.Errorf("%d responses with status %d", n, status)
		}
	}
	return statuses
}

func postJSON(t testing.TB, s *server, path, token string, body any) (int, []byte) {
	b, err := json.Marshal(body)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	status, _, raw := s.doRaw(t, http.MethodPost, path, token, http.Header{"Content-Type": {"application/json"}}, bytes.NewReader(b))
	return status, raw
}

// runConcurrentCLI runs n copies of the api binary with args at once and
// fails the test unless each exits 0. Safe to call from any goroutine.
func runConcurrentCLI(t *testing.T, env []string, n int, args ...string) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binPath, args...)
			cmd.Env = append(append(cleanEnv(), "LOG_FORMAT=text", "LOG_LEVEL=warn"), env...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Errorf("api %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
			}
		}()
	}
	wg.Wait()
}

// checkOwnership: every lock has one owner (the table's unique key makes two
// rows impossible, so the check is that references agree with it): every
// application and credential points at the lock of its own normalized URL,
// owned by its own tenant, and no URL has references from two tenants.
func checkOwnership(t *testing.T, dbURL string) {
	t.Helper()
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var wrongApps, wrongCreds, unreferencedApps, sharedURLs, owners int
	err = db.QueryRow(`
SELECT
  (SELECT count(*) FROM applications a
     JOIN RepositoryLockApplication r ON r.application_id = a.id
     JOIN RepositoryLockOwner o ON o.id = r.lock_id
    WHERE o.cluster_user_id <> a.cluster_user_id OR o.git_repository_url <> a.normalized_url),
  (SELECT count(*) FROM repository_credentials c
     JOIN RepositoryLockRepositoryCredential r ON r.repository_credential_id = c.id
     JOIN RepositoryLockOwner o ON o.id = r.lock_id
    WHERE o.cluster_user_id <> c.cluster_user_id OR o.git_repository_url <> c.normalized_url),
  (SELECT count(*) FROM applications a WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication r WHERE r.application_id = a.id))
   + (SELECT count(*) FROM repository_credentials c WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential r WHERE r.repository_credential_id = c.id)),
  (SELECT count(*) FROM (
     SELECT url FROM (SELECT normalized_url AS url, cluster_user_id FROM applications
                      UNION SELECT normalized_url, cluster_user_id FROM repository_credentials) refs
      GROUP BY url HAVING count(DISTINCT cluster_user_id) > 1) s),
  (SELECT count(*) FROM RepositoryLockOwner)`).Scan(&wrongApps, &wrongCreds, &unreferencedApps, &sharedURLs, &owners)
	if err != nil {
		t.Fatal(err)
	}
	if wrongApps != 0 || wrongCreds != 0 || unreferencedApps != 0 || sharedURLs != 0 {
		t.Fatalf("ownership: %d applications and %d credentials on another tenant's or URL's lock, %d without a reference, %d URLs referenced by two tenants",
			wrongApps, wrongCreds, unreferencedApps, sharedURLs)
	}
	if owners == 0 {
		t.Fatal("no locks at the end of the workload")
	}
}

// checkGCRuns: collections ran (from the CLI and the replicas' loops), none
// failed, and no two of them overlapped in time. The replicas are still up,
// so one of their scheduled runs may be running now (its interval is open
// at the top, so it overlaps any later run).
func checkGCRuns(t *testing.T, dbURL string) {
	t.Helper()
	db, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var runs, cli, schedule, unfinished, overlapping int
	err = db.QueryRow(`
SELECT count(*), count(*) FILTER (WHERE trigger = 'cli'), count(*) FILTER (WHERE trigger = 'schedule'),
       count(*) FILTER (WHERE status NOT IN ('succeeded', 'running')),
       (SELECT count(*) FROM gc_runs a JOIN gc_runs b ON a.id < b.id
         AND tstzrange(a.started_at, a.finished_at, '[)') && tstzrange(b.started_at, b.finished_at, '[)'))
  FROM gc_runs`).Scan(&runs, &cli, &schedule, &unfinished, &overlapping)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc_runs: %d (%d cli, %d schedule)", runs, cli, schedule)
	if unfinished != 0 {
		var status, trigger, errText sql.NullString
		_ = db.QueryRow(`SELECT status, trigger, error FROM gc_runs WHERE status NOT IN ('succeeded', 'running') LIMIT 1`).Scan(&status, &trigger, &errText)
		t.Errorf("a gc run that failed: status %s, trigger %s, error %s", status.String, trigger.String, errText.String)
	}
	if runs == 0 || cli == 0 || unfinished != 0 || overlapping != 0 {
		t.Fatalf("gc_runs: %d runs (%d from the CLI, %d scheduled), %d failed or abandoned, %d overlapping pairs", runs, cli, schedule, unfinished, overlapping)
	}
}
