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

// HashToken returns the SHA-256 of a token, as stored.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Create creates a tenant and its first token. The token is returned once and
// never stored.
func Create(ctx context.Context, db *database.DB, name, displayName string) (_ Tenant, _ string, err error) {
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
	err = db.WithTx(ctx, func(tx database.Tx) error {
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
func IssueToken(ctx context.Context, q database.Querier, name string) (_ string, err error) {
	defer repolock.WrapOp(&err, "tenants.IssueToken")
	u, err := GetByName(ctx, q, name)
	if err != nil {
		return "", err
	}
	token, err := issueToken(ctx, q, u.ID)
	return token, database.MapError(err)
}

// GetByName returns the tenant with the given name.
func GetByName(ctx context.Context, q database.Querier, name string) (_ Tenant, err error) {
	defer repolock.WrapOp(&err, "tenants.GetByName")
	var u Tenant
	err = q.GetContext(ctx, &u, `SELECT id, name, display_name, created_at FROM cluster_users WHERE name = $1`, name)
	if err != nil {
		if database.IsNoRows(err) {
			return Tenant{}, repolock.Errorf(repolock.ENotFound, "user %q not found", name)
		}
		return Tenant{}, database.MapError(err)
	}
	return u, nil
}

// List returns every tenant ordered by name.
func List(ctx context.Context, q database.Querier) (_ []Tenant, err error) {
	defer repolock.WrapOp(&err, "tenants.List")
	us := []Tenant{}
	err = q.SelectContext(ctx, &us, `SELECT id, name, display_name, created_at FROM cluster_users ORDER BY name`)
	return us, database.MapError(err)
}

// ListPage returns one page of the admin list of tenants, ordered by name:
// at most pageSize tenants after the position of pageToken ("" for the
// first page), and the token of the next page ("" after the last).
func ListPage(ctx context.Context, q database.Querier, pageSize int, pageToken string) (_ []Tenant, _ string, err error) {
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
	err = q.SelectContext(ctx, &us, `SELECT id, name, display_name, created_at FROM cluster_users
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

// Authenticate returns the tenant that owns a valid, unrevoked token. The
// lookup is by hash, so the database never compares secrets and the time it
// takes does not depend on how much of a guess was right.
func Authenticate(ctx context.Context, q database.Querier, token string) (_ Tenant, err error) {
	defer repolock.WrapOp(&err, "tenants.Authenticate")
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 200 {
		return Tenant{}, repolock.Errorf(repolock.EUnauthenticated, "invalid or revoked token")
	}
	var u Tenant
	if db, ok := q.(*database.DB); ok {
		err = db.GetPrepared(ctx, &u, authenticateSQL, HashToken(token))
	} else {
		err = q.GetContext(ctx, &u, authenticateSQL, HashToken(token))
	}
	if err != nil {
		if database.IsNoRows(err) {
			return Tenant{}, repolock.Errorf(repolock.EUnauthenticated, "invalid or revoked token")
		}
		return Tenant{}, database.MapError(err)
	}
	return u, nil
}

// RevokeTokens revokes every token of the named tenant and returns how many
// were revoked.
func RevokeTokens(ctx context.Context, q database.Querier, name string) (_ int64, err error) {
	defer repolock.WrapOp(&err, "tenants.RevokeTokens")
	u, err := GetByName(ctx, q, name)
	if err != nil {
		return 0, err
	}
	res, err := q.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE cluster_user_id = $1 AND revoked_at IS NULL`, u.ID)
	if err != nil {
		return 0, database.MapError(err)
	}
	return res.RowsAffected()
}

// Exists reports whether a tenant with the given id exists. An id that is not
// a UUID names no tenant.
func Exists(ctx context.Context, q database.Querier, id string) (_ bool, err error) {
	defer repolock.WrapOp(&err, "tenants.Exists")
	if uuid.Validate(id) != nil {
		return false, nil
	}
	var ok bool
	err = q.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM cluster_users WHERE id = $1)`, id)
	return ok, database.MapError(err)
}
