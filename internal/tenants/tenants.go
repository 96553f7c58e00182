// Package tenants manages tenants (the design's "cluster users", table
// cluster_users) and their API tokens.
// Tokens are random, shown once, and stored only as SHA-256 hashes.
package tenants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/pagetoken"
)

// Tenant is one customer of the service (a row of cluster_users).
type Tenant struct {
	ID          string    `db:"id" json:"id"`
	Name        string    `db:"name" json:"name"`
	DisplayName string    `db:"display_name" json:"display_name"`
	CreatedAt   time.Time `db:"created_at" json:"created_at"`
}

// TokenPrefix starts every tenant token, so leaked tokens are easy to spot
// with secret scanners.
const TokenPrefix = "rlt_"

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// ValidateName checks a tenant name: 1-63 characters of [a-z0-9-], starting
// and ending with a letter or digit (a DNS label).
func ValidateName(name string) error {
	if len(name) < 1 || len(name) > 63 || !nameRE.MatchString(name) {
		return repolock.Errorf(repolock.EInvalid,
			"user name must be 1-63 characters of lowercase letters, digits and '-', starting and ending with a letter or digit")
	}
	return nil
}

// NewToken returns a fresh random token and its hash.
func NewToken() (token string, hash []byte) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("tenants: crypto/rand failed: " + err.Error())
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token)
}

// Service is the tenants and their API tokens. cmd/api builds one with New.
// Its methods run on the pool; none can run inside a caller's transaction.
type Service struct {
	db    *database.DB
	cache *Cache
}

// New returns the service on db. cache, when not nil, is the process's
// token cache that Authenticate goes through (api serve passes its Cache;
// commands that authenticate nothing pass nil, and then every
// Authenticate asks the database). db is required: a nil one is a wiring
// error and panics at start-up.
func New(db *database.DB, cache *Cache) *Service {
	if db == nil {
		panic("tenants.New: a pool is required")
	}
	return &Service{db: db, cache: cache}
}

// Flush drops every token the service's cache holds (none without a
// cache): at once in this process after a change of tokens or tenants
// made here; other processes learn of it through the notification.
func (s *Service) Flush() { s.cache.Flush() }

// HashToken returns the SHA-256 of a token, as stored.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Create creates a tenant and its first token. The token is returned once and
// never stored.
func (s *Service) Create(ctx context.Context, name, displayName string) (_ Tenant, _ string, err error) {
	defer repolock.WrapOp(&err, "tenants.Create")
	if err := ValidateName(name); err != nil {
		return Tenant{}, "", err
	}
	if err := repolock.ValidateText("display_name", displayName, repolock.SingleLine); err != nil {
		return Tenant{}, "", err
	}
	if len(displayName) > 200 {
		return Tenant{}, "", repolock.Errorf(repolock.EInvalid, "display_name must be at most 200 characters")
	}
	var (
		u     Tenant
		token string
	)
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		err := tx.GetContext(ctx, &u, `
			INSERT INTO cluster_users (name, display_name) VALUES ($1, $2)
			RETURNING id, name, display_name, created_at`, name, displayName)
		if err != nil {
			if database.PQCode(err) == database.CodeUniqueViolation {
				return repolock.Wrap(repolock.EAlreadyExists, err, "a user named %q already exists", name)
			}
			return err
		}
		token, err = issueToken(ctx, tx, u.ID)
		return err
	})
	if err != nil {
		return Tenant{}, "", err
	}
	return u, token, nil
}

func issueToken(ctx context.Context, q database.Querier, tenantID string) (string, error) {
	token, hash := NewToken()
	_, err := q.ExecContext(ctx, `INSERT INTO api_tokens (cluster_user_id, token_hash) VALUES ($1, $2)`, tenantID, hash)
	return token, err
}

// IssueToken gives an existing tenant one more token.
func (s *Service) IssueToken(ctx context.Context, name string) (_ string, err error) {
	defer repolock.WrapOp(&err, "tenants.IssueToken")
	u, err := s.GetByName(ctx, name)
	if err != nil {
		return "", err
	}
	token, err := issueToken(ctx, s.db, u.ID)
	return token, database.MapError(err)
}

// GetByName returns the tenant with the given name.
func (s *Service) GetByName(ctx context.Context, name string) (_ Tenant, err error) {
	defer repolock.WrapOp(&err, "tenants.GetByName")
	var u Tenant
	err = s.db.GetContext(ctx, &u, `SELECT id, name, display_name, created_at FROM cluster_users WHERE name = $1`, name)
	if err != nil {
		if database.IsNoRows(err) {
			return Tenant{}, repolock.Errorf(repolock.ENotFound, "user %q not found", name)
		}
		return Tenant{}, database.MapError(err)
	}
	return u, nil
}

// List returns every tenant ordered by name.
func (s *Service) List(ctx context.Context) (_ []Tenant, err error) {
	defer repolock.WrapOp(&err, "tenants.List")
	us := []Tenant{}
	err = s.db.SelectContext(ctx, &us, `SELECT id, name, display_name, created_at FROM cluster_users ORDER BY name`)
	return us, database.MapError(err)
}

// ListPage returns one page of the admin list of tenants, ordered by name:
// at most pageSize tenants after the position of pageToken ("" for the
// first page), and the token of the next page ("" after the last).
func (s *Service) ListPage(ctx context.Context, pageSize int, pageToken string) (_ []Tenant, _ string, err error) {
	defer repolock.WrapOp(&err, "tenants.ListPage")
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be positive")
	}
	cur, _, err := pagetoken.Decode[pagetoken.Name](pagetoken.KindTenants, "", pageToken)
	if err != nil {
		return nil, "", err
	}
	us := []Tenant{}
	// Served by the unique index on cluster_users (name).
	err = s.db.SelectContext(ctx, &us, `SELECT id, name, display_name, created_at FROM cluster_users
		WHERE name > $1 ORDER BY name LIMIT $2`, cur.Name, pageSize+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	us, next := pagetoken.Trim(us, pageSize, func(last Tenant) string {
		return pagetoken.Encode(pagetoken.KindTenants, "", pagetoken.Name{Name: last.Name})
	})
	return us, next, nil
}

const authenticateSQL = `
	SELECT u.id, u.name, u.display_name, u.created_at
	FROM api_tokens t JOIN cluster_users u ON u.id = t.cluster_user_id
	WHERE t.token_hash = $1 AND t.revoked_at IS NULL`

// Authenticate returns the tenant that owns a valid, unrevoked token,
// through the service's token cache when it has one. The lookup is by
// hash, so the database never compares secrets and the time it takes does
// not depend on how much of a guess was right.
func (s *Service) Authenticate(ctx context.Context, token string) (_ Tenant, err error) {
	defer repolock.WrapOp(&err, "tenants.Authenticate")
	if s.cache != nil {
		return s.cache.Authenticate(ctx, s.db, token)
	}
	return authenticate(ctx, s.db, token)
}

// authenticate asks the database, as a prepared statement on the pool.
func authenticate(ctx context.Context, db *database.DB, token string) (Tenant, error) {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 200 {
		return Tenant{}, repolock.Errorf(repolock.EUnauthenticated, "invalid or revoked token")
	}
	var u Tenant
	if err := db.GetPrepared(ctx, &u, authenticateSQL, HashToken(token)); err != nil {
		if database.IsNoRows(err) {
			return Tenant{}, repolock.Errorf(repolock.EUnauthenticated, "invalid or revoked token")
		}
		return Tenant{}, database.MapError(err)
	}
	return u, nil
}

// RevokeTokens revokes every token of the named tenant and returns how many
// were revoked.
func (s *Service) RevokeTokens(ctx context.Context, name string) (_ int64, err error) {
	defer repolock.WrapOp(&err, "tenants.RevokeTokens")
	u, err := s.GetByName(ctx, name)
	if err != nil {
		return 0, err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE cluster_user_id = $1 AND revoked_at IS NULL`, u.ID)
	if err != nil {
		return 0, database.MapError(err)
	}
	s.Flush() // at once here; other processes through the notification
	return res.RowsAffected()
}

// Exists reports whether a tenant with the given id exists. An id that is not
// a UUID names no tenant.
func (s *Service) Exists(ctx context.Context, id string) (_ bool, err error) {
	defer repolock.WrapOp(&err, "tenants.Exists")
	if uuid.Validate(id) != nil {
		return false, nil
	}
	var ok bool
	err = s.db.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM cluster_users WHERE id = $1)`, id)
	return ok, database.MapError(err)
}
