package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
)

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.PageSize > 0 {
		q.Set("page_size", strconv.Itoa(o.PageSize))
	}
	if o.PageToken != "" {
		q.Set("page_token", o.PageToken)
	}
	return q
}

func get[T any](ctx context.Context, c *Client, path string, q url.Values) (T, error) {
	var v T
	err := c.do(ctx, call{method: http.MethodGet, path: path, query: q, out: &v})
	return v, err
}

func send[T any](ctx context.Context, c *Client, method, path string, in any) (T, error) {
	var v T
	err := c.do(ctx, call{method: method, path: path, in: in, out: &v})
	return v, err
}

func (c *Client) del(ctx context.Context, path string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: path})
}

// all iterates over every item of a list, page by page (opts.PageToken
// starts it). A failed page yields its error once and ends the iteration.
func all[T any](ctx context.Context, opts ListOptions, page func(context.Context, ListOptions) (Page[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			p, err := page(ctx, opts)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range p.Items {
				if !yield(it, nil) {
					return
				}
			}
			if p.NextPageToken == "" {
				return
			}
			opts.PageToken = p.NextPageToken
		}
	}
}

// --- health and the document (no token needed) ---

// Healthz is nil while the server process runs (GET /healthz).
func (c *Client) Healthz(ctx context.Context) error {
	return c.do(ctx, call{method: http.MethodGet, path: "/healthz"})
}

// Readyz is nil when the server reaches its database (GET /readyz); an
// *Error with code unavailable otherwise.
func (c *Client) Readyz(ctx context.Context) error {
	return c.do(ctx, call{method: http.MethodGet, path: "/readyz"})
}

// Version returns the server's build information (GET /version).
func (c *Client) Version(ctx context.Context) (VersionInfo, error) {
	var v VersionInfo
	err := c.do(ctx, call{method: http.MethodGet, path: "/version", out: &v})
	return v, err
}

// Metrics returns the Prometheus text exposition (GET /metrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var b []byte
	err := c.do(ctx, call{method: http.MethodGet, path: "/metrics", raw: &b})
	return b, err
}

// OpenAPIYAML returns the server's OpenAPI document as YAML.
func (c *Client) OpenAPIYAML(ctx context.Context) ([]byte, error) {
	var b []byte
	err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.yaml", raw: &b})
	return b, err
}

// OpenAPIJSON returns the server's OpenAPI document as JSON.
func (c *Client) OpenAPIJSON(ctx context.Context) ([]byte, error) {
	var b []byte
	err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.json", raw: &b})
	return b, err
}

// --- tenant ---

// Me returns the calling tenant.
func (c *Client) Me(ctx context.Context) (User, error) { return get[User](ctx, c, "/v1/me", nil) }

// Normalize returns the lock key of a repository URL (tenant or admin
// token).
func (c *Client) Normalize(ctx context.Context, repoURL string) (Normalized, error) {
	return get[Normalized](ctx, c, "/v1/normalize", url.Values{"url": {repoURL}})
}

// CreateApplication creates an Application, claiming its repository for
// the tenant. Another tenant's repository is an error for which
// IsClaimed is true (ClaimedBy names the owner).
func (c *Client) CreateApplication(ctx context.Context, req CreateApplicationRequest) (Application, error) {
	return send[Application](ctx, c, http.MethodPost, "/v1/applications", req)
}

// ListApplicationsPage returns one page of the tenant's Applications.
func (c *Client) ListApplicationsPage(ctx context.Context, opts ListOptions) (Page[Application], error) {
	return get[Page[Application]](ctx, c, "/v1/applications", opts.query())
}

// ListApplications iterates over the tenant's Applications.
func (c *Client) ListApplications(ctx context.Context, opts ListOptions) iter.Seq2[Application, error] {
	return all(ctx, opts, c.ListApplicationsPage)
}

// GetApplication returns an Application.
func (c *Client) GetApplication(ctx context.Context, id string) (Application, error) {
	return get[Application](ctx, c, p("/v1/applications/%s", id), nil)
}

// UpdateApplication changes the fields of req that are set.
func (c *Client) UpdateApplication(ctx context.Context, id string, req UpdateApplicationRequest) (Application, error) {
	return send[Application](ctx, c, http.MethodPatch, p("/v1/applications/%s", id), req)
}

// DeleteApplication deletes an Application; the lock goes with its last
// reference.
func (c *Client) DeleteApplication(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/applications/%s", id))
}

// CreateRepositoryCredential creates a Repository Credential, claiming its
// repository like CreateApplication.
func (c *Client) CreateRepositoryCredential(ctx context.Context, req CreateRepositoryCredentialRequest) (RepositoryCredential, error) {
	return send[RepositoryCredential](ctx, c, http.MethodPost, "/v1/repository-credentials", req)
}

// ListRepositoryCredentialsPage returns one page of the tenant's
// credentials.
func (c *Client) ListRepositoryCredentialsPage(ctx context.Context, opts ListOptions) (Page[RepositoryCredential], error) {
	return get[Page[RepositoryCredential]](ctx, c, "/v1/repository-credentials", opts.query())
}

// ListRepositoryCredentials iterates over the tenant's credentials.
func (c *Client) ListRepositoryCredentials(ctx context.Context, opts ListOptions) iter.Seq2[RepositoryCredential, error] {
	return all(ctx, opts, c.ListRepositoryCredentialsPage)
}

// GetRepositoryCredential returns a credential.
func (c *Client) GetRepositoryCredential(ctx context.Context, id string) (RepositoryCredential, error) {
	return get[RepositoryCredential](ctx, c, p("/v1/repository-credentials/%s", id), nil)
}

// UpdateRepositoryCredential changes the fields of req that are set.
func (c *Client) UpdateRepositoryCredential(ctx context.Context, id string, req UpdateRepositoryCredentialRequest) (RepositoryCredential, error) {
	return send[RepositoryCredential](ctx, c, http.MethodPatch, p("/v1/repository-credentials/%s", id), req)
}

// DeleteRepositoryCredential deletes a credential.
func (c *Client) DeleteRepositoryCredential(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/repository-credentials/%s", id))
}

// ListLocksPage returns one page of the tenant's locks.
func (c *Client) ListLocksPage(ctx context.Context, opts ListOptions) (Page[Lock], error) {
	return get[Page[Lock]](ctx, c, "/v1/locks", opts.query())
}

// ListLocks iterates over the tenant's locks.
func (c *Client) ListLocks(ctx context.Context, opts ListOptions) iter.Seq2[Lock, error] {
	return all(ctx, opts, c.ListLocksPage)
}

// GetLock returns one of the tenant's locks.
func (c *Client) GetLock(ctx context.Context, id string) (Lock, error) {
	return get[Lock](ctx, c, p("/v1/locks/%s", id), nil)
}

// AcquireLock takes a bare lock on a repository URL (no reference: the GC
// collects it after its grace period unless an Application or Credential
// uses it).
func (c *Client) AcquireLock(ctx context.Context, repoURL string) (AcquiredLock, error) {
	return send[AcquiredLock](ctx, c, http.MethodPost, "/v1/locks/acquire", map[string]string{"repo_url": repoURL})
}

// --- repository state ---

// CreateRepository creates a repository.
func (c *Client) CreateRepository(ctx context.Context, req CreateRepositoryRequest) (Repository, error) {
	return send[Repository](ctx, c, http.MethodPost, "/v1/repositories", req)
}

// ListRepositoriesPage returns one page of repositories.
func (c *Client) ListRepositoriesPage(ctx context.Context, opts ListOptions) (Page[Repository], error) {
	return get[Page[Repository]](ctx, c, "/v1/repositories", opts.query())
}

// ListRepositories iterates over the repositories.
func (c *Client) ListRepositories(ctx context.Context, opts ListOptions) iter.Seq2[Repository, error] {
	return all(ctx, opts, c.ListRepositoriesPage)
}

// GetRepository returns a repository.
func (c *Client) GetRepository(ctx context.Context, name string) (Repository, error) {
	return get[Repository](ctx, c, p("/v1/repositories/%s", name), nil)
}

// DeleteRepository deletes a repository.
func (c *Client) DeleteRepository(ctx context.Context, name string) error {
	return c.del(ctx, p("/v1/repositories/%s", name))
}

// CreateBranch creates branch name from source (a branch or a commit id).
func (c *Client) CreateBranch(ctx context.Context, repo, name, source string) (Branch, error) {
	return send[Branch](ctx, c, http.MethodPost, p("/v1/repositories/%s/branches", repo), map[string]string{"name": name, "source": source})
}

// ListBranchesPage returns one page of a repository's branches.
func (c *Client) ListBranchesPage(ctx context.Context, repo string, opts ListOptions) (Page[Branch], error) {
	return get[Page[Branch]](ctx, c, p("/v1/repositories/%s/branches", repo), opts.query())
}

// ListBranches iterates over a repository's branches.
func (c *Client) ListBranches(ctx context.Context, repo string, opts ListOptions) iter.Seq2[Branch, error] {
	return all(ctx, opts, func(ctx context.Context, o ListOptions) (Page[Branch], error) {
		return c.ListBranchesPage(ctx, repo, o)
	})
}

// GetBranch returns a branch ('/' in names is fine).
func (c *Client) GetBranch(ctx context.Context, repo, branch string) (Branch, error) {
	return get[Branch](ctx, c, p("/v1/repositories/%s/branches/%s", repo, branch), nil)
}

// UpdateBranch points a branch at commitID; a non-empty expectedCommitID
// must be the branch's current commit (else IsPreconditionFailed).
func (c *Client) UpdateBranch(ctx context.Context, repo, branch, commitID, expectedCommitID string) (Branch, error) {
	body := map[string]string{"commit_id": commitID}
	if expectedCommitID != "" {
		body["expected_commit_id"] = expectedCommitID
	}
	return send[Branch](ctx, c, http.MethodPut, p("/v1/repositories/%s/branches/%s", repo, branch), body)
}

// DeleteBranch deletes a branch.
func (c *Client) DeleteBranch(ctx context.Context, repo, branch string) error {
	return c.del(ctx, p("/v1/repositories/%s/branches/%s", repo, branch))
}

// Commit commits on a branch.
func (c *Client) Commit(ctx context.Context, repo, branch string, req CommitRequest) (Commit, error) {
	return send[Commit](ctx, c, http.MethodPost, p("/v1/repositories/%s/branches/%s/commits", repo, branch), req)
}

// LogPage returns one page of a branch's log, newest first.
func (c *Client) LogPage(ctx context.Context, repo, branch string, opts ListOptions) (Page[Commit], error) {
	return get[Page[Commit]](ctx, c, p("/v1/repositories/%s/branches/%s/log", repo, branch), opts.query())
}

// Log iterates over a branch's log, newest first.
func (c *Client) Log(ctx context.Context, repo, branch string, opts ListOptions) iter.Seq2[Commit, error] {
	return all(ctx, opts, func(ctx context.Context, o ListOptions) (Page[Commit], error) { return c.LogPage(ctx, repo, branch, o) })
}

// GetCommit returns a commit.
func (c *Client) GetCommit(ctx context.Context, repo, id string) (Commit, error) {
	return get[Commit](ctx, c, p("/v1/repositories/%s/commits/%s", repo, id), nil)
}

// CreateTag tags a commit.
func (c *Client) CreateTag(ctx context.Context, repo, name, commitID string) (Tag, error) {
	return send[Tag](ctx, c, http.MethodPost, p("/v1/repositories/%s/tags", repo), map[string]string{"name": name, "commit_id": commitID})
}

// ListTagsPage returns one page of a repository's tags.
func (c *Client) ListTagsPage(ctx context.Context, repo string, opts ListOptions) (Page[Tag], error) {
	return get[Page[Tag]](ctx, c, p("/v1/repositories/%s/tags", repo), opts.query())
}

// ListTags iterates over a repository's tags.
func (c *Client) ListTags(ctx context.Context, repo string, opts ListOptions) iter.Seq2[Tag, error] {
	return all(ctx, opts, func(ctx context.Context, o ListOptions) (Page[Tag], error) { return c.ListTagsPage(ctx, repo, o) })
}

// GetTag returns a tag.
func (c *Client) GetTag(ctx context.Context, repo, tag string) (Tag, error) {
	return get[Tag](ctx, c, p("/v1/repositories/%s/tags/%s", repo, tag), nil)
}

// DeleteTag deletes a tag.
func (c *Client) DeleteTag(ctx context.Context, repo, tag string) error {
	return c.del(ctx, p("/v1/repositories/%s/tags/%s", repo, tag))
}

// --- sync state ---

// PutSyncHost registers a host (created true) or updates its settings; a
// nil req sends no body.
func (c *Client) PutSyncHost(ctx context.Context, host string, req *PutSyncHostRequest) (h SyncHost, created bool, err error) {
	var status int
	k := call{method: http.MethodPut, path: p("/v1/sync/hosts/%s", host), out: &h, status: &status}
	if req != nil {
		k.in = req
	}
	err = c.do(ctx, k)
	return h, status == http.StatusCreated, err
}

// ListSyncHostsPage returns one page of hosts.
func (c *Client) ListSyncHostsPage(ctx context.Context, opts ListOptions) (Page[SyncHost], error) {
	return get[Page[SyncHost]](ctx, c, "/v1/sync/hosts", opts.query())
}

// ListSyncHosts iterates over the hosts.
func (c *Client) ListSyncHosts(ctx context.Context, opts ListOptions) iter.Seq2[SyncHost, error] {
	return all(ctx, opts, c.ListSyncHostsPage)
}

// GetSyncHost returns a host.
func (c *Client) GetSyncHost(ctx context.Context, host string) (SyncHost, error) {
	return get[SyncHost](ctx, c, p("/v1/sync/hosts/%s", host), nil)
}

// ConnectSyncHost records a (re)connection to a host's stream.
func (c *Client) ConnectSyncHost(ctx context.Context, host string, req ConnectRequest) (ConnectResult, error) {
	return send[ConnectResult](ctx, c, http.MethodPost, p("/v1/sync/hosts/%s/connect", host), req)
}

// ApplySyncEvents applies a batch of stream events.
func (c *Client) ApplySyncEvents(ctx context.Context, host string, events []SyncEvent) (SyncEventsResult, error) {
	if events == nil {
		events = []SyncEvent{}
	}
	return send[SyncEventsResult](ctx, c, http.MethodPost, p("/v1/sync/hosts/%s/events", host), map[string][]SyncEvent{"events": events})
}

// RecordSyncListing records a host's repository listing.
func (c *Client) RecordSyncListing(ctx context.Context, host string, req SyncListingRequest) (SyncListingResult, error) {
	if req.Repos == nil {
		req.Repos = []ListedRepo{}
	}
	return send[SyncListingResult](ctx, c, http.MethodPost, p("/v1/sync/hosts/%s/listing", host), req)
}

// ListSyncRepositoriesPage returns one page of repository indicators.
func (c *Client) ListSyncRepositoriesPage(ctx context.Context, opts SyncRepositoryListOptions) (Page[SyncRepository], error) {
	q := opts.ListOptions.query()
	if opts.Host != "" {
		q.Set("host", opts.Host)
	}
	if opts.NeedsIndex {
		q.Set("needs_index", "true")
	}
	return get[Page[SyncRepository]](ctx, c, "/v1/sync/repos", q)
}

// ListSyncRepositories iterates over repository indicators.
func (c *Client) ListSyncRepositories(ctx context.Context, opts SyncRepositoryListOptions) iter.Seq2[SyncRepository, error] {
	return all(ctx, opts.ListOptions, func(ctx context.Context, o ListOptions) (Page[SyncRepository], error) {
		opts.ListOptions = o
		return c.ListSyncRepositoriesPage(ctx, opts)
	})
}

// GetSyncRepository returns one repository's indicators.
func (c *Client) GetSyncRepository(ctx context.Context, repo string) (SyncRepository, error) {
	return get[SyncRepository](ctx, c, p("/v1/sync/repos/%s", repo), nil)
}

// RecordSyncIndexed records that a repository was indexed.
func (c *Client) RecordSyncIndexed(ctx context.Context, repo string, req SyncIndexedRequest) (SyncRepository, error) {
	return send[SyncRepository](ctx, c, http.MethodPost, p("/v1/sync/repos/%s/indexed", repo), req)
}

// --- admin (the admin token) ---

// CreateUser creates a tenant; the CreatedUser's Token is shown once.
func (c *Client) CreateUser(ctx context.Context, req CreateUserRequest) (CreatedUser, error) {
	return send[CreatedUser](ctx, c, http.MethodPost, "/v1/admin/users", req)
}

// ListUsersPage returns one page of tenants.
func (c *Client) ListUsersPage(ctx context.Context, opts ListOptions) (Page[User], error) {
	return get[Page[User]](ctx, c, "/v1/admin/users", opts.query())
}

// ListUsers iterates over the tenants.
func (c *Client) ListUsers(ctx context.Context, opts ListOptions) iter.Seq2[User, error] {
	return all(ctx, opts, c.ListUsersPage)
}

// DeleteUser deletes a tenant with its applications, credentials and
// tokens, releasing its locks.
func (c *Client) DeleteUser(ctx context.Context, name string) (TenantDeletion, error) {
	return send[TenantDeletion](ctx, c, http.MethodDelete, p("/v1/admin/users/%s", name), nil)
}

// IssueToken issues one more token for a tenant (shown once).
func (c *Client) IssueToken(ctx context.Context, name string) (string, error) {
	v, err := send[struct {
		Token string `json:"token"`
	}](ctx, c, http.MethodPost, p("/v1/admin/users/%s/tokens", name), nil)
	return v.Token, err
}

// RevokeTokens revokes every token of a tenant and says how many.
func (c *Client) RevokeTokens(ctx context.Context, name string) (int64, error) {
	v, err := send[struct {
		Revoked int64 `json:"revoked"`
	}](ctx, c, http.MethodDelete, p("/v1/admin/users/%s/tokens", name), nil)
	return v.Revoked, err
}

// RunGC runs one global lock GC. It is never retried.
func (c *Client) RunGC(ctx context.Context, opts GCOptions) (GCRun, error) {
	q := url.Values{}
	if opts.DryRun {
		q.Set("dry_run", "true")
	}
	if opts.Full {
		q.Set("full", "true")
	}
	if opts.BatchSize > 0 {
		q.Set("batch_size", strconv.Itoa(opts.BatchSize))
	}
	if opts.MinAge != nil {
		q.Set("min_age", opts.MinAge.String())
	}
	var run GCRun
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/admin/gc", query: q, out: &run})
	return run, err
}

// ListGCRunsPage returns one page of recorded runs, newest first.
func (c *Client) ListGCRunsPage(ctx context.Context, opts ListOptions) (Page[GCRun], error) {
	return get[Page[GCRun]](ctx, c, "/v1/admin/gc/runs", opts.query())
}

// ListGCRuns iterates over recorded runs, newest first.
func (c *Client) ListGCRuns(ctx context.Context, opts ListOptions) iter.Seq2[GCRun, error] {
	return all(ctx, opts, c.ListGCRunsPage)
}

// GetGCRun returns a recorded run.
func (c *Client) GetGCRun(ctx context.Context, id string) (GCRun, error) {
	return get[GCRun](ctx, c, p("/v1/admin/gc/runs/%s", id), nil)
}

// ListReports returns the reports.
func (c *Client) ListReports(ctx context.Context) ([]Report, error) {
	v, err := get[Page[Report]](ctx, c, "/v1/admin/reports", nil)
	return v.Items, err
}

// GetReport returns a report's rows.
func (c *Client) GetReport(ctx context.Context, name string, opts ReportOptions) (ReportRows, error) {
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	return get[ReportRows](ctx, c, p("/v1/admin/reports/%s", name), q)
}

// GetReportCSV returns a report as CSV with a header line.
func (c *Client) GetReportCSV(ctx context.Context, name string, opts ReportOptions) ([]byte, error) {
	q := url.Values{"format": {"csv"}}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var b []byte
	err := c.do(ctx, call{method: http.MethodGet, path: p("/v1/admin/reports/%s", name), query: q, raw: &b})
	return b, err
}

// VerifyOwnershipReport recounts the ownership figures from the base tables
// (GET /v1/admin/reports/ownership/verify); OK is false when any tenant's
// figures drift.
func (c *Client) VerifyOwnershipReport(ctx context.Context) (OwnershipVerification, error) {
	return get[OwnershipVerification](ctx, c, "/v1/admin/reports/ownership/verify", nil)
}

// RunRekey re-keys locks made under an older keying rules version. It is
// never retried. When the run fails after some batches, the error carries
// what it did (Error.Progress): that stays done, and a second run
// continues.
func (c *Client) RunRekey(ctx context.Context, opts RekeyOptions) (RekeyReport, error) {
	q := url.Values{}
	if opts.DryRun {
		q.Set("dry_run", "true")
	}
	if opts.BatchSize > 0 {
		q.Set("batch_size", strconv.Itoa(opts.BatchSize))
	}
	var rep RekeyReport
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/admin/rekey", query: q, out: &rep})
	return rep, err
}

// ListAliases returns the configured normalizer aliases.
func (c *Client) ListAliases(ctx context.Context) ([]Alias, error) {
	v, err := get[Page[Alias]](ctx, c, "/v1/admin/aliases", nil)
	return v.Items, err
}

// CreateAlias adds a normalizer alias and re-keys the locks it moves, as
// one operation: the answer is the stored alias and the change. A change
// that would give a repository two owners (or leave a reference the rules
// reject) is refused with alias_conflict and changes nothing
// (IsAliasConflict, Error.AliasConflicts). It is never retried.
func (c *Client) CreateAlias(ctx context.Context, req CreateAliasRequest) (CreatedAlias, error) {
	return send[CreatedAlias](ctx, c, http.MethodPost, "/v1/admin/aliases", req)
}

// PlanCreateAlias is CreateAlias as a dry run: the plan of the change,
// nothing changed. A change that would be refused is the same
// alias_conflict error.
func (c *Client) PlanCreateAlias(ctx context.Context, req CreateAliasRequest) (AliasChange, error) {
	var ch AliasChange
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/admin/aliases", query: url.Values{"dry_run": {"true"}}, in: req, out: &ch})
	return ch, err
}

// DeleteAlias removes a normalizer alias and re-keys the locks it moves,
// as one operation (alias_conflict as in CreateAlias).
func (c *Client) DeleteAlias(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/admin/aliases/%s", id))
}

// PlanDeleteAlias is DeleteAlias as a dry run: the plan of the change,
// nothing changed.
func (c *Client) PlanDeleteAlias(ctx context.Context, id string) (AliasChange, error) {
	var ch AliasChange
	err := c.do(ctx, call{method: http.MethodDelete, path: p("/v1/admin/aliases/%s", id), query: url.Values{"dry_run": {"true"}}, out: &ch})
	return ch, err
}
