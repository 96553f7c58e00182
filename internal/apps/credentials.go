package apps

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
)

// RepositoryCredential says how to authenticate to a Git repository. It never
// holds the secret itself: SecretRef names where the secret lives (a
// Kubernetes Secret, a vault path...).
type RepositoryCredential struct {
	ID       string `db:"id" json:"id"`
	TenantID string `db:"cluster_user_id" json:"-"`
	Name     string `db:"name" json:"name"`
	// RepoURL is the URL as given, without what can be a secret (any user
	// info of http(s), a password, a token-shaped user); an ssh login name
	// is kept (normalize.DisplayURL).
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
		Message: "repository credentials never carry secrets: the request has a \"" + field + "\" field; remove it, store the secret in your secret store " +
			"and send its location in secret_ref (for example \"k8s://namespace/secret-name\" or \"vault://path/to/secret\")",
		Details: map[string]any{"field": field},
	}
}

// ErrSecretIn is the error for a credential field that holds a secret
// (what was detected: an access token of a known kind, a private key, a
// user:password pair, a URL with a password) instead of a user name or
// the secret's location: 400 secret_in_field, with the field in details.
// The value is never echoed.
func ErrSecretIn(field, detected string) error {
	hint := "store the secret in your secret store and send its location in secret_ref " +
		"(for example \"k8s://namespace/secret-name\" or \"vault://path/to/secret\")"
	return &repolock.Error{
		Code:    repolock.ESecretInField,
		Message: field + " holds " + detected + ", not a " + fieldMeaning[field] + ": " + hint,
		Details: map[string]any{"field": field},
	}
}

// fieldMeaning is what each credential field is for.
var fieldMeaning = map[string]string{
	"secret_ref": "reference", "username": "user name", "repo_url": "repository URL without credentials",
}

// ErrSecretInRef is ErrSecretIn for secret_ref.
func ErrSecretInRef(detected string) error { return ErrSecretIn("secret_ref", detected) }

// secretIn returns what secret value v holds, if any: an access token of a
// known shape (normalize.SecretShaped) as a whole or as one of its parts
// (split at '/', ':', '@', '=', '?', '&' and '#'), or a URL with user
// info that is a password or a token.
func secretIn(v string) (string, bool) {
	if kind, ok := normalize.SecretShaped(v); ok {
		return kind, true
	}
	if user, ok := urlUserInfo(v); ok {
		if strings.IndexByte(user, ':') >= 0 {
			return "a URL with a password", true
		}
		if kind, ok := normalize.SecretShaped(user); ok {
			return "a URL with " + kind + " as its user", true
		}
	}
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune("/:@=?&#", r) }) {
		if kind, ok := normalize.SecretShaped(part); ok {
			return kind, true
		}
	}
	return "", false
}

func validateSecretRef(ref string) error {
	switch {
	case ref == "":
		return repolock.Errorf(repolock.EInvalid, "secret_ref is required: the location of the secret in your secret store")
	case len(ref) > MaxSecretRefLength:
		return repolock.Errorf(repolock.EInvalid, "secret_ref must be at most %d bytes", MaxSecretRefLength)
	case strings.Contains(ref, "-----BEGIN"):
		return ErrSecretInRef("a PEM private key")
	case strings.IndexFunc(ref, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0:
		return repolock.Errorf(repolock.EInvalid, "secret_ref must be a reference without whitespace, not a secret")
	}
	if kind, ok := secretIn(ref); ok {
		return ErrSecretInRef(kind)
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
	// A Git user name is never a secret, but a token is a valid HTTPS
	// user name, and "user:password" is the pair itself.
	if strings.Contains(u, "-----BEGIN") {
		return ErrSecretIn("username", "a PEM private key")
	}
	if strings.IndexByte(u, ':') >= 0 {
		return ErrSecretIn("username", "a user:password pair")
	}
	if kind, ok := secretIn(u); ok {
		return ErrSecretIn("username", kind)
	}
	return nil
}

// urlUserInfo returns the user info of a scheme URL
// ("https://user:secret@host/..." gives "user:secret").
func urlUserInfo(raw string) (string, bool) {
	s := strings.TrimSpace(raw)
	i := strings.Index(s, "://")
	if i < 0 {
		return "", false
	}
	rest := s[i+3:]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

// credentialRepoURL is repoURL that also refuses a password, or a token as
// the user, in the URL (400 secret_in_field): in a credential it is a raw
// secret. (An application's repo_url is stored without them instead.)
func credentialRepoURL(n *normalize.Normalizer, raw string) (normalize.Key, string, error) {
	key, stored, err := repoURL(n, raw)
	if err != nil {
		return "", "", err
	}
	if user, ok := urlUserInfo(raw); ok {
		detected := ""
		if strings.IndexByte(user, ':') >= 0 {
			detected = "a password"
		} else if kind, ok := normalize.SecretShaped(user); ok {
			detected = kind + " as its user"
		}
		if detected != "" {
			return "", "", &repolock.Error{
				Code: repolock.ESecretInField,
				Message: "repo_url must not contain a password or token (it holds " + detected + "): pass the user name in username, " +
					"store the secret in your secret store and pass its location in secret_ref",
				Details: map[string]any{"field": "repo_url"},
			}
		}
	}
	return key, stored, nil
}

// credentials is the Repository Credential kind of row.
var credentials = newKind(kind{
	noun: "repository credential", what: "a repository credential", pageKind: pagetoken.KindRepositoryCredentials,
	table: "repository_credentials", refTable: "RepositoryLockRepositoryCredential", refColumn: "repository_credential_id",
	ref:     locks.RefCredential,
	own:     []column{{"username", validateUsername}, {"secret_ref", validateSecretRef}},
	repoURL: credentialRepoURL,
})

func (c RepositoryCredential) fields() fields {
	return fields{
		id: c.ID, createdAt: c.CreatedAt,
		tenantID: c.TenantID, name: c.Name, repoURL: c.RepoURL, normalizedURL: c.NormalizedURL,
		own:    []string{c.Username, c.SecretRef},
		lockID: c.LockID,
	}
}

// CreateRepositoryCredential creates a credential of the tenant and
// references the tenant's lock on its repository, acquiring it if needed,
// with the same fast path as CreateApplication.
func (s *Service) CreateRepositoryCredential(ctx context.Context, tenantID string, in NewRepositoryCredential) (_ RepositoryCredential, err error) {
	defer repolock.WrapOp(&err, "apps.CreateRepositoryCredential")
	return create(ctx, s, credentials, s.createCredential, tenantID,
		change{name: &in.Name, repoURL: &in.RepoURL, own: []*string{&in.Username, &in.SecretRef}})
}

// GetRepositoryCredential returns the tenant's credential id.
func (s *Service) GetRepositoryCredential(ctx context.Context, tenantID, id string) (_ RepositoryCredential, err error) {
	defer repolock.WrapOp(&err, "apps.GetRepositoryCredential")
	return get[RepositoryCredential](ctx, s, credentials, tenantID, id)
}

// ListRepositoryCredentials returns one page of the tenant's credentials in
// creation order and the token of the next page ("" after the last).
func (s *Service) ListRepositoryCredentials(ctx context.Context, tenantID string, pageSize int, pageToken string) (_ []RepositoryCredential, _ string, err error) {
	defer repolock.WrapOp(&err, "apps.ListRepositoryCredentials")
	return list[RepositoryCredential](ctx, s, credentials, tenantID, pageSize, pageToken)
}

// UpdateRepositoryCredential changes the fields of the patch that are not
// nil, moving the credential's lock as UpdateApplication does.
func (s *Service) UpdateRepositoryCredential(ctx context.Context, tenantID, id string, p RepositoryCredentialPatch) (_ RepositoryCredential, err error) {
	defer repolock.WrapOp(&err, "apps.UpdateRepositoryCredential")
	return update[RepositoryCredential](ctx, s, credentials, tenantID, id,
		change{name: p.Name, repoURL: p.RepoURL, own: []*string{p.Username, p.SecretRef}})
}

// DeleteRepositoryCredential deletes the tenant's credential id and releases
// its lock if it was the last reference, in one transaction.
func (s *Service) DeleteRepositoryCredential(ctx context.Context, tenantID, id string) (err error) {
	defer repolock.WrapOp(&err, "apps.DeleteRepositoryCredential")
	return s.remove(ctx, credentials, tenantID, id)
}
