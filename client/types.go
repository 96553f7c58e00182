package client

import "time"

// ListOptions selects a page: PageSize 1..500 (0: the server's default,
// 50) and the NextPageToken of the previous page ("" for the first).
type ListOptions struct {
	PageSize  int
	PageToken string
}

// Page is one page of a list.
type Page[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"next_page_token"`
}

// User is a tenant.
type User struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	DisplayName string    `json:"display_name"`
	CreatedAt   time.Time `json:"created_at"`
}

// CreateUserRequest is the body of CreateUser.
type CreateUserRequest struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name,omitempty"`
}

// CreatedUser is a new tenant with its first token (shown once).
type CreatedUser struct {
	User
	Token string `json:"token"`
}

// TenantDeletion is what deleting a tenant removed.
type TenantDeletion struct {
	User                  string `json:"user"`
	Applications          int64  `json:"applications"`
	RepositoryCredentials int64  `json:"repository_credentials"`
	LocksReleased         int64  `json:"locks_released"`
}

// Normalized is the lock key of a URL.
type Normalized struct {
	Input      string `json:"input"`
	Normalized string `json:"normalized"`
	Version    int    `json:"version"`
}

// Application is an Argo CD-style application; creating one claims its
// repository.
type Application struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	RepoURL        string    `json:"repo_url"`
	NormalizedURL  string    `json:"normalized_url"`
	Path           string    `json:"path"`
	TargetRevision string    `json:"target_revision"`
	LockID         string    `json:"lock_id"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// CreateApplicationRequest is the body of CreateApplication.
type CreateApplicationRequest struct {
	Name           string `json:"name"`
	RepoURL        string `json:"repo_url"`
	Path           string `json:"path,omitempty"`
	TargetRevision string `json:"target_revision,omitempty"`
}

// UpdateApplicationRequest changes the fields that are not nil.
type UpdateApplicationRequest struct {
	Name           *string `json:"name,omitempty"`
	RepoURL        *string `json:"repo_url,omitempty"`
	Path           *string `json:"path,omitempty"`
	TargetRevision *string `json:"target_revision,omitempty"`
}

// RepositoryCredential names where a repository's secret lives; creating
// one claims its repository.
type RepositoryCredential struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	RepoURL       string    `json:"repo_url"`
	NormalizedURL string    `json:"normalized_url"`
	Username      string    `json:"username"`
	SecretRef     string    `json:"secret_ref"`
	LockID        string    `json:"lock_id"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// CreateRepositoryCredentialRequest is the body of
// CreateRepositoryCredential.
type CreateRepositoryCredentialRequest struct {
	Name      string `json:"name"`
	RepoURL   string `json:"repo_url"`
	Username  string `json:"username,omitempty"`
	SecretRef string `json:"secret_ref"`
}

// UpdateRepositoryCredentialRequest changes the fields that are not nil.
type UpdateRepositoryCredentialRequest struct {
	Name      *string `json:"name,omitempty"`
	RepoURL   *string `json:"repo_url,omitempty"`
	Username  *string `json:"username,omitempty"`
	SecretRef *string `json:"secret_ref,omitempty"`
}

// Lock is an ownership lock with its reference counts.
type Lock struct {
	ID                    string    `json:"id"`
	NormalizedURL         string    `json:"normalized_url"`
	NormalizerVersion     int       `json:"normalizer_version"`
	Applications          int       `json:"applications"`
	RepositoryCredentials int       `json:"repository_credentials"`
	CreatedAt             time.Time `json:"created_at"`
}

// AcquiredLock is the answer of AcquireLock.
type AcquiredLock struct {
	LockID        string `json:"lock_id"`
	Acquired      bool   `json:"acquired"`
	NormalizedURL string `json:"normalized_url"`
}

// Repository is a graveler-style repository record.
type Repository struct {
	Name             string    `json:"name"`
	StorageNamespace string    `json:"storage_namespace"`
	DefaultBranch    string    `json:"default_branch"`
	State            string    `json:"state"`
	InstanceUID      string    `json:"instance_uid"`
	CreatedAt        time.Time `json:"created_at"`
}

// CreateRepositoryRequest is the body of CreateRepository.
type CreateRepositoryRequest struct {
	Name             string `json:"name"`
	StorageNamespace string `json:"storage_namespace"`
	DefaultBranch    string `json:"default_branch,omitempty"`
	Bare             bool   `json:"bare,omitempty"`
}

// Branch is a branch record.
type Branch struct {
	Name         string   `json:"name"`
	CommitID     string   `json:"commit_id"`
	StagingToken string   `json:"staging_token"`
	SealedTokens []string `json:"sealed_tokens"`
}

// Commit is an immutable commit.
type Commit struct {
	ID           string            `json:"id"`
	Version      int               `json:"version"`
	Committer    string            `json:"committer"`
	Message      string            `json:"message"`
	MetaRangeID  string            `json:"meta_range_id"`
	CreationDate time.Time         `json:"creation_date"`
	Parents      []string          `json:"parents"`
	Metadata     map[string]string `json:"metadata"`
	Generation   int               `json:"generation"`
}

// CommitRequest is the body of Commit.
type CommitRequest struct {
	Message     string            `json:"message"`
	Committer   string            `json:"committer,omitempty"`
	MetaRangeID string            `json:"meta_range_id,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// Tag names a commit.
type Tag struct {
	Name     string `json:"name"`
	CommitID string `json:"commit_id"`
}

// SyncHost is an event-stream source of one tenant.
type SyncHost struct {
	Name                  string     `json:"name"`
	Cursor                *int64     `json:"cursor"`
	FirstCursorSinceReset int64      `json:"first_cursor_since_reset"`
	StrictCursor          bool       `json:"strict_cursor"`
	AwaitingFirstEvent    bool       `json:"awaiting_first_event"`
	ResetPending          bool       `json:"reset_pending"`
	Resets                int64      `json:"resets"`
	LastResetAt           *time.Time `json:"last_reset_at"`
	ConnectedAt           *time.Time `json:"connected_at"`
	CreatedAt             time.Time  `json:"created_at"`
	UpdatedAt             time.Time  `json:"updated_at"`
}

// PutSyncHostRequest is the optional body of PutSyncHost.
type PutSyncHostRequest struct {
	StrictCursor *bool `json:"strict_cursor,omitempty"`
}

// ConnectRequest is the body of ConnectSyncHost.
type ConnectRequest struct {
	OutdatedCursor bool   `json:"outdated_cursor,omitempty"`
	FirstCursor    *int64 `json:"first_cursor,omitempty"`
}

// ConnectResult is what ConnectSyncHost did.
type ConnectResult struct {
	Host  SyncHost `json:"host"`
	Reset bool     `json:"reset"`
}

// SyncEvent is one stream event.
type SyncEvent struct {
	Cursor int64  `json:"cursor"`
	Repo   string `json:"repo"`
	Rev    string `json:"rev"`
	TooBig bool   `json:"too_big,omitempty"`
}

// SyncEventsResult is what ApplySyncEvents did.
type SyncEventsResult struct {
	Host    SyncHost `json:"host"`
	Applied int      `json:"applied"`
	Ignored int      `json:"ignored"`
	Reset   bool     `json:"reset"`
}

// ListedRepo is one entry of a host's listing.
type ListedRepo struct {
	Repo string `json:"repo"`
	Rev  string `json:"rev"`
}

// SyncListingRequest is the body of RecordSyncListing.
type SyncListingRequest struct {
	CursorBefore int64        `json:"cursor_before"`
	Repos        []ListedRepo `json:"repos"`
}

// SyncListingResult is what RecordSyncListing did.
type SyncListingResult struct {
	Created     int `json:"created"`
	Initialized int `json:"initialized"`
	Unchanged   int `json:"unchanged"`
}

// SyncIndexedRequest is the body of RecordSyncIndexed.
type SyncIndexedRequest struct {
	Host         string `json:"host,omitempty"`
	Rev          string `json:"rev,omitempty"`
	CursorBefore int64  `json:"cursor_before"`
}

// SyncRepository is one repository's rev indicators.
type SyncRepository struct {
	Repo                      string     `json:"repo"`
	Host                      string     `json:"host"`
	LastIndexedRev            string     `json:"last_indexed_rev"`
	FirstRevSinceReset        string     `json:"first_rev_since_reset"`
	FirstCursorSinceReset     int64      `json:"first_cursor_since_reset"`
	LastFirehoseRev           string     `json:"last_firehose_rev"`
	HostFirstCursorSinceReset int64      `json:"host_first_cursor_since_reset"`
	NeedsIndex                bool       `json:"needs_index"`
	Reason                    string     `json:"reason"`
	IndexedAt                 *time.Time `json:"indexed_at"`
	CreatedAt                 time.Time  `json:"created_at"`
	UpdatedAt                 time.Time  `json:"updated_at"`
}

// SyncRepositoryListOptions filters ListSyncRepositories.
type SyncRepositoryListOptions struct {
	ListOptions
	Host       string
	NeedsIndex bool
}

// GCOptions are the parameters of RunGC; zero values take the server's
// defaults.
type GCOptions struct {
	DryRun bool
	// Full: a repair run that also walks every lock, not only the GC
	// candidates (its time grows with the table).
	Full      bool
	BatchSize int
	// MinAge: locks younger than this are never collected; nil takes the
	// server's default (GC_MIN_AGE).
	MinAge *time.Duration
}

// GCCandidate is a lock a dry run would collect.
type GCCandidate struct {
	LockID           string    `json:"lock_id"`
	GitRepositoryURL string    `json:"git_repository_url"`
	OwnerID          string    `json:"owner_id"`
	OwnerName        string    `json:"owner_name"`
	CreatedAt        time.Time `json:"created_at"`
}

// GCCleanerResult holds the repository Cleaner's figures.
type GCCleanerResult struct {
	Scanned      int   `json:"scanned"`
	Cleaned      int   `json:"cleaned"`
	Failed       int   `json:"failed"`
	StaleInitial int   `json:"stale_initial"`
	RowsDeleted  int64 `json:"rows_deleted"`
}

// GCRun is one GC (or clean) run. Status "skipped" (with Reason) when
// another run held the lease; ID is empty then.
type GCRun struct {
	ID              string           `json:"id"`
	Kind            string           `json:"kind"`
	Trigger         string           `json:"trigger"`
	Holder          string           `json:"holder"`
	Status          string           `json:"status"`
	Reason          string           `json:"reason"`
	DryRun          bool             `json:"dry_run"`
	Full            bool             `json:"full"`
	MinAgeSeconds   float64          `json:"min_age_seconds"`
	BatchSize       int              `json:"batch_size"`
	Candidates      int64            `json:"candidates"`
	Scanned         int64            `json:"scanned"`
	Deleted         int64            `json:"deleted"`
	Cleared         int64            `json:"cleared"`
	Flagged         int64            `json:"flagged"`
	Batches         int              `json:"batches"`
	WouldCollect    []GCCandidate    `json:"would_collect"`
	Cleaner         *GCCleanerResult `json:"cleaner"`
	StartedAt       time.Time        `json:"started_at"`
	FinishedAt      *time.Time       `json:"finished_at"`
	DurationSeconds float64          `json:"duration_seconds"`
	Error           string           `json:"error"`
}

// Report describes one reporting view.
type Report struct {
	Name        string `json:"name"`
	View        string `json:"view"`
	Description string `json:"description"`
}

// OwnershipFigures are one tenant's ownership figures.
type OwnershipFigures struct {
	Locks             int64 `json:"locks"`
	Applications      int64 `json:"applications"`
	Credentials       int64 `json:"credentials"`
	UnreferencedLocks int64 `json:"unreferenced_locks"`
}

// OwnershipDrift is a tenant whose reported figures differ from the base
// tables.
type OwnershipDrift struct {
	TenantID   string           `json:"tenant_id"`
	TenantName string           `json:"tenant_name"`
	Reported   OwnershipFigures `json:"reported"`
	Actual     OwnershipFigures `json:"actual"`
	// BadFlags counts the tenant's locks whose maintained "unreferenced"
	// flag is wrong.
	BadFlags int64 `json:"bad_flags"`
}

// OwnershipVerification is VerifyOwnershipReport's answer.
type OwnershipVerification struct {
	OK      bool             `json:"ok"`
	Tenants int64            `json:"tenants"`
	TookMS  int64            `json:"took_ms"`
	Drift   []OwnershipDrift `json:"drift"`
}

// ReportOptions are the parameters of GetReport; Limit 0 means every row.
type ReportOptions struct {
	Limit int
}

// ReportRows is a report's rows: column name to value (strings, numbers,
// booleans, null; times as RFC 3339 strings).
type ReportRows struct {
	Report  string           `json:"report"`
	Columns []string         `json:"columns"`
	Items   []map[string]any `json:"items"`
}

// VersionInfo is the server's build information (GET /version).
type VersionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Time      string `json:"time"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
}

// RekeyOptions are the parameters of RunRekey.
type RekeyOptions struct {
	DryRun bool
	// BatchSize: stale locks moved per transaction (0: the server's
	// default).
	BatchSize int
}

// RekeyProblem is a reference that keeps its lock on an old key, or that
// refuses an alias change: a conflict with another tenant (Other* name it)
// or a URL the rules reject (Reason).
type RekeyProblem struct {
	Kind         string `json:"kind"`
	LockID       string `json:"lock_id"`
	OldKey       string `json:"old_key"`
	UserID       string `json:"user_id"`
	User         string `json:"user"`
	RefKind      string `json:"ref_kind"`
	RefID        string `json:"ref_id"`
	RepoURL      string `json:"repo_url"`
	NewKey       string `json:"new_key,omitempty"`
	Reason       string `json:"reason,omitempty"`
	OtherLockID  string `json:"other_lock_id,omitempty"`
	OtherKey     string `json:"other_key,omitempty"`
	OtherUserID  string `json:"other_user_id,omitempty"`
	OtherUser    string `json:"other_user,omitempty"`
	OtherRepoURL string `json:"other_repo_url,omitempty"`
}

// RekeyReport is the outcome of a re-keying run.
type RekeyReport struct {
	DryRun            bool           `json:"dry_run"`
	NormalizerVersion int            `json:"normalizer_version"`
	NormalizerRules   string         `json:"normalizer_rules"`
	StaleLocks        int            `json:"stale_locks"`
	RekeyedLocks      int            `json:"rekeyed_locks"`
	MovedReferences   int            `json:"moved_references"`
	CreatedLocks      int            `json:"created_locks"`
	ReleasedLocks     int            `json:"released_locks"`
	UnreferencedLocks int            `json:"unreferenced_locks"`
	Conflicts         []RekeyProblem `json:"conflicts"`
	Rejected          []RekeyProblem `json:"rejected"`
	Batches           int            `json:"batches"`
}

// Alias is a configured normalizer alias (endpoints in key syntax
// host[+port][/prefix]).
type Alias struct {
	ID        string    `json:"id"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	CreatedAt time.Time `json:"created_at"`
}

// CreatedAlias is the answer of CreateAlias: the stored alias and what
// its re-key did.
type CreatedAlias struct {
	Alias
	Change AliasChange `json:"change"`
}

// AliasChange is the plan of an alias change (PlanCreateAlias,
// PlanDeleteAlias) or what it did (CreatedAlias.Change): an alias change
// is a re-key applied as one operation. It is applied only when Conflicts
// and Rejected are empty; the problems of a refused change are in its
// alias_conflict error (Error.AliasConflicts).
type AliasChange struct {
	DryRun bool `json:"dry_run"`
	// Action is "add" or "remove".
	Action string `json:"action"`
	// Alias is the alias added or removed (in a dry run of an add: no ID,
	// a zero CreatedAt).
	Alias Alias `json:"alias"`
	// Endpoint (host[+port]) is where the locks the change can move are:
	// the alias's From for an add, its To for a removal.
	Endpoint string `json:"endpoint"`
	// ExaminedLocks are the locks on Endpoint under the alias's prefix;
	// RekeyedLocks those whose references all moved or kept their key.
	ExaminedLocks   int            `json:"examined_locks"`
	RekeyedLocks    int            `json:"rekeyed_locks"`
	MovedReferences int            `json:"moved_references"`
	CreatedLocks    int            `json:"created_locks"`
	ReleasedLocks   int            `json:"released_locks"`
	Conflicts       []RekeyProblem `json:"conflicts"`
	Rejected        []RekeyProblem `json:"rejected"`
}

// CreateAliasRequest is the body of CreateAlias.
type CreateAliasRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}
