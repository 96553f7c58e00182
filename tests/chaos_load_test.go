package tests

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/repolock/repolock/internal/chaostest"
)

// The chaos load and its verifier, shared by TestChaosShort (make test:
// seconds, one fault through a proxy) and TestChaos (make test-chaos: its
// own Postgres, three replicas, the four faults). Every request and answer
// is recorded (chaostest.Recorder); the ownership history of every key is
// checked with Porcupine; the stored state is compared with what was
// acknowledged.

// chaosLoad is the load generator: clients acting as tenants, creating and
// deleting Applications and Repository Credentials on a few repositories
// spelled several ways, and repositories (repostate).
type chaosLoad struct {
	rec      *chaostest.Recorder
	tenants  []chaosTenant
	replicas func() []string // the replicas' current URLs
	hc       *http.Client
	// checkTimeout bounds each Porcupine check (a timeout fails the run
	// as "unknown": raise it for long runs).
	checkTimeout time.Duration

	mu       sync.Mutex
	stats    map[string]*faultStats // by fault label
	perRep   map[int]*replicaStats
	badRetry []string // 503s without Retry-After
	bad500   []string
	repos    map[string]int // repository answers by status
	repoKeys map[string]int // tenant/name -> tenant index, for the final reads
}

type chaosTenant struct {
	name, token string
}

type faultStats struct {
	requests, acked, unknown, s500, s503, s503NoRetry, transport int
}

// replicaStats follow one replica's answers: the last time it failed and
// the first success after a fault ended, for recovery times.
type replicaStats struct {
	ok, failed  int
	faultEnded  time.Time
	fault       string // the fault that ended
	recoveredAt time.Time
	recoveries  []recovery
}

type recovery struct {
	fault string
	took  time.Duration
}

// chaosRepos are the repositories of the load; each is spelled four ways.
func chaosSpellings(i int) (key string, spellings []string) {
	key = fmt.Sprintf("github.com/chaos/repo-%d", i)
	return key, []string{
		fmt.Sprintf("https://github.com/chaos/repo-%d", i),
		fmt.Sprintf("git@github.com:chaos/repo-%d.git", i),
		fmt.Sprintf("ssh://git@github.com:22/chaos/repo-%d", i),
		fmt.Sprintf("HTTPS://GitHub.com/chaos/repo-%d.git/", i),
	}
}

func newChaosLoad(rec *chaostest.Recorder, tenants []chaosTenant, replicas func() []string) *chaosLoad {
	return &chaosLoad{
		rec: rec, tenants: tenants, replicas: replicas,
		// A request may wait for the database (REQUEST_TIMEOUT is 5 s); a
		// replica killed mid-request is a transport error.
		hc:           &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		stats:        map[string]*faultStats{},
		checkTimeout: 2 * time.Minute,
		perRep:       map[int]*replicaStats{},
		repos:        map[string]int{},
		repoKeys:     map[string]int{},
	}
}

// answer is one HTTP exchange's result.
type answer struct {
	status     int
	body       []byte
	retryAfter string
	err        error // transport
}

func (l *chaosLoad) do(ctx context.Context, replica int, method, path, token string, body any) answer {
	urls := l.replicas()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, urls[replica]+path, rd)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := l.hc.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, retryAfter: resp.Header.Get("Retry-After")}
}

// classify turns an answer into an outcome. Refusals are the caller's.
func classify(a answer) chaostest.Outcome {
	switch {
	case a.err != nil:
		// Never connected: nothing was sent. Anything else (reset, EOF,
		// timeout) may have been applied.
		var op *net.OpError
		if errors.As(a.err, &op) && op.Op == "dial" || errors.Is(a.err, syscall.ECONNREFUSED) {
			return chaostest.Failed
		}
		return chaostest.Unknown
	case a.status >= 200 && a.status < 300:
		return chaostest.OK
	case a.status == http.StatusServiceUnavailable:
		if strings.Contains(string(a.body), `"outcome":"unknown"`) {
			return chaostest.Unknown
		}
		return chaostest.Failed
	case a.status == http.StatusInternalServerError, a.status == http.StatusGatewayTimeout:
		return chaostest.Unknown
	}
	return chaostest.Failed
}

// note counts an answer under the fault in progress and for the replica.
func (l *chaosLoad) note(fault string, replica int, what string, a answer, outcome chaostest.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fault == "" {
		fault = "none"
	}
	st := l.stats[fault]
	if st == nil {
		st = &faultStats{}
		l.stats[fault] = st
	}
	st.requests++
	switch {
	case a.err != nil:
		st.transport++
	case a.status == 500:
		st.s500++
		l.bad500 = append(l.bad500, fmt.Sprintf("%s: %s", what, a.body))
	case a.status == 503:
		st.s503++
		if a.retryAfter == "" {
			st.s503NoRetry++
			l.badRetry = append(l.badRetry, fmt.Sprintf("%s: %s", what, a.body))
		}
	}
	if outcome == chaostest.OK {
		st.acked++
	}
	if outcome == chaostest.Unknown {
		st.unknown++
	}
	rs := l.perRep[replica]
	if rs == nil {
		rs = &replicaStats{}
		l.perRep[replica] = rs
	}
	good := a.err == nil && a.status < 500
	if good {
		rs.ok++
		if !rs.faultEnded.IsZero() && rs.recoveredAt.IsZero() {
			rs.recoveredAt = time.Now()
			rs.recoveries = append(rs.recoveries, recovery{rs.fault, rs.recoveredAt.Sub(rs.faultEnded)})
		}
	} else {
		rs.failed++
	}
}

// faultEnded marks the end of the fault name: each replica's next success
// after now is its recovery.
func (l *chaosLoad) faultEnded(replicas int, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for i := range replicas {
		rs := l.perRep[i]
		if rs == nil {
			rs = &replicaStats{}
			l.perRep[i] = rs
		}
		rs.faultEnded, rs.fault, rs.recoveredAt = now, name, time.Time{}
	}
}

// ref is a reference the load created (or tried to).
type chaosRef struct {
	kind, id, ref, key string
	tenant             int
}

var ownerRE = regexp.MustCompile(`"owner":"([^"]*)"`)

// run runs clients until ctx ends. Client c acts as tenant c%len(tenants)
// on replica c%len(replicas).
func (l *chaosLoad) run(ctx context.Context, clients, keys int) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.client(ctx, c, keys)
		}()
	}
	wg.Wait()
}

func (l *chaosLoad) client(ctx context.Context, c, keys int) {
	rng := rand.New(rand.NewPCG(uint64(c), 42))
	ti := c % len(l.tenants)
	tenant := l.tenants[ti]
	var mine []chaosRef // acknowledged, not yet deleted
	repoSeq := 0
	// backoff: after an answer that asks to come back later (503, a
	// transport error), wait a little, as a client honouring Retry-After
	// with jitter would (shorter, to keep the pressure on).
	backoff := func(a answer) {
		if a.err != nil || a.status == http.StatusServiceUnavailable {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond):
			}
		}
	}
	for seq := 0; ctx.Err() == nil; seq++ {
		replica := (c + seq) % len(l.replicas())
		p := rng.IntN(100)
		switch {
		case p < 60 || (p < 92 && len(mine) == 0):
			kind := "app"
			if p%3 == 0 {
				kind = "cred"
			}
			key, spellings := chaosSpellings(rng.IntN(keys))
			name := fmt.Sprintf("c%d-%d", c, seq)
			r := chaosRef{kind: kind, key: key, tenant: ti, ref: kind + "/" + tenant.name + "/" + name}
			op := l.rec.Call(chaostest.OwnershipKind, c, key, chaostest.OwnershipInput{Op: chaostest.Claim, Tenant: tenant.name, Ref: r.ref})
			path, body := "/v1/applications", map[string]any{"name": name, "repo_url": spellings[rng.IntN(len(spellings))], "path": "p"}
			if kind == "cred" {
				path, body = "/v1/repository-credentials", map[string]any{"name": name, "repo_url": spellings[rng.IntN(len(spellings))], "secret_ref": "vault://x"}
			}
			a := l.do(ctx, replica, http.MethodPost, path, tenant.token, body)
			if ctx.Err() != nil && a.err != nil {
				l.rec.Return(op, chaostest.Unknown, nil, 0, "cancelled at the end of the run")
				return
			}
			outcome := classify(a)
			var out chaostest.OwnershipOutput
			if a.status == http.StatusConflict && strings.Contains(string(a.body), "repository_claimed") {
				outcome = chaostest.Refused
				if m := ownerRE.FindSubmatch(a.body); m != nil {
					out.Owner = string(m[1])
				}
			}
			l.rec.Return(op, outcome, out, a.status, errText(a))
			l.note(op.Fault, replica, "POST "+path, a, outcome)
			backoff(a)
			if outcome == chaostest.OK {
				var created struct {
					ID            string `json:"id"`
					NormalizedURL string `json:"normalized_url"`
				}
				_ = json.Unmarshal(a.body, &created)
				r.id = created.ID
				mine = append(mine, r)
			}
		case p < 92:
			i := rng.IntN(len(mine))
			r := mine[i]
			path := "/v1/applications/" + r.id
			if r.kind == "cred" {
				path = "/v1/repository-credentials/" + r.id
			}
			op := l.rec.Call(chaostest.OwnershipKind, c, r.key, chaostest.OwnershipInput{Op: chaostest.Unclaim, Tenant: tenant.name, Ref: r.ref})
			a := l.do(ctx, replica, http.MethodDelete, path, tenant.token, nil)
			if ctx.Err() != nil && a.err != nil {
				l.rec.Return(op, chaostest.Unknown, nil, 0, "cancelled at the end of the run")
				return
			}
			outcome := classify(a)
			if a.status == http.StatusNotFound {
				outcome = chaostest.Refused
			}
			l.rec.Return(op, outcome, chaostest.OwnershipOutput{}, a.status, errText(a))
			l.note(op.Fault, replica, "DELETE "+path, a, outcome)
			backoff(a)
			if outcome != chaostest.Failed {
				// Gone, or perhaps gone: never deleted again (a second
				// delete of a pending one would be a refusal the model
				// cannot place).
				mine = slices.Delete(mine, i, i+1)
			}
		default:
			// Repositories (repostate): create, then delete the previous.
			name := fmt.Sprintf("r%d-%d", c, repoSeq)
			method, path, body := http.MethodPost, "/v1/repositories", any(map[string]any{"name": name, "storage_namespace": "s3://chaos/" + name})
			if repoSeq%2 == 1 {
				method, path, body = http.MethodDelete, "/v1/repositories/"+fmt.Sprintf("r%d-%d", c, repoSeq-1), nil
			}
			target := fmt.Sprintf("r%d-%d", c, repoSeq-repoSeq%2)
			repoSeq++
			key := tenant.name + "/" + target
			in := chaostest.ExistenceInput{Op: chaostest.Create}
			if method == http.MethodDelete {
				in.Op = chaostest.Delete
			}
			l.mu.Lock()
			l.repoKeys[key] = ti
			l.mu.Unlock()
			op := l.rec.Call(chaostest.RepositoryKind, c, key, in)
			fault := op.Fault
			a := l.do(ctx, replica, method, path, tenant.token, body)
			if ctx.Err() != nil && a.err != nil {
				l.rec.Return(op, chaostest.Unknown, nil, 0, "cancelled at the end of the run")
				return
			}
			outcome := classify(a)
			if (method == http.MethodPost && a.status == http.StatusConflict) || (method == http.MethodDelete && a.status == http.StatusNotFound) {
				outcome = chaostest.Refused
			}
			l.rec.Return(op, outcome, chaostest.ExistenceOutput{}, a.status, errText(a))
			l.note(fault, replica, method+" "+path, a, outcome)
			backoff(a)
			l.mu.Lock()
			l.repos[method+" "+strconv.Itoa(a.status)]++
			l.mu.Unlock()
		}
	}
}

func errText(a answer) string {
	if a.err != nil {
		return a.err.Error()
	}
	if a.status >= 400 {
		return string(bytes.TrimSpace(a.body))
	}
	return ""
}

// chaosVerdict is what the verifier found.
type chaosVerdict struct {
	acked, lost, phantoms, doubleOwners, unknown int
	endCut                                       int                // unknown because the run ended mid-request
	byFault                                      map[string]*[3]int // lost, phantoms, double owners by the fault of the request
	problems                                     []string
	result                                       chaostest.Result
	repos                                        chaostest.Result
}

// verify reads what is stored (owner and references of every key) on db,
// adds it to the history as a final read of each key, checks the history
// with Porcupine and counts lost acknowledgements, phantoms and double
// owners.
func (l *chaosLoad) verify(t testing.TB, db *sql.DB, keys int) chaosVerdict {
	t.Helper()
	v := chaosVerdict{byFault: map[string]*[3]int{}}
	blame := func(fault string, i int) {
		if fault == "" {
			fault = "none"
		}
		if v.byFault[fault] == nil {
			v.byFault[fault] = &[3]int{}
		}
		v.byFault[fault][i]++
	}
	stored := map[string]map[string]string{} // key -> ref -> tenant
	owners := map[string]string{}
	rows, err := db.Query(`
		SELECT 'app/' || u.name || '/' || a.name, a.normalized_url, u.name FROM applications a JOIN cluster_users u ON u.id = a.cluster_user_id
		UNION ALL
		SELECT 'cred/' || u.name || '/' || c.name, c.normalized_url, u.name FROM repository_credentials c JOIN cluster_users u ON u.id = c.cluster_user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ref, key, tenant string
		if err := rows.Scan(&ref, &key, &tenant); err != nil {
			t.Fatal(err)
		}
		if stored[key] == nil {
			stored[key] = map[string]string{}
		}
		stored[key][ref] = tenant
	}
	rows.Close()
	rows, err = db.Query(`SELECT o.git_repository_url, u.name FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, tenant string
		if err := rows.Scan(&key, &tenant); err != nil {
			t.Fatal(err)
		}
		owners[key] = tenant
	}
	rows.Close()

	// Final reads, then the check.
	for i := range keys {
		key, _ := chaosSpellings(i)
		refs := make([]string, 0, len(stored[key]))
		for ref := range stored[key] {
			refs = append(refs, ref)
		}
		sort.Strings(refs)
		op := l.rec.Call(chaostest.OwnershipKind, 1000, key, chaostest.OwnershipInput{Op: chaostest.Read})
		l.rec.Return(op, chaostest.OK, chaostest.OwnershipOutput{Owner: owners[key], Refs: refs}, 200, "")
	}
	ops := l.rec.Ops()
	// Acknowledged against stored: lost acknowledged creates (not deleted,
	// not under a delete of unknown outcome), phantoms (stored, but
	// answered "nothing applied" or never asked).
	type fate struct {
		created, deleteOutcome chaostest.Outcome
		fault, deleteFault     string
	}
	fates := map[string]*fate{}
	for _, op := range ops {
		if op.Kind != chaostest.OwnershipKind {
			continue
		}
		in := op.Input.(chaostest.OwnershipInput)
		switch in.Op {
		case chaostest.Claim:
			fates[in.Ref] = &fate{created: op.Outcome, fault: op.Fault}
			if op.Outcome == chaostest.OK {
				v.acked++
			}
			if op.Outcome == chaostest.Unknown {
				v.unknown++
			}
		case chaostest.Unclaim:
			if f := fates[in.Ref]; f != nil {
				f.deleteOutcome, f.deleteFault = op.Outcome, op.Fault
			}
			if op.Outcome == chaostest.OK {
				v.acked++
			}
			if op.Outcome == chaostest.Unknown {
				v.unknown++
			}
		}
	}
	storedRef := map[string]bool{}
	for _, refs := range stored {
		for ref := range refs {
			storedRef[ref] = true
		}
	}
	for ref, f := range fates {
		deleted := f.deleteOutcome == chaostest.OK || f.deleteOutcome == chaostest.Unknown
		switch {
		case f.created == chaostest.OK && !deleted && !storedRef[ref]:
			v.lost++
			blame(f.fault, 0)
			v.problems = append(v.problems, "lost: acknowledged "+ref+" is not stored")
		case f.deleteOutcome == chaostest.OK && storedRef[ref]:
			v.lost++
			blame(f.deleteFault, 0)
			v.problems = append(v.problems, "lost: acknowledged delete of "+ref+" is still stored")
		case (f.created == chaostest.Failed || f.created == chaostest.Refused) && storedRef[ref]:
			v.phantoms++
			blame(f.fault, 1)
			v.problems = append(v.problems, fmt.Sprintf("phantom: %s answered %s is stored", ref, f.created))
		}
	}
	for ref := range storedRef {
		if fates[ref] == nil {
			v.phantoms++
			blame("", 1)
			v.problems = append(v.problems, "phantom: "+ref+" was never asked for")
		}
	}
	// Double owners: a reference of a tenant other than its key's owner,
	// or a reference without a lock.
	for key, refs := range stored {
		for ref, tenant := range refs {
			if owners[key] != tenant {
				v.doubleOwners++
				fault := ""
				if f := fates[ref]; f != nil {
					fault = f.fault
				}
				blame(fault, 2)
				v.problems = append(v.problems, fmt.Sprintf("double owner: %s on %s, owned by %q", ref, key, owners[key]))
			}
		}
	}
	for _, op := range ops {
		if op.Outcome == chaostest.Unknown && op.Error == "cancelled at the end of the run" {
			v.endCut++
		}
	}
	v.result = chaostest.Check(chaostest.Ownership{}, ops, l.checkTimeout)

	// Repositories: the final read of every name through the API (404
	// and 410, a deletion the Cleaner completes, are absent).
	l.mu.Lock()
	repoKeys := make(map[string]int, len(l.repoKeys))
	for k, ti := range l.repoKeys {
		repoKeys[k] = ti
	}
	l.mu.Unlock()
	for key, ti := range repoKeys {
		_, name, _ := strings.Cut(key, "/")
		op := l.rec.Call(chaostest.RepositoryKind, 1000, key, chaostest.ExistenceInput{Op: chaostest.Exists})
		a := l.do(context.Background(), 0, http.MethodGet, "/v1/repositories/"+name, l.tenants[ti].token, nil)
		switch a.status {
		case http.StatusOK:
			l.rec.Return(op, chaostest.OK, chaostest.ExistenceOutput{Present: true}, a.status, "")
		case http.StatusNotFound, http.StatusGone:
			l.rec.Return(op, chaostest.OK, chaostest.ExistenceOutput{Present: false}, a.status, "")
		default:
			l.rec.Return(op, chaostest.Failed, nil, a.status, errText(a))
			v.problems = append(v.problems, fmt.Sprintf("final read of repository %s: %d %s", key, a.status, errText(a)))
		}
	}
	v.repos = chaostest.Check(chaostest.Existence{Kind: chaostest.RepositoryKind}, l.rec.Ops(), l.checkTimeout)
	return v
}

// report prints the table and the per-replica recoveries, and on failure
// saves the histories and the visualization; it fails t on any violation.
func (l *chaosLoad) report(t testing.TB, v chaosVerdict, artefacts string, batches string) string {
	t.Helper()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\trequests\tacknowledged\tunknown\tlost\tphantoms\tdouble owners\t500s\t503s\t503s without Retry-After\ttransport errors\trecovery (slowest replica)\t")
	l.mu.Lock()
	slowest := map[string]time.Duration{}
	for _, rs := range l.perRep {
		for _, r := range rs.recoveries {
			slowest[r.fault] = max(slowest[r.fault], r.took)
		}
	}
	faults := make([]string, 0, len(l.stats))
	for f := range l.stats {
		faults = append(faults, f)
	}
	sort.Strings(faults)
	var total faultStats
	for _, f := range faults {
		s := l.stats[f]
		bad := v.byFault[f]
		if bad == nil {
			bad = &[3]int{}
		}
		rec := "-"
		if d, ok := slowest[f]; ok {
			rec = d.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", f, s.requests, s.acked, s.unknown, bad[0], bad[1], bad[2], s.s500, s.s503, s.s503NoRetry, s.transport, rec)
		total.requests += s.requests
		total.acked += s.acked
		total.unknown += s.unknown
		total.s500 += s.s500
		total.s503 += s.s503
		total.s503NoRetry += s.s503NoRetry
		total.transport += s.transport
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\t\n", total.requests, total.acked, total.unknown, v.lost, v.phantoms, v.doubleOwners, total.s500, total.s503, total.s503NoRetry, total.transport)
	tw.Flush()
	fmt.Fprintf(&b, "\nownership: acknowledged writes %d, lost %d, phantoms %d, double owners %d, unknown outcomes %d (%d of them cut by the end of the run; reported, not failed)\n",
		v.acked, v.lost, v.phantoms, v.doubleOwners, v.unknown, v.endCut)
	fmt.Fprintf(&b, "Porcupine: %s\n", v.result)
	fmt.Fprintf(&b, "Porcupine: %s\n", v.repos)
	reps := make([]int, 0, len(l.perRep))
	for r := range l.perRep {
		reps = append(reps, r)
	}
	sort.Ints(reps)
	for _, r := range reps {
		rs := l.perRep[r]
		var ms []string
		for _, r := range rs.recoveries {
			ms = append(ms, fmt.Sprintf("%s %s", r.fault, r.took.Round(time.Millisecond)))
		}
		fmt.Fprintf(&b, "replica %d: %d answered, %d failed; recovery after each fault: %s\n", r, rs.ok, rs.failed, strings.Join(ms, ", "))
	}
	repos := make([]string, 0, len(l.repos))
	for k, n := range l.repos {
		repos = append(repos, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(repos)
	fmt.Fprintf(&b, "repositories: %s\n", strings.Join(repos, ", "))
	if batches != "" {
		fmt.Fprintf(&b, "group commit: %s\n", batches)
	}
	bad500, badRetry := l.bad500, l.badRetry
	l.mu.Unlock()

	failed := v.lost > 0 || v.phantoms > 0 || v.doubleOwners > 0 || !v.result.OK() || !v.repos.OK() || total.s500 > 0 || total.s503NoRetry > 0
	if failed {
		for _, p := range v.problems {
			fmt.Fprintln(&b, "  "+p)
		}
		for _, p := range bad500[:min(len(bad500), 10)] {
			fmt.Fprintln(&b, "  500: "+p)
		}
		for _, p := range badRetry[:min(len(badRetry), 10)] {
			fmt.Fprintln(&b, "  503 without Retry-After: "+p)
		}
		if err := os.MkdirAll(artefacts, 0o755); err == nil {
			f, err := os.Create(filepath.Join(artefacts, "requests.jsonl"))
			if err == nil {
				_ = chaostest.WriteJSONL(f, l.rec.Ops())
				f.Close()
			}
			paths, err := v.result.SaveArtefacts(artefacts)
			more, err2 := v.repos.SaveArtefacts(artefacts)
			fmt.Fprintf(&b, "artefacts (histories, Porcupine's visualization): %s %v %v\n", artefacts, append(paths, more...), errors.Join(err, err2))
		}
	}
	t.Log("\n" + b.String())
	if failed {
		t.Errorf("chaos: the answers were not all true (artefacts in %s)", artefacts)
	}
	return b.String()
}

// batchFigures reads the group-commit counters of each replica's /metrics
// and returns "statement: calls/batches = mean" lines.
func batchFigures(urls []string) string {
	calls, batches := map[string]float64{}, map[string]float64{}
	re := regexp.MustCompile(`^repolock_db_(batch_calls|batches)_total\{statement="([^"]+)"\} (\S+)`)
	for _, u := range urls {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			m := re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			f, _ := strconv.ParseFloat(m[3], 64)
			if m[1] == "batch_calls" {
				calls[m[2]] += f
			} else {
				batches[m[2]] += f
			}
		}
	}
	var out []string
	for s, n := range batches {
		if n > 0 {
			out = append(out, fmt.Sprintf("%s %.0f calls in %.0f batches (%.2f per batch)", s, calls[s], n, calls[s]/n))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
