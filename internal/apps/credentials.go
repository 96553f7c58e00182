package apps

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/repolock/repolock"
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
		Message: "repository credentials never carry secrets: the request has a \"" + field + "\" field; remove it, store the secret in your secret store " +
			"and send its location in secret_ref (for example \"k8s://namespace/secret-name\" or \"vault://path/to/secret\")",
		Details: map[string]any{"field": field},
	}
}

// ErrSecretInRef is the error for a secret_ref that holds a secret itself
// (what was detected: an access token of a known kind, or a private key)
// instead of the secret's location. The value is never echoed.
func ErrSecretInRef(detected string) error {
	return &repolock.Error{
		Code: repolock.EInvalid,
		Message: "secret_ref holds " + detected + ", not a reference: store the secret in your secret store " +
			"and send its location in secret_ref instead (for example \"k8s://namespace/secret-name\" or \"vault://path/to/secret\")",
		Details: map[string]any{"field": "secret_ref"},
	}
}

// tokenPrefixes start well-known access tokens (mapped to what they are);
// a secret_ref that starts with one is a token pasted into the wrong field.
var tokenPrefixes = []struct{ prefix, kind string }{
	{"ghp_", "a GitHub personal access token"}, {"gho_", "a GitHub OAuth token"}, {"ghu_", "a GitHub user-to-server token"},
	{"ghs_", "a GitHub server-to-server token"}, {"ghr_", "a GitHub refresh token"}, {"github_pat_", "a GitHub fine-grained access token"},
	{"glpat-", "a GitLab personal access token"}, {"xoxb-", "a Slack bot token"}, {"xoxp-", "a Slack user token"},
	{"AKIA", "an AWS access key ID"},
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
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(ref, p.prefix) {
			return ErrSecretInRef(p.kind)
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
func credentialRepoURL(n *normalize.Normalizer, raw string) (normalize.Key, string, error) {
	key, stored, err := repoURL(n, raw)
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

// credentials is the Repository Credential kind of row.
var credentials = newKind(kind{
	noun: "repository credential", what: "a repository credential", pageKind: pagetoken.KindRepositoryCredentials,
	table: "repository_credentials", refTable: "RepositoryLockRepositoryCredential", refColumn: "repository_credential_id",
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
