// Package apps manages Applications and Repository Credentials, the two
// things that point at Git repositories and therefore hold ownership locks
// (internal/locks).
//
// Every write keeps one invariant, in the same transaction as the row it
// changes: an Application or Credential of tenant T on repository key K has
// exactly one reference row, to T's lock on K; a lock exists only while
// something references it.
//
//   - Create acquires the lock (locks.AcquireRepositoryCredentialURL) and
//     writes the row and its reference.
//   - Update that changes the repository acquires the new lock, moves the
//     reference and releases the old lock if nothing else uses it.
//   - Delete removes the row and its reference and releases the lock if it
//     was the last reference.
//
// A URL claimed by another tenant is refused with repository_claimed; the
// "denied" audit event is committed anyway (the transaction has written
// nothing else at that point), so report views see every denial.
//
// A tenant sees and touches only its own rows: every query filters on the
// tenant, and another tenant's id is not_found, exactly like an id that does
// not exist.
package apps

import (
	"context"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// Application is an Argo CD-style application: a path at a revision of a
// Git repository.
type Application struct {
	ID       string `db:"id" json:"id"`
	TenantID string `db:"cluster_user_id" json:"-"`
	Name     string `db:"name" json:"name"`
	// RepoURL is the URL as given, with any user info or token removed.
	RepoURL string `db:"repo_url" json:"repo_url"`
	// NormalizedURL is the lock key of RepoURL (internal/normalize).
	NormalizedURL  string    `db:"normalized_url" json:"normalized_url"`
	Path           string    `db:"path" json:"path"`
	TargetRevision string    `db:"target_revision" json:"target_revision"`
	LockID         string    `db:"lock_id" json:"lock_id"`
	CreatedAt      time.Time `db:"created_at" json:"created_at"`
	UpdatedAt      time.Time `db:"updated_at" json:"updated_at"`
}

// NewApplication is what creating an application takes.
type NewApplication struct {
	Name           string
	RepoURL        string
	Path           string
	TargetRevision string
}

// ApplicationPatch changes the fields that are not nil.
type ApplicationPatch struct {
	Name           *string
	RepoURL        *string
	Path           *string
	TargetRevision *string
}

// Field limits (the migration's CHECK constraints are the same).
const (
	MaxNameLength           = 253
	MaxPathLength           = 4096
	MaxTargetRevisionLength = 255
	MaxUsernameLength       = 255
	MaxSecretRefLength      = 1024
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// ValidateName checks an application or credential name: 1-253 characters of
// lowercase letters, digits, '-' and '.', starting and ending with a letter or
// digit (a Kubernetes object name).
func ValidateName(name string) error {
	if len(name) < 1 || len(name) > MaxNameLength || !nameRE.MatchString(name) {
		return repolock.Errorf(repolock.EInvalid,
			"name must be 1-%d characters of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", MaxNameLength)
	}
	return nil
}

// repoURL normalizes raw and returns its key and the URL to store (as given,
// without user info).
func repoURL(raw string) (normalize.Key, string, error) {
	key, err := normalize.RepoURL(raw)
	if err != nil {
		return "", "", repolock.Wrap(repolock.EInvalid, err, "repo_url: %s", repolock.ErrorMessage(err))
	}
	stored, err := normalize.StripUserInfo(raw)
	if err != nil {
		return "", "", repolock.Wrap(repolock.EInvalid, err, "repo_url: %s", repolock.ErrorMessage(err))
	}
	return key, stored, nil
}

func validatePath(p string) error {
	if len(p) > MaxPathLength {
		return repolock.Errorf(repolock.EInvalid, "path must be at most %d bytes", MaxPathLength)
	}
	if hasControl(p) {
		return repolock.Errorf(repolock.EInvalid, "path must not contain control characters")
	}
	if strings.HasPrefix(p, "/") {
		return repolock.Errorf(repolock.EInvalid, "path must be relative to the repository root")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return repolock.Errorf(repolock.EInvalid, "path must not contain '..' segments")
		}
	}
	return nil
}

func validateRevision(r string) error {
	if len(r) > MaxTargetRevisionLength {
		return repolock.Errorf(repolock.EInvalid, "target_revision must be at most %d bytes", MaxTargetRevisionLength)
	}
	if strings.IndexFunc(r, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0 {
		return repolock.Errorf(repolock.EInvalid, "target_revision must not contain whitespace or control characters")
	}
	return nil
}

func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

func validID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil
}

// acquire acquires key for the tenant in tx. claimedBy is the owner's name
// when another tenant holds it.
func acquire(ctx context.Context, tx database.Tx, tenantID string, key normalize.Key) (lockID, claimedBy string, err error) {
	lockID, ok, owner, err := locks.AcquireRepositoryCredentialURL(ctx, tx, tenantID, string(key))
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", owner, nil
	}
	return lockID, "", nil
}

// mapWriteError maps the errors of writing a row; what is "an application"
// or "a repository credential".
func mapWriteError(err error, what, name string) error {
	if database.PQCode(err) == database.CodeUniqueViolation && strings.HasSuffix(database.Constraint(err), "_tenant_name_key") {
		return repolock.Wrap(repolock.EAlreadyExists, err, "%s named %q already exists", what, name)
	}
	if database.PQCode(err) == database.CodeForeignKeyViolation && strings.Contains(database.Constraint(err), "cluster_user_id") {
		return repolock.Wrap(repolock.ENotFound, err, "the user no longer exists")
	}
	return database.MapError(err)
}

const applicationColumns = `a.id, a.cluster_user_id, a.name, a.repo_url, a.normalized_url, a.path, a.target_revision, a.created_at, a.updated_at`

// createApplicationSQL writes the application and its reference in one
// statement, in the transaction that acquired the lock $7.
const createApplicationSQL = `
WITH a AS (
	INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url, path, target_revision)
	VALUES ($1, $2, $3, $4, $5, $6)
	RETURNING *
), ref AS (
	INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT a.id, $7::uuid FROM a
)
SELECT ` + applicationColumns + `, $7::uuid::text AS lock_id FROM a`

// createApplicationWithNewLockSQL is the fast path of CreateApplication: when
// nobody holds the URL, one statement (so one implicit transaction and one
// round trip) creates the lock, its event, the application and the
// reference. It returns no row, and writes nothing, when the URL is taken.
const createApplicationWithNewLockSQL = `
WITH ` + locks.NewLockCTE + `, a AS (
	INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url, path, target_revision)
	SELECT $3, $4, $5, $1, $6, $7 FROM lock
	RETURNING *
), ref AS (
	INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT a.id, lock.id FROM a, lock
)
SELECT ` + applicationColumns + `, lock.id::text AS lock_id FROM a, lock`

// CreateApplication creates an application of the tenant and references the
// tenant's lock on its repository, acquiring it if needed.
//
// A URL nobody holds is acquired and the application written in a single
// statement. Otherwise (the tenant already owns the URL, another tenant does,
// or the fast path lost a race) one transaction acquires the lock with
// locks.AcquireRepositoryCredentialURL and writes the row and its reference.
func CreateApplication(ctx context.Context, db *database.DB, tenantID string, in NewApplication) (Application, error) {
	if err := ValidateName(in.Name); err != nil {
		return Application{}, err
	}
	key, stored, err := repoURL(in.RepoURL)
	if err != nil {
		return Application{}, err
	}
	if err := validatePath(in.Path); err != nil {
		return Application{}, err
	}
	if err := validateRevision(in.TargetRevision); err != nil {
		return Application{}, err
	}
	var app Application
	err = db.GetPrepared(ctx, &app, createApplicationWithNewLockSQL,
		string(key), normalize.Version, tenantID, in.Name, stored, in.Path, in.TargetRevision)
	if err == nil {
		return app, nil
	}
	if !database.IsNoRows(err) {
		return Application{}, mapWriteError(err, "an application", in.Name)
	}
	var claimedBy string
	err = db.WithTx(ctx, func(tx database.Tx) error {
		lockID, owner, err := acquire(ctx, tx, tenantID, key)
		if err != nil {
			return err
		}
		if claimedBy = owner; claimedBy != "" {
			return nil // commit the denial event; nothing else was written
		}
		err = tx.GetContext(ctx, &app, createApplicationSQL, tenantID, in.Name, stored, string(key), in.Path, in.TargetRevision, lockID)
		return mapWriteError(err, "an application", in.Name)
	})
	if err != nil {
		return Application{}, err
	}
	if claimedBy != "" {
		return Application{}, locks.ClaimedError(claimedBy)
	}
	return app, nil
}

const selectApplicationSQL = `
SELECT ` + applicationColumns + `, coalesce(r.lock_id::text, '') AS lock_id
FROM applications a LEFT JOIN RepositoryLockApplication r ON r.application_id = a.id`

// GetApplication returns the tenant's application id.
func GetApplication(ctx context.Context, q database.Querier, tenantID, id string) (Application, error) {
	if !validID(id) {
		return Application{}, applicationNotFound(id)
	}
	var app Application
	err := q.GetContext(ctx, &app, selectApplicationSQL+` WHERE a.id = $1 AND a.cluster_user_id = $2`, id, tenantID)
	if database.IsNoRows(err) {
		return Application{}, applicationNotFound(id)
	}
	return app, database.MapError(err)
}

func applicationNotFound(id string) error {
	return repolock.Errorf(repolock.ENotFound, "application %s not found", id)
}

// ListApplications returns one page of the tenant's applications in creation
// order and the token of the next page ("" after the last).
func ListApplications(ctx context.Context, q database.Querier, tenantID string, pageSize int, pageToken string) ([]Application, string, error) {
	after, err := locks.DecodePageToken(locks.KindApplications, pageToken)
	if err != nil {
		return nil, "", err
	}
	out := []Application{}
	err = q.SelectContext(ctx, &out, selectApplicationSQL+`
		WHERE a.cluster_user_id = $1 AND (a.created_at, a.id) > ($2::timestamptz, $3::uuid)
		ORDER BY a.created_at, a.id
		LIMIT $4`, tenantID, after.CreatedAt, after.ID, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	var next string
	if len(out) > pageSize {
		out = out[:pageSize]
		last := out[len(out)-1]
		next = locks.EncodePageToken(locks.KindApplications, locks.Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return out, next, nil
}

// UpdateApplication changes the fields of the patch that are not nil. A new
// repo_url on another repository moves the application to the tenant's lock
// on it (acquiring it, or failing with repository_claimed) and releases the
// old lock if nothing else references it. A patch that changes nothing
// returns the application unchanged.
func UpdateApplication(ctx context.Context, db *database.DB, tenantID, id string, p ApplicationPatch) (Application, error) {
	if !validID(id) {
		return Application{}, applicationNotFound(id)
	}
	var (
		key    normalize.Key
		stored string
		err    error
	)
	if p.Name != nil {
		if err := ValidateName(*p.Name); err != nil {
			return Application{}, err
		}
	}
	if p.RepoURL != nil {
		if key, stored, err = repoURL(*p.RepoURL); err != nil {
			return Application{}, err
		}
	}
	if p.Path != nil {
		if err := validatePath(*p.Path); err != nil {
			return Application{}, err
		}
	}
	if p.TargetRevision != nil {
		if err := validateRevision(*p.TargetRevision); err != nil {
			return Application{}, err
		}
	}
	var (
		app       Application
		claimedBy string
	)
	err = db.WithTx(ctx, func(tx database.Tx) error {
		claimedBy = ""
		cur, err := lockApplication(ctx, tx, tenantID, id)
		if err != nil {
			return err
		}
		next := cur
		setIf(&next.Name, p.Name)
		setIf(&next.Path, p.Path)
		setIf(&next.TargetRevision, p.TargetRevision)
		if p.RepoURL != nil {
			next.RepoURL, next.NormalizedURL = stored, string(key)
		}
		if next == cur {
			app = cur
			return nil
		}
		if next.NormalizedURL != cur.NormalizedURL {
			lockID, owner, err := acquire(ctx, tx, tenantID, normalize.Key(next.NormalizedURL))
			if err != nil {
				return err
			}
			if claimedBy = owner; claimedBy != "" {
				return nil // commit the denial event; nothing else was written
			}
			next.LockID = lockID
		}
		err = tx.GetContext(ctx, &app, `
			UPDATE applications a
			SET name = $3, repo_url = $4, normalized_url = $5, path = $6, target_revision = $7, updated_at = now()
			WHERE a.id = $1 AND a.cluster_user_id = $2
			RETURNING `+applicationColumns+`, $8::text AS lock_id`,
			id, tenantID, next.Name, next.RepoURL, next.NormalizedURL, next.Path, next.TargetRevision, next.LockID)
		if err != nil {
			return mapWriteError(err, "an application", next.Name)
		}
		if next.LockID != cur.LockID {
			return moveReference(ctx, tx, applicationRefs, id, cur.LockID, next.LockID)
		}
		return nil
	})
	if err != nil {
		return Application{}, err
	}
	if claimedBy != "" {
		return Application{}, locks.ClaimedError(claimedBy)
	}
	return app, nil
}

func setIf(dst *string, v *string) {
	if v != nil {
		*dst = *v
	}
}

// lockApplication locks the application row and then, in a new statement (so
// with a snapshot taken after any concurrent change to it committed), reads
// it with its reference. Every change to an application's reference happens
// under this row lock.
func lockApplication(ctx context.Context, tx database.Tx, tenantID, id string) (Application, error) {
	if err := lockRow(ctx, tx, applicationRefs, tenantID, id); err != nil {
		return Application{}, err
	}
	var app Application
	err := tx.GetContext(ctx, &app, selectApplicationSQL+` WHERE a.id = $1`, id)
	return app, database.MapError(err)
}

// DeleteApplication deletes the tenant's application id and releases its
// lock if it was the last reference, in one transaction.
func DeleteApplication(ctx context.Context, db *database.DB, tenantID, id string) error {
	return deleteReferencing(ctx, db, applicationRefs, tenantID, id)
}
