package apps

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// RepositoryCredential says how to authenticate to a Git repository. It never
// holds the secret itself: SecretRef names where the secret lives (a
// Kubernetes Secret, a vault path...).
type RepositoryCredential struct {
	ID       string `db:"id" json:"id"`
	TenantID string `db:"cluster_user_id" json:"-"`
	Name     string `db:"name" json:"name"`
	// RepoURL is the URL as given, with any user info or token removed.
	RepoURL       string    `db:"repo_url" json:"repo_url"`
	NormalizedURL string    `db:"normalized_url" json:"normalized_url"`
	Username      string    `db:"username" json:"username"`
	SecretRef     string    `db:"secret_ref" json:"secret_ref"`
	LockID        string    `db:"lock_id" json:"lock_id"`
	CreatedAt     time.Time `db:"created_at" json:"created_at"`
	UpdatedAt     time.Time `db:"updated_at" json:"updated_at"`
}

// NewRepositoryCredential is what creating a credential takes.
type NewRepositoryCredential struct {
	Name      string
	RepoURL   string
	Username  string
	SecretRef string
}

// RepositoryCredentialPatch changes the fields that are not nil.
type RepositoryCredentialPatch struct {
	Name      *string
	RepoURL   *string
	Username  *string
	SecretRef *string
}

// SecretFields are request fields people put secrets in. The API refuses
// them by name (with ErrSecretField) rather than as generic unknown fields,
// so the caller learns to use secret_ref.
var SecretFields = []string{
	"password", "token", "bearer_token", "bearerToken", "access_token",
	"ssh_private_key", "sshPrivateKey", "private_key", "privateKey",
	"tls_client_cert_key", "tlsClientCertKey", "github_app_private_key", "githubAppPrivateKey",
	"secret",
}

// ErrSecretField is the error for a request that carries a secret in field.
// The value is never echoed.
func ErrSecretField(field string) error {
	return &repolock.Error{
		Code: repolock.EInvalid,
		Message: "repository credentials never carry secrets: remove \"" + field + "\", store the secret in your secret store " +
			"and pass its location in secret_ref (for example \"k8s://namespace/secret-name\" or \"vault://path/to/secret\")",
		Details: map[string]any{"field": field},
	}
}

// tokenPrefixes start well-known access tokens; a secret_ref that starts
// with one is a token pasted into the wrong field.
var tokenPrefixes = []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xoxb-", "xoxp-", "AKIA"}

func validateSecretRef(ref string) error {
	switch {
	case ref == "":
		return repolock.Errorf(repolock.EInvalid, "secret_ref is required: the location of the secret in your secret store")
	case len(ref) > MaxSecretRefLength:
		return repolock.Errorf(repolock.EInvalid, "secret_ref must be at most %d bytes", MaxSecretRefLength)
	case strings.Contains(ref, "-----BEGIN"):
		return ErrSecretField("secret_ref")
	case strings.IndexFunc(ref, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0:
		return repolock.Errorf(repolock.EInvalid, "secret_ref must be a reference without whitespace, not a secret")
	}
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(ref, p) {
			return ErrSecretField("secret_ref")
		}
	}
	return nil
}

func validateUsername(u string) error {
	if len(u) > MaxUsernameLength {
		return repolock.Errorf(repolock.EInvalid, "username must be at most %d bytes", MaxUsernameLength)
	}
	if hasControl(u) {
		return repolock.Errorf(repolock.EInvalid, "username must not contain control characters")
	}
	return nil
}

// urlHasPassword reports whether a scheme URL carries a password in its user
// info ("https://user:secret@host/...").
func urlHasPassword(raw string) bool {
	s := strings.TrimSpace(raw)
	i := strings.Index(s, "://")
	if i < 0 {
		return false
	}
	rest := s[i+3:]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	at := strings.LastIndexByte(rest, '@')
	return at >= 0 && strings.IndexByte(rest[:at], ':') >= 0
}

// credentialRepoURL is repoURL that also refuses a password in the URL: in a
// credential it is a raw secret.
func credentialRepoURL(raw string) (normalize.Key, string, error) {
	key, stored, err := repoURL(raw)
	if err != nil {
		return "", "", err
	}
	if urlHasPassword(raw) {
		return "", "", &repolock.Error{
			Code: repolock.EInvalid,
			Message: "repo_url must not contain a password or token: pass the user name in username, " +
				"store the secret in your secret store and pass its location in secret_ref",
			Details: map[string]any{"field": "repo_url"},
		}
	}
	return key, stored, nil
}

const credentialColumns = `a.id, a.cluster_user_id, a.name, a.repo_url, a.normalized_url, a.username, a.secret_ref, a.created_at, a.updated_at`

const createCredentialSQL = `
WITH a AS (
	INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url, username, secret_ref)
	VALUES ($1, $2, $3, $4, $5, $6)
	RETURNING *
), ref AS (
	INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id) SELECT a.id, $7::uuid FROM a
)
SELECT ` + credentialColumns + `, $7::uuid::text AS lock_id FROM a`

// createCredentialWithNewLockSQL is the fast path of
// CreateRepositoryCredential, as createApplicationWithNewLockSQL.
const createCredentialWithNewLockSQL = `
WITH ` + locks.NewLockCTE + `, a AS (
	INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url, username, secret_ref)
	SELECT $3, $4, $5, $1, $6, $7 FROM lock
	RETURNING *
), ref AS (
	INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id) SELECT a.id, lock.id FROM a, lock
)
SELECT ` + credentialColumns + `, lock.id::text AS lock_id FROM a, lock`

// CreateRepositoryCredential creates a credential of the tenant and
// references the tenant's lock on its repository, acquiring it if needed,
// with the same fast path as CreateApplication.
func CreateRepositoryCredential(ctx context.Context, db *database.DB, tenantID string, in NewRepositoryCredential) (RepositoryCredential, error) {
	if err := ValidateName(in.Name); err != nil {
		return RepositoryCredential{}, err
	}
	key, stored, err := credentialRepoURL(in.RepoURL)
	if err != nil {
		return RepositoryCredential{}, err
	}
	if err := validateUsername(in.Username); err != nil {
		return RepositoryCredential{}, err
	}
	if err := validateSecretRef(in.SecretRef); err != nil {
		return RepositoryCredential{}, err
	}
	var cred RepositoryCredential
	err = db.GetPrepared(ctx, &cred, createCredentialWithNewLockSQL,
		string(key), normalize.Version, tenantID, in.Name, stored, in.Username, in.SecretRef)
	if err == nil {
		return cred, nil
	}
	if !database.IsNoRows(err) {
		return RepositoryCredential{}, mapWriteError(err, "a repository credential", in.Name)
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
		err = tx.GetContext(ctx, &cred, createCredentialSQL, tenantID, in.Name, stored, string(key), in.Username, in.SecretRef, lockID)
		return mapWriteError(err, "a repository credential", in.Name)
	})
	if err != nil {
		return RepositoryCredential{}, err
	}
	if claimedBy != "" {
		return RepositoryCredential{}, locks.ClaimedError(claimedBy)
	}
	return cred, nil
}

const selectCredentialSQL = `
SELECT ` + credentialColumns + `, coalesce(r.lock_id::text, '') AS lock_id
FROM repository_credentials a LEFT JOIN RepositoryLockRepositoryCredential r ON r.repository_credential_id = a.id`

// GetRepositoryCredential returns the tenant's credential id.
func GetRepositoryCredential(ctx context.Context, q database.Querier, tenantID, id string) (RepositoryCredential, error) {
	if !validID(id) {
		return RepositoryCredential{}, credentialRefs.notFound(id)
	}
	var c RepositoryCredential
	err := q.GetContext(ctx, &c, selectCredentialSQL+` WHERE a.id = $1 AND a.cluster_user_id = $2`, id, tenantID)
	if database.IsNoRows(err) {
		return RepositoryCredential{}, credentialRefs.notFound(id)
	}
	return c, database.MapError(err)
}

// ListRepositoryCredentials returns one page of the tenant's credentials in
// creation order and the token of the next page ("" after the last).
func ListRepositoryCredentials(ctx context.Context, q database.Querier, tenantID string, pageSize int, pageToken string) ([]RepositoryCredential, string, error) {
	after, err := locks.DecodePageToken(locks.KindRepositoryCredentials, pageToken)
	if err != nil {
		return nil, "", err
	}
	out := []RepositoryCredential{}
	err = q.SelectContext(ctx, &out, selectCredentialSQL+`
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
		next = locks.EncodePageToken(locks.KindRepositoryCredentials, locks.Cursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return out, next, nil
}

// UpdateRepositoryCredential changes the fields of the patch that are not
// nil, moving the credential's lock as UpdateApplication does.
func UpdateRepositoryCredential(ctx context.Context, db *database.DB, tenantID, id string, p RepositoryCredentialPatch) (RepositoryCredential, error) {
	if !validID(id) {
		return RepositoryCredential{}, credentialRefs.notFound(id)
	}
	var (
		key    normalize.Key
		stored string
		err    error
	)
	if p.Name != nil {
		if err := ValidateName(*p.Name); err != nil {
			return RepositoryCredential{}, err
		}
	}
	if p.RepoURL != nil {
		if key, stored, err = credentialRepoURL(*p.RepoURL); err != nil {
			return RepositoryCredential{}, err
		}
	}
	if p.Username != nil {
		if err := validateUsername(*p.Username); err != nil {
			return RepositoryCredential{}, err
		}
	}
	if p.SecretRef != nil {
		if err := validateSecretRef(*p.SecretRef); err != nil {
			return RepositoryCredential{}, err
		}
	}
	var (
		cred      RepositoryCredential
		claimedBy string
	)
	err = db.WithTx(ctx, func(tx database.Tx) error {
		claimedBy = ""
		if err := lockRow(ctx, tx, credentialRefs, tenantID, id); err != nil {
			return err
		}
		var cur RepositoryCredential
		if err := tx.GetContext(ctx, &cur, selectCredentialSQL+` WHERE a.id = $1`, id); err != nil {
			return database.MapError(err)
		}
		next := cur
		setIf(&next.Name, p.Name)
		setIf(&next.Username, p.Username)
		setIf(&next.SecretRef, p.SecretRef)
		if p.RepoURL != nil {
			next.RepoURL, next.NormalizedURL = stored, string(key)
		}
		if next == cur {
			cred = cur
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
		err := tx.GetContext(ctx, &cred, `
			UPDATE repository_credentials a
			SET name = $3, repo_url = $4, normalized_url = $5, username = $6, secret_ref = $7, updated_at = now()
			WHERE a.id = $1 AND a.cluster_user_id = $2
			RETURNING `+credentialColumns+`, $8::text AS lock_id`,
			id, tenantID, next.Name, next.RepoURL, next.NormalizedURL, next.Username, next.SecretRef, next.LockID)
		if err != nil {
			return mapWriteError(err, "a repository credential", next.Name)
		}
		if next.LockID != cur.LockID {
			return moveReference(ctx, tx, credentialRefs, id, cur.LockID, next.LockID)
		}
		return nil
	})
	if err != nil {
		return RepositoryCredential{}, err
	}
	if claimedBy != "" {
		return RepositoryCredential{}, locks.ClaimedError(claimedBy)
	}
	return cred, nil
}

// DeleteRepositoryCredential deletes the tenant's credential id and releases
// its lock if it was the last reference, in one transaction.
func DeleteRepositoryCredential(ctx context.Context, db *database.DB, tenantID, id string) error {
	return deleteReferencing(ctx, db, credentialRefs, tenantID, id)
}
