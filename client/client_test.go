package client_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/contracttest"
)

const exampleApps = "git@github.com:argoproj/argocd-example-apps.git"

// must(f())(t) is f's value, or a fatal error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func collect[T any](t *testing.T, seq func(func(T, error) bool)) []T {
	t.Helper()
	var out []T
	for v, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestOperations calls every operation of the document at least once
// against the real server, with every exchange validated against the
// document, and checks the results.
func TestOperations(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	anon := client.New(e.url, client.WithHTTPClient(e.hc))

	// Health and the document.
	if err := anon.Healthz(ctx); err != nil {
		t.Errorf("Healthz: %v", err)
	}
	if err := anon.Readyz(ctx); err != nil {
		t.Errorf("Readyz: %v", err)
	}
	if v := must(anon.Version(ctx))(t); v.GoVersion == "" || v.Version == "" {
		t.Errorf("Version = %+v, want the build's Go version and module version", v)
	}
	// HEAD on the health routes: GET's status, no body (the client has no
	// HEAD call; the validating transport still sees the exchange).
	for _, path := range []string{"/healthz", "/readyz"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) != 0 {
			t.Errorf("HEAD %s = %d with %d body bytes, want 200 and none", path, resp.StatusCode, len(body))
		}
	}
	if m := must(anon.Metrics(ctx))(t); !strings.Contains(string(m), "repolock_http_requests_total") {
		t.Errorf("Metrics has no repolock_http_requests_total")
	}
	if y := must(anon.OpenAPIYAML(ctx))(t); !strings.Contains(string(y), "openapi: 3.0.3") {
		t.Errorf("OpenAPIYAML: %.60q", y)
	}
	if j := must(anon.OpenAPIJSON(ctx))(t); !strings.Contains(string(j), `"openapi":"3.0.3"`) {
		t.Errorf("OpenAPIJSON: %.60q", j)
	}

	// Tenants.
	alice := e.tenant("alice")
	me := must(alice.Me(ctx))(t)
	if me.Name != "alice" || me.ID == "" {
		t.Errorf("Me = %+v", me)
	}
	users := collect(t, e.admin.ListUsers(ctx, client.ListOptions{}))
	if len(users) != 1 || users[0].Name != "alice" {
		t.Errorf("ListUsers = %+v, want alice", users)
	}
	n := must(e.admin.Normalize(ctx, exampleApps))(t)
	if n.Normalized != "github.com/argoproj/argocd-example-apps" || n.Input != "github.com:argoproj/argocd-example-apps.git" {
		t.Errorf("Normalize = %+v", n)
	}

	// Applications, credentials, locks.
	app := must(alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "guestbook", RepoURL: exampleApps, Path: "guestbook"}))(t)
	if app.NormalizedURL != "github.com/argoproj/argocd-example-apps" || app.Path != "guestbook" || app.LockID == "" {
		t.Errorf("CreateApplication = %+v", app)
	}
	if got := must(alice.GetApplication(ctx, app.ID))(t); got.ID != app.ID || got.Name != "guestbook" {
		t.Errorf("GetApplication = %+v", got)
	}
	rev := "v1.2.0"
	if got := must(alice.UpdateApplication(ctx, app.ID, client.UpdateApplicationRequest{TargetRevision: &rev}))(t); got.TargetRevision != rev || got.Path != "guestbook" {
		t.Errorf("UpdateApplication = %+v", got)
	}
	other := must(alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "other", RepoURL: "https://github.com/o/other"}))(t)
	if got := collect(t, alice.ListApplications(ctx, client.ListOptions{})); len(got) != 2 {
		t.Errorf("ListApplications = %+v", got)
	}
	if err := alice.DeleteApplication(ctx, other.ID); err != nil {
		t.Error(err)
	}
	cred := must(alice.CreateRepositoryCredential(ctx, client.CreateRepositoryCredentialRequest{
		Name: "example-apps", RepoURL: "https://github.com/argoproj/argocd-example-apps", Username: "git", SecretRef: "k8s://argocd/creds"}))(t)
	if cred.LockID != app.LockID {
		t.Errorf("credential lock %s, application lock %s: one repository, one lock", cred.LockID, app.LockID)
	}
	if got := must(alice.GetRepositoryCredential(ctx, cred.ID))(t); got.SecretRef != "k8s://argocd/creds" {
		t.Errorf("GetRepositoryCredential = %+v", got)
	}
	ref2 := "k8s://argocd/creds-v2"
	if got := must(alice.UpdateRepositoryCredential(ctx, cred.ID, client.UpdateRepositoryCredentialRequest{SecretRef: &ref2}))(t); got.SecretRef != ref2 {
		t.Errorf("UpdateRepositoryCredential = %+v", got)
	}
	if got := collect(t, alice.ListRepositoryCredentials(ctx, client.ListOptions{})); len(got) != 1 || got[0].ID != cred.ID {
		t.Errorf("ListRepositoryCredentials = %+v", got)
	}
	locks := collect(t, alice.ListLocks(ctx, client.ListOptions{}))
	if len(locks) != 1 || locks[0].ID != app.LockID || locks[0].Applications != 1 || locks[0].RepositoryCredentials != 1 {
		t.Errorf("ListLocks = %+v", locks)
	}
	if l := must(alice.GetLock(ctx, app.LockID))(t); l.NormalizedURL != "github.com/argoproj/argocd-example-apps" {
		t.Errorf("GetLock = %+v", l)
	}
	bare := must(alice.AcquireLock(ctx, "https://github.com/o/bare"))(t)
	if !bare.Acquired || bare.NormalizedURL != "github.com/o/bare" {
		t.Errorf("AcquireLock = %+v", bare)
	}
	if err := alice.DeleteRepositoryCredential(ctx, cred.ID); err != nil {
		t.Error(err)
	}

	// Repository state.
	repo := must(alice.CreateRepository(ctx, client.CreateRepositoryRequest{Name: "site", StorageNamespace: "s3://bucket/site"}))(t)
	if repo.State != "active" || repo.DefaultBranch != "main" {
		t.Errorf("CreateRepository = %+v", repo)
	}
	if got := must(alice.GetRepository(ctx, "site"))(t); got.InstanceUID != repo.InstanceUID {
		t.Errorf("GetRepository = %+v", got)
	}
	if got := collect(t, alice.ListRepositories(ctx, client.ListOptions{})); len(got) != 1 {
		t.Errorf("ListRepositories = %+v", got)
	}
	main := must(alice.GetBranch(ctx, "site", "main"))(t)
	feature := must(alice.CreateBranch(ctx, "site", "feature/x", "main"))(t)
	if feature.Name != "feature/x" || feature.CommitID != main.CommitID {
		t.Errorf("CreateBranch = %+v, main at %s", feature, main.CommitID)
	}
	cm := must(alice.Commit(ctx, "site", "feature/x", client.CommitRequest{Message: "change", Metadata: map[string]string{"ci": "1"}}))(t)
	if cm.Committer != "alice" || cm.Message != "change" || !slices.Contains(cm.Parents, main.CommitID) {
		t.Errorf("Commit = %+v", cm)
	}
	if got := must(alice.GetCommit(ctx, "site", cm.ID))(t); got.ID != cm.ID {
		t.Errorf("GetCommit = %+v", got)
	}
	if got := collect(t, alice.Log(ctx, "site", "feature/x", client.ListOptions{})); len(got) < 1 || got[0].ID != cm.ID {
		t.Errorf("Log = %+v", got)
	}
	if got := collect(t, alice.ListBranches(ctx, "site", client.ListOptions{})); len(got) != 2 {
		t.Errorf("ListBranches = %+v", got)
	}
	if _, err := alice.UpdateBranch(ctx, "site", "main", cm.ID, strings.Repeat("0", 64)); !client.IsPreconditionFailed(err) {
		t.Errorf("UpdateBranch with a wrong expected commit: %v, want precondition_failed", err)
	}
	if got := must(alice.UpdateBranch(ctx, "site", "main", cm.ID, main.CommitID))(t); got.CommitID != cm.ID {
		t.Errorf("UpdateBranch = %+v", got)
	}
	if got := must(alice.CreateTag(ctx, "site", "v1", cm.ID))(t); got.CommitID != cm.ID {
		t.Errorf("CreateTag = %+v", got)
	}
	if got := must(alice.GetTag(ctx, "site", "v1"))(t); got.Name != "v1" {
		t.Errorf("GetTag = %+v", got)
	}
	if got := collect(t, alice.ListTags(ctx, "site", client.ListOptions{})); len(got) != 1 {
		t.Errorf("ListTags = %+v", got)
	}
	if err := alice.DeleteTag(ctx, "site", "v1"); err != nil {
		t.Error(err)
	}

	// Leases, and a branch write fenced by one: the holder's write is
	// admitted until a newer lease is granted, then refused with fenced.
	guard := "repositories/site/branches/main"
	l1 := must(alice.AcquireLease(ctx, client.AcquireLeaseRequest{Key: guard, TTL: time.Minute, Holder: "w1"}))(t)
	if l1.FencingToken != 1 || l1.Key != guard || l1.TTL != "1m0s" {
		t.Errorf("AcquireLease = %+v", l1)
	}
	if _, err := alice.AcquireLease(ctx, client.AcquireLeaseRequest{Key: guard, TTL: time.Minute}); !client.IsLeaseHeld(err) {
		t.Errorf("AcquireLease of a held key: %v, want lease_held", err)
	}
	if got := must(alice.KeepaliveLease(ctx, l1.LeaseID))(t); got.LeaseID != l1.LeaseID {
		t.Errorf("KeepaliveLease = %+v", got)
	}
	if got := collect(t, alice.ListLeases(ctx, client.LeaseListOptions{KeyPrefix: "repositories/site/"})); len(got) != 1 || got[0].LeaseID != l1.LeaseID {
		t.Errorf("ListLeases = %+v", got)
	}
	w1 := alice.WithFencingToken(l1.FencingToken)
	if got := must(w1.UpdateBranch(ctx, "site", "main", main.CommitID, ""))(t); got.CommitID != main.CommitID {
		t.Errorf("fenced UpdateBranch = %+v", got)
	}
	if err := alice.ReleaseLease(ctx, l1.LeaseID); err != nil {
		t.Error(err)
	}
	l2 := must(alice.AcquireLease(ctx, client.AcquireLeaseRequest{Key: guard, TTL: time.Minute}))(t)
	if l2.FencingToken != 2 {
		t.Errorf("second lease = %+v", l2)
	}
	if _, err := w1.UpdateBranch(ctx, "site", "main", cm.ID, ""); !client.IsFenced(err) {
		t.Errorf("UpdateBranch with the stale token: %v, want fenced", err)
	}
	if got := must(alice.WithFencingToken(l2.FencingToken).UpdateBranch(ctx, "site", "main", cm.ID, ""))(t); got.CommitID != cm.ID {
		t.Errorf("UpdateBranch with the new token = %+v", got)
	}
	if err := alice.ReleaseLease(ctx, l2.LeaseID); err != nil {
		t.Error(err)
	}
	if err := alice.DeleteBranch(ctx, "site", "feature/x"); err != nil {
		t.Error(err)
	}
	if _, err := alice.GetBranch(ctx, "site", "feature/x"); !client.IsNotFound(err) {
		t.Errorf("GetBranch after delete: %v, want not_found", err)
	}
	if err := alice.DeleteRepository(ctx, "site"); err != nil {
		t.Error(err)
	}

	// Sync state.
	const host = "pds.example.com"
	h, created := must2(t)(alice.PutSyncHost(ctx, host, nil))
	if !created || h.Name != host || h.Cursor != nil {
		t.Errorf("PutSyncHost = %+v created %v", h, created)
	}
	strict := true
	if h, created := must2(t)(alice.PutSyncHost(ctx, host, &client.PutSyncHostRequest{StrictCursor: &strict})); created || !h.StrictCursor {
		t.Errorf("PutSyncHost again = %+v created %v", h, created)
	}
	if got := must(alice.GetSyncHost(ctx, host))(t); !got.StrictCursor {
		t.Errorf("GetSyncHost = %+v", got)
	}
	if got := collect(t, alice.ListSyncHosts(ctx, client.ListOptions{})); len(got) != 1 {
		t.Errorf("ListSyncHosts = %+v", got)
	}
	must(alice.ConnectSyncHost(ctx, host, client.ConnectRequest{}))(t)
	ev := must(alice.ApplySyncEvents(ctx, host, []client.SyncEvent{{Cursor: 1, Repo: "did:plc:a", Rev: "r1"}}))(t)
	if ev.Applied != 1 || ev.Host.Cursor == nil || *ev.Host.Cursor != 1 {
		t.Errorf("ApplySyncEvents = %+v", ev)
	}
	ls := must(alice.RecordSyncListing(ctx, host, client.SyncListingRequest{CursorBefore: ev.Host.FirstCursorSinceReset,
		Repos: []client.ListedRepo{{Repo: "did:plc:b", Rev: "r1"}}}))(t)
	if ls.Created != 1 {
		t.Errorf("RecordSyncListing = %+v", ls)
	}
	if got := collect(t, alice.ListSyncRepositories(ctx, client.SyncRepositoryListOptions{Host: host})); len(got) != 2 {
		t.Errorf("ListSyncRepositories = %+v", got)
	}
	if got := must(alice.GetSyncRepository(ctx, "did:plc:a"))(t); got.Host != host || !got.NeedsIndex {
		t.Errorf("GetSyncRepository = %+v", got)
	}
	if got := must(alice.RecordSyncIndexed(ctx, "did:plc:a", client.SyncIndexedRequest{Host: host, Rev: "r1", CursorBefore: ev.Host.FirstCursorSinceReset}))(t); got.LastIndexedRev != "r1" {
		t.Errorf("RecordSyncIndexed = %+v", got)
	}

	// GC and reports.
	zero := time.Duration(0)
	dry := must(e.admin.RunGC(ctx, client.GCOptions{DryRun: true, MinAge: &zero}))(t)
	if dry.Status != "succeeded" || dry.Scanned != 1 || len(dry.WouldCollect) != 1 || dry.WouldCollect[0].LockID != bare.LockID {
		t.Errorf("RunGC dry run = %+v", dry)
	}
	run := must(e.admin.RunGC(ctx, client.GCOptions{MinAge: &zero, BatchSize: 10}))(t)
	if run.Status != "succeeded" || run.Deleted != 1 {
		t.Errorf("RunGC = %+v", run)
	}
	if _, err := alice.GetLock(ctx, bare.LockID); !client.IsNotFound(err) {
		t.Errorf("GetLock of a collected lock: %v, want not_found", err)
	}
	if got := must(e.admin.GetGCRun(ctx, run.ID))(t); got.Deleted != 1 {
		t.Errorf("GetGCRun = %+v", got)
	}
	if got := collect(t, e.admin.ListGCRuns(ctx, client.ListOptions{})); len(got) != 2 || got[0].ID != run.ID {
		t.Errorf("ListGCRuns = %+v", got)
	}
	reports := must(e.admin.ListReports(ctx))(t)
	if len(reports) != 9 {
		t.Errorf("ListReports = %+v", reports)
	}
	if v := must(e.admin.VerifyOwnershipReport(ctx))(t); !v.OK || len(v.Drift) != 0 || v.Tenants == 0 {
		t.Errorf("VerifyOwnershipReport = %+v, want ok", v)
	}
	rows := must(e.admin.GetReport(ctx, "locks", client.ReportOptions{Limit: 10}))(t)
	if rows.Report != "locks" || len(rows.Items) != 1 {
		t.Errorf("GetReport(locks) = %+v", rows)
	}
	if csv := must(e.admin.GetReportCSV(ctx, "locks", client.ReportOptions{}))(t); strings.Count(string(csv), "\n") != 2 {
		t.Errorf("GetReportCSV(locks) = %q, want a header and one row", csv)
	}
	var ce *client.Error
	if _, err := e.admin.GetReport(ctx, "nope", client.ReportOptions{}); !errors.As(err, &ce) || ce.StatusCode != 404 || ce.Details["valid_names"] == nil {
		t.Errorf("GetReport(nope): %v, want 404 with valid_names", err)
	}

	// Configured aliases and re-keying. An alias change re-keys the locks
	// on its endpoint itself (alice's one lock is on github.com: not
	// examined), so no lock is stale afterwards and a run finds nothing.
	if got := must(e.admin.ListAliases(ctx))(t); len(got) != 0 {
		t.Errorf("ListAliases = %+v, want none", got)
	}
	alias := must(e.admin.CreateAlias(ctx, client.CreateAliasRequest{From: "GitLab.example.com+2222", To: "gitlab.example.com"}))(t)
	if alias.From != "gitlab.example.com+2222" || alias.To != "gitlab.example.com" || alias.ID == "" {
		t.Errorf("CreateAlias = %+v, want canonical endpoints", alias)
	}
	if ch := alias.Change; ch.DryRun || ch.Action != "add" || ch.Alias != alias.Alias || ch.Endpoint != "gitlab.example.com+2222" ||
		ch.ExaminedLocks != 0 || ch.RekeyedLocks != 0 || len(ch.Conflicts) != 0 || len(ch.Rejected) != 0 {
		t.Errorf("CreateAlias change = %+v", ch)
	}
	if _, err := e.admin.CreateAlias(ctx, client.CreateAliasRequest{From: "gitlab.example.com+2222", To: "x.example"}); !client.IsAlreadyExists(err) {
		t.Errorf("CreateAlias of the same From: %v, want already_exists", err)
	}
	if _, err := e.admin.CreateAlias(ctx, client.CreateAliasRequest{From: "ssh.github.com", To: "x.example"}); !client.IsInvalid(err) {
		t.Errorf("CreateAlias on a built-in alias host: %v, want invalid_argument", err)
	}
	if got := must(alice.Normalize(ctx, "ssh://git@gitlab.example.com:2222/g/r.git"))(t); got.Normalized != "gitlab.example.com/g/r" {
		t.Errorf("Normalize under the alias = %+v", got)
	}
	dryRekey := must(e.admin.RunRekey(ctx, client.RekeyOptions{DryRun: true}))(t)
	if !dryRekey.DryRun || dryRekey.StaleLocks != 0 || dryRekey.RekeyedLocks != 0 || dryRekey.NormalizerRules != "" {
		t.Errorf("RunRekey dry run = %+v, want nothing stale", dryRekey)
	}
	if rekeyed := must(e.admin.RunRekey(ctx, client.RekeyOptions{BatchSize: 10}))(t); rekeyed.DryRun || rekeyed.StaleLocks != 0 || len(rekeyed.Conflicts) != 0 {
		t.Errorf("RunRekey = %+v, want nothing stale", rekeyed)
	}
	plan := must(e.admin.PlanDeleteAlias(ctx, alias.ID))(t)
	if !plan.DryRun || plan.Action != "remove" || plan.Alias.ID != alias.ID || plan.Endpoint != "gitlab.example.com" || plan.ExaminedLocks != 0 {
		t.Errorf("PlanDeleteAlias = %+v", plan)
	}
	if got := must(e.admin.ListAliases(ctx))(t); len(got) != 1 {
		t.Errorf("ListAliases after a planned removal = %+v, want the alias", got)
	}
	if err := e.admin.DeleteAlias(ctx, alias.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DeleteAlias(ctx, alias.ID); !client.IsNotFound(err) {
		t.Errorf("DeleteAlias twice: %v, want not_found", err)
	}
	if got := must(alice.Normalize(ctx, "ssh://git@gitlab.example.com:2222/g/r.git"))(t); got.Normalized != "gitlab.example.com+2222/g/r" {
		t.Errorf("Normalize after removing the alias = %+v", got)
	}

	// Transfers, handovers and denials (carol and dave, so alice's counts
	// below are unchanged).
	carol, dave := e.tenant("carol"), e.tenant("dave")
	acq := must(carol.AcquireLock(ctx, "https://github.com/handover/repo"))(t)
	if _, err := dave.AcquireLock(ctx, "https://github.com/handover/repo"); !client.IsClaimed(err) {
		t.Fatalf("dave's acquire: %v, want repository_claimed", err)
	}
	if ds := collect(t, carol.ListLockDenials(ctx, acq.LockID, client.ListOptions{PageSize: 1})); len(ds) != 1 || ds[0].Tenant != "dave" || ds[0].Count != 1 {
		t.Errorf("ListLockDenials = %+v", ds)
	}
	if ds := collect(t, e.admin.AdminListLockDenials(ctx, acq.LockID, client.ListOptions{})); len(ds) != 1 || ds[0].Tenant != "dave" {
		t.Errorf("AdminListLockDenials = %+v", ds)
	}
	ho := must(carol.OfferHandover(ctx, acq.LockID, "dave", time.Hour))(t)
	recv := collect(t, dave.ListHandovers(ctx, client.HandoverListOptions{Direction: client.HandoversReceived}))
	if len(recv) != 1 || recv[0].ID != ho.ID || recv[0].From != "carol" {
		t.Errorf("ListHandovers received = %+v", recv)
	}
	if made := collect(t, dave.ListHandovers(ctx, client.HandoverListOptions{Direction: client.HandoversOffered})); len(made) != 0 {
		t.Errorf("ListHandovers offered = %+v", made)
	}
	if err := dave.DeclineHandover(ctx, ho.ID); err != nil {
		t.Fatal(err)
	}
	ho = must(carol.OfferHandover(ctx, acq.LockID, "dave", 0))(t)
	if err := carol.WithdrawHandover(ctx, ho.ID); err != nil {
		t.Fatal(err)
	}
	// An operator withdraws an offer for its owner.
	ho = must(carol.OfferHandover(ctx, acq.LockID, "dave", 0))(t)
	if all := collect(t, e.admin.AdminListHandovers(ctx, client.ListOptions{PageSize: 1})); len(all) != 1 || all[0].ID != ho.ID {
		t.Errorf("AdminListHandovers = %+v", all)
	}
	if err := e.admin.CancelHandover(ctx, ho.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CancelHandover(ctx, ho.ID); !client.IsNotFound(err) {
		t.Errorf("CancelHandover twice: %v, want not_found", err)
	}
	ho = must(carol.OfferHandover(ctx, acq.LockID, "dave", 0))(t)
	if tr := must(dave.AcceptHandover(ctx, ho.ID))(t); tr.From != "carol" || tr.To != "dave" {
		t.Errorf("AcceptHandover = %+v", tr)
	}
	if tr := must(e.admin.TransferLock(ctx, acq.LockID, "carol", client.ReferencesRefuse))(t); tr.From != "dave" || tr.To != "carol" {
		t.Errorf("TransferLock = %+v", tr)
	}
	must(carol.CreateApplication(ctx, client.CreateApplicationRequest{Name: "h", RepoURL: "https://github.com/handover/repo"}))(t)
	_, err := e.admin.TransferLock(ctx, acq.LockID, "dave", "")
	var inUse *client.Error
	if !errors.As(err, &inUse) || inUse.Code != client.CodeLockInUse {
		t.Fatalf("TransferLock in use: %v, want lock_in_use", err)
	}
	if refs, ok := inUse.References(); !ok || len(refs) != 1 || refs[0].Name != "h" || refs[0].Kind != "application" {
		t.Errorf("References = %+v %v", refs, ok)
	}

	// Tokens and deletion.
	tok := must(e.admin.IssueToken(ctx, "alice"))(t)
	alice2 := client.New(e.url, client.WithToken(tok), client.WithHTTPClient(e.hc))
	if got := must(alice2.Me(ctx))(t); got.Name != "alice" {
		t.Errorf("Me with the issued token = %+v", got)
	}
	if n := must(e.admin.RevokeTokens(ctx, "alice"))(t); n != 2 {
		t.Errorf("RevokeTokens = %d, want 2", n)
	}
	if _, err := alice2.Me(ctx); !client.IsUnauthenticated(err) {
		t.Errorf("Me with a revoked token: %v, want unauthenticated", err)
	}
	// Reservations (TestReservations covers them in depth).
	res := must(e.admin.CreateReservation(ctx, client.CreateReservationRequest{Prefix: "reserved.example.com", Tenant: "alice"}))(t)
	if res.Reservation.Prefix != "reserved.example.com" || res.Reservation.Tenant != "alice" {
		t.Errorf("CreateReservation = %+v", res)
	}
	if page := must(e.admin.ListReservationsPage(ctx, client.ListOptions{}))(t); len(page.Items) != 1 || page.Items[0].ID != res.Reservation.ID {
		t.Errorf("ListReservationsPage = %+v", page)
	}
	if err := e.admin.DeleteReservation(ctx, res.Reservation.ID); err != nil {
		t.Errorf("DeleteReservation: %v", err)
	}
	del := must(e.admin.DeleteUser(ctx, "alice"))(t)
	if del.User != "alice" || del.Applications != 1 || del.LocksReleased != 1 {
		t.Errorf("DeleteUser = %+v", del)
	}

	// The watch: the head of the stream, then the events after it.
	if head := must(e.admin.Events(ctx, client.WatchOptions{}))(t); head.Cursor == "" || len(head.Events) != 0 {
		t.Errorf("Events without a cursor = %+v, want the head", head)
	}

	// Every operation went through the validator.
	checked := contracttest.New(t).Checked()
	for id := range operationMethods {
		if checked[id] == 0 {
			t.Errorf("operation %s was not exercised", id)
		}
	}
}

func must2(t *testing.T) func(client.SyncHost, bool, error) (client.SyncHost, bool) {
	return func(h client.SyncHost, b bool, err error) (client.SyncHost, bool) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h, b
	}
}

// TestErrors: the error shape becomes *client.Error with the code, status
// and details, and the Is* helpers answer on it.
func TestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	alice, bob := e.tenant("alice"), e.tenant("bob")
	app := must(alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "guestbook", RepoURL: exampleApps}))(t)

	_, err := bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "mine", RepoURL: "https://github.com/argoproj/argocd-example-apps/"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != http.StatusConflict || ce.Code != client.CodeRepositoryClaimed || ce.Owner() != "alice" || ce.RequestID == "" {
		t.Fatalf("claimed: %#v", err)
	}
	if owner, ok := client.ClaimedBy(err); !client.IsClaimed(err) || !ok || owner != "alice" || client.IsNotFound(err) {
		t.Errorf("IsClaimed/ClaimedBy = %v/%q %v", client.IsClaimed(err), owner, ok)
	}
	if _, err := bob.GetApplication(ctx, app.ID); !client.IsNotFound(err) {
		t.Errorf("another tenant's application: %v, want not_found", err)
	}
	if _, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "guestbook", RepoURL: exampleApps}); !client.IsAlreadyExists(err) {
		t.Errorf("a taken name: %v, want already_exists", err)
	}
	if _, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "x", RepoURL: "not a url"}); !client.IsInvalid(err) {
		t.Errorf("a bad URL: %v, want invalid_argument", err)
	}
	if _, err := alice.ListUsersPage(ctx, client.ListOptions{}); !client.IsForbidden(err) {
		t.Errorf("tenant token on an admin route: %v, want forbidden", err)
	}
	if _, err := client.New(e.url, client.WithHTTPClient(e.hc)).Me(ctx); !client.IsUnauthenticated(err) {
		t.Errorf("no token: %v, want unauthenticated", err)
	}
	if err := alice.DeleteApplication(ctx, app.ID); err != nil {
		t.Fatal(err)
	}
	// The repository is free again.
	if _, err := bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "mine", RepoURL: exampleApps}); err != nil {
		t.Errorf("after alice's last reference went: %v", err)
	}
}

// TestPagination: the iterators walk every page; the page methods expose
// the token.
func TestPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	alice := e.tenant("alice")
	for i := range 5 {
		must(alice.CreateApplication(ctx, client.CreateApplicationRequest{
			Name: "app-" + string(rune('a'+i)), RepoURL: "https://github.com/o/r" + string(rune('a'+i))}))(t)
	}
	first := must(alice.ListApplicationsPage(ctx, client.ListOptions{PageSize: 2}))(t)
	if len(first.Items) != 2 || first.NextPageToken == "" {
		t.Fatalf("first page = %+v", first)
	}
	var names []string
	for app, err := range alice.ListApplications(ctx, client.ListOptions{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, app.Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "app-a,app-b,app-c,app-d,app-e" {
		t.Errorf("ListApplications = %v", names)
	}
	// Breaking out of the loop stops fetching.
	n := 0
	for range alice.ListLocks(ctx, client.ListOptions{PageSize: 1}) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("break: %d items", n)
	}
	// A bad page size is the server's 400, yielded once.
	var errs int
	for _, err := range alice.ListLocks(ctx, client.ListOptions{PageSize: 501}) {
		if !client.IsInvalid(err) {
			t.Errorf("page_size 501: %v, want invalid_argument", err)
		}
		errs++
	}
	if errs != 1 {
		t.Errorf("page_size 501 yielded %d times", errs)
	}
}

// TestEmptyLists: an empty list is "items": [] (the document does not
// allow null).
func TestEmptyLists(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	alice := e.tenant("alice")
	if p := must(alice.ListRepositoriesPage(ctx, client.ListOptions{}))(t); len(p.Items) != 0 {
		t.Errorf("repositories: %+v", p)
	}
	must(alice.CreateRepository(ctx, client.CreateRepositoryRequest{Name: "empty", StorageNamespace: "s3://b/empty"}))(t)
	if p := must(alice.ListSyncHostsPage(ctx, client.ListOptions{}))(t); len(p.Items) != 0 {
		t.Errorf("sync hosts: %+v", p)
	}
	if _, _, err := alice.PutSyncHost(ctx, "h", nil); err != nil {
		t.Fatal(err)
	}
	pages := map[string]func() (int, error){
		"applications": func() (int, error) {
			p, err := alice.ListApplicationsPage(ctx, client.ListOptions{})
			return len(p.Items), err
		},
		"credentials": func() (int, error) {
			p, err := alice.ListRepositoryCredentialsPage(ctx, client.ListOptions{})
			return len(p.Items), err
		},
		"locks": func() (int, error) {
			p, err := alice.ListLocksPage(ctx, client.ListOptions{})
			return len(p.Items), err
		},
		"sync repos": func() (int, error) {
			p, err := alice.ListSyncRepositoriesPage(ctx, client.SyncRepositoryListOptions{NeedsIndex: true, Host: "h"})
			return len(p.Items), err
		},
		"gc runs": func() (int, error) {
			p, err := e.admin.ListGCRunsPage(ctx, client.ListOptions{})
			return len(p.Items), err
		},
		"tags": func() (int, error) {
			p, err := alice.ListTagsPage(ctx, "empty", client.ListOptions{})
			return len(p.Items), err
		},
		"report rows": func() (int, error) {
			r, err := e.admin.GetReport(ctx, "denials", client.ReportOptions{})
			return len(r.Items), err
		},
	}
	for name, list := range pages {
		if n, err := list(); err != nil || n != 0 {
			t.Errorf("%s: %d items, %v; want none", name, n, err)
		}
	}
}

// TestAliasChanges: an alias change is a re-key applied as one operation,
// planned with a dry run, and refused with alias_conflict (every conflict
// reachable from *client.Error, nothing changed) when it would give a
// repository two owners.
func TestAliasChanges(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	alice, bob := e.tenant("alice"), e.tenant("bob")
	const (
		sshURL   = "ssh://git@gitlab.example.com:2222/g/r.git"
		httpsURL = "https://gitlab.example.com/g/r"
		oldKey   = "gitlab.example.com+2222/g/r"
		newKey   = "gitlab.example.com/g/r"
	)
	req := client.CreateAliasRequest{From: "gitlab.example.com+2222", To: "gitlab.example.com"}
	web := must(alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: sshURL}))(t)
	if web.NormalizedURL != oldKey {
		t.Fatalf("alice's application = %+v, want %s", web, oldKey)
	}

	// The plan: alice's lock would move; nothing changes.
	plan := must(e.admin.PlanCreateAlias(ctx, req))(t)
	if !plan.DryRun || plan.Action != "add" || plan.Alias.ID != "" || plan.Alias.From != req.From || plan.Alias.To != req.To ||
		plan.Endpoint != "gitlab.example.com+2222" || plan.ExaminedLocks != 1 || plan.RekeyedLocks != 1 ||
		len(plan.Conflicts) != 0 || len(plan.Rejected) != 0 {
		t.Errorf("PlanCreateAlias = %+v", plan)
	}
	if got := must(e.admin.ListAliases(ctx))(t); len(got) != 0 {
		t.Fatalf("ListAliases after a plan = %+v, want none", got)
	}
	if got := must(alice.GetApplication(ctx, web.ID))(t); got.NormalizedURL != oldKey {
		t.Fatalf("alice's application after a plan = %+v, want %s", got, oldKey)
	}

	// bob holds the alias target's spelling of the same repository: the
	// change (and its plan) is refused, every conflict named, nothing
	// changed.
	bobs := must(bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "mirror", RepoURL: httpsURL}))(t)
	for name, call := range map[string]func() error{
		"PlanCreateAlias": func() error { _, err := e.admin.PlanCreateAlias(ctx, req); return err },
		"CreateAlias":     func() error { _, err := e.admin.CreateAlias(ctx, req); return err },
	} {
		err := call()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.StatusCode != http.StatusConflict || ce.Code != client.CodeAliasConflict || !client.IsAliasConflict(err) {
			t.Fatalf("%s: %v, want 409 alias_conflict", name, err)
		}
		conflicts, rejected, ok := ce.AliasConflicts()
		if !ok || len(conflicts) != 1 || len(rejected) != 0 {
			t.Fatalf("%s: AliasConflicts = %+v %+v %v, want one conflict", name, conflicts, rejected, ok)
		}
		c := conflicts[0]
		if c.Kind != "conflict" || c.User != "alice" || c.RepoURL != web.RepoURL || c.OldKey != oldKey || c.NewKey != newKey ||
			c.RefKind != "application" || c.RefID != web.ID || c.LockID != web.LockID ||
			c.OtherUser != "bob" || c.OtherRepoURL != bobs.RepoURL || c.OtherKey != newKey || c.OtherLockID != bobs.LockID {
			t.Errorf("%s: conflict = %+v", name, c)
		}
		if _, _, ok := (&client.Error{Code: client.CodeConflict}).AliasConflicts(); ok {
			t.Errorf("AliasConflicts of a conflict error: ok")
		}
	}
	if got := must(e.admin.ListAliases(ctx))(t); len(got) != 0 {
		t.Fatalf("ListAliases after a refused change = %+v, want none", got)
	}
	if got := must(alice.GetApplication(ctx, web.ID))(t); got.NormalizedURL != oldKey || got.LockID != web.LockID {
		t.Fatalf("alice's application after a refused change = %+v, want %s", got, oldKey)
	}
	if got := must(bob.GetApplication(ctx, bobs.ID))(t); got.NormalizedURL != newKey || got.LockID != bobs.LockID {
		t.Fatalf("bob's application after a refused change = %+v, want %s", got, newKey)
	}

	// Without bob's claim the change applies: alice's lock is re-keyed in
	// the same operation, and bob's claim on the target's spelling is
	// refused at once.
	if err := bob.DeleteApplication(ctx, bobs.ID); err != nil {
		t.Fatal(err)
	}
	alias := must(e.admin.CreateAlias(ctx, req))(t)
	if ch := alias.Change; ch.DryRun || ch.Action != "add" || ch.Alias != alias.Alias || ch.ExaminedLocks != 1 || ch.RekeyedLocks != 1 ||
		len(ch.Conflicts) != 0 || len(ch.Rejected) != 0 {
		t.Errorf("CreateAlias = %+v", alias)
	}
	if got := must(alice.GetApplication(ctx, web.ID))(t); got.NormalizedURL != newKey {
		t.Errorf("alice's application after the alias = %+v, want %s", got, newKey)
	}
	if _, err := bob.CreateApplication(ctx, client.CreateApplicationRequest{Name: "mirror", RepoURL: httpsURL}); !client.IsClaimed(err) {
		t.Errorf("bob's claim after the alias: %v, want repository_claimed", err)
	} else if owner, _ := client.ClaimedBy(err); owner != "alice" {
		t.Errorf("bob's claim after the alias: owner %q, want alice", owner)
	}
	if m := must(e.admin.Metrics(ctx))(t); !strings.Contains(string(m), `repolock_rekeyed_locks_total{cause="alias"} 1`) {
		t.Errorf("metrics: no repolock_rekeyed_locks_total{cause=\"alias\"} 1")
	}

	// The removal, planned then applied: alice's lock goes back to the
	// key of her URL without the alias.
	plan = must(e.admin.PlanDeleteAlias(ctx, alias.ID))(t)
	if !plan.DryRun || plan.Action != "remove" || plan.Alias.ID != alias.ID || plan.Endpoint != "gitlab.example.com" ||
		plan.ExaminedLocks != 1 || plan.RekeyedLocks != 1 {
		t.Errorf("PlanDeleteAlias = %+v", plan)
	}
	if got := must(alice.GetApplication(ctx, web.ID))(t); got.NormalizedURL != newKey {
		t.Errorf("alice's application after a planned removal = %+v, want %s", got, newKey)
	}
	if err := e.admin.DeleteAlias(ctx, alias.ID); err != nil {
		t.Fatal(err)
	}
	if got := must(alice.GetApplication(ctx, web.ID))(t); got.NormalizedURL != oldKey {
		t.Errorf("alice's application after the removal = %+v, want %s", got, oldKey)
	}
	if _, err := e.admin.PlanDeleteAlias(ctx, alias.ID); !client.IsNotFound(err) {
		t.Errorf("PlanDeleteAlias of a removed alias: %v, want not_found", err)
	}
}
