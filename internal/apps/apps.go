// Package apps manages Applications and Repository Credentials, the two
// things that point at Git repositories and therefore hold ownership locks
// (internal/locks).
//
// Every write keeps one invariant, in the same transaction as the row it
// changes: an Application or Credential of tenant T on repository key K has
// exactly one reference row, to T's lock on K; a lock exists only while
// something references it.
//
//   - Create acquires the lock (locks.Service.AcquireTx) and
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
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// Application is an Argo CD-style application: a path at a revision of a
// Git repository.
type Application struct {
	ID       string `db:"id" json:"id"`
	TenantID string `db:"cluster_user_id" json:"-"`
	Name     string `db:"name" json:"name"`
	// RepoURL is the URL as given, without what can be a secret (any user
	// info of http(s), a password, a token-shaped user); an ssh login name
	// is kept (normalize.DisplayURL).
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

// repoURL normalizes raw and returns its key and the URL to store: as
// given, without what can be a secret, but with the login name of an ssh
// URL (normalize.DisplayURL: "git@github.com:o/r.git" is kept whole).
func repoURL(n *normalize.Normalizer, raw string) (normalize.Key, string, error) {
	key, err := n.RepoURL(raw)
	if err != nil {
		return "", "", repolock.Wrap(repolock.EInvalid, err, "repo_url: %s", repolock.ErrorMessage(err))
	}
	stored, err := n.DisplayURL(raw)
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

// applications is the Application kind of row.
var applications = newKind(kind{
	noun: "application", what: "an application", pageKind: pagetoken.KindApplications,
	table: "applications", refTable: "RepositoryLockApplication", refColumn: "application_id",
	ref:     locks.RefApplication,
	own:     []column{{"path", validatePath}, {"target_revision", validateRevision}},
	repoURL: repoURL,
})

func (a Application) fields() fields {
	return fields{
		id: a.ID, createdAt: a.CreatedAt,
		tenantID: a.TenantID, name: a.Name, repoURL: a.RepoURL, normalizedURL: a.NormalizedURL,
		own:    []string{a.Path, a.TargetRevision},
		lockID: a.LockID,
	}
}

// CreateApplication creates an application of the tenant and references the
// tenant's lock on its repository, acquiring it if needed.
//
// A URL nobody holds is acquired and the application written in a single
// statement. Otherwise (the tenant already owns the URL, another tenant does,
// or the fast path lost a race) one transaction acquires the lock with
// locks.Service.AcquireTx and writes the row and its reference.
func (s *Service) CreateApplication(ctx context.Context, tenantID string, in NewApplication) (_ Application, err error) {
	defer repolock.WrapOp(&err, "apps.CreateApplication")
	return create(ctx, s, applications, s.createApplication, tenantID,
		change{name: &in.Name, repoURL: &in.RepoURL, own: []*string{&in.Path, &in.TargetRevision}})
}

// GetApplication returns the tenant's application id.
func (s *Service) GetApplication(ctx context.Context, tenantID, id string) (_ Application, err error) {
	defer repolock.WrapOp(&err, "apps.GetApplication")
	return get[Application](ctx, s, applications, tenantID, id)
}

// ListApplications returns one page of the tenant's applications in creation
// order and the token of the next page ("" after the last).
func (s *Service) ListApplications(ctx context.Context, tenantID string, pageSize int, pageToken string) (_ []Application, _ string, err error) {
	defer repolock.WrapOp(&err, "apps.ListApplications")
	return list[Application](ctx, s, applications, tenantID, pageSize, pageToken)
}

// UpdateApplication changes the fields of the patch that are not nil. A new
// repo_url on another repository moves the application to the tenant's lock
// on it (acquiring it, or failing with repository_claimed) and releases the
// old lock if nothing else references it. A patch that changes nothing
// returns the application unchanged.
func (s *Service) UpdateApplication(ctx context.Context, tenantID, id string, p ApplicationPatch) (_ Application, err error) {
	defer repolock.WrapOp(&err, "apps.UpdateApplication")
	return update[Application](ctx, s, applications, tenantID, id,
		change{name: p.Name, repoURL: p.RepoURL, own: []*string{p.Path, p.TargetRevision}})
}

// DeleteApplication deletes the tenant's application id and releases its
// lock if it was the last reference, in one transaction.
func (s *Service) DeleteApplication(ctx context.Context, tenantID, id string) (err error) {
	defer repolock.WrapOp(&err, "apps.DeleteApplication")
	return s.remove(ctx, applications, tenantID, id)
}
