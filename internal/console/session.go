package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"time"

	"github.com/repolock/repolock/internal/database"
)

// CookieName is the session cookie. With the __Host- prefix browsers only
// accept it when Secure, so it is used over TLS only (see cookieName).
const (
	CookieName       = "repolock_console"
	secureCookieName = "__Host-repolock_console"
)

// session is a signed-in browser.
type session struct {
	idHash    []byte
	CSRF      string
	ExpiresAt time.Time
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("console: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func hashID(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}

// tokenKey is the key a session's binding to the admin token is made with
// (a digest of the token, so the token itself is never a MAC key).
func tokenKey(adminToken string) []byte {
	sum := sha256.Sum256([]byte("repolock console session binding\x00" + adminToken))
	return sum[:]
}

// bindingOf is the token_mac of session id under this process's admin
// token: HMAC-SHA-256 of the id. A process with another admin token
// computes another one, so its sessions are not this process's.
func (c *Console) bindingOf(id string) []byte {
	m := hmac.New(sha256.New, c.tokenKey)
	m.Write([]byte(id))
	return m.Sum(nil)
}

// equalSecret compares two secrets in constant time (over SHA-256 digests,
// so lengths do not leak either).
func equalSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// isTLS reports whether the browser reached us over TLS: directly, or
// through a proxy that says so (only when Config.TrustForwardedProto).
func (c *Console) isTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return c.cfg.TrustForwardedProto && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) cookieName(r *http.Request) string {
	if c.isTLS(r) {
		return secureCookieName
	}
	return CookieName
}

// createSession stores a new session and returns its id (the cookie value).
// Expired sessions are deleted on the way.
func (c *Console) createSession(ctx context.Context) (string, session, error) {
	now := c.now()
	id := randomString(32)
	s := session{idHash: hashID(id), CSRF: randomString(32), ExpiresAt: now.Add(c.cfg.SessionTTL)}
	err := c.cfg.DB.WithTx(ctx, func(tx database.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires_at <= $1`, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO console_sessions (id_hash, csrf_token, created_at, expires_at, token_mac)
			VALUES ($1, $2, $3, $4, $5)`, s.idHash, s.CSRF, now, s.ExpiresAt, c.bindingOf(id))
		return err
	})
	if err != nil {
		return "", session{}, database.MapError(err)
	}
	return id, s, nil
}

// sessionOf returns the request's live session, or nil: one that has not
// expired, and was opened with this process's admin token.
func (c *Console) sessionOf(r *http.Request) (*session, error) {
	ck, err := r.Cookie(c.cookieName(r))
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return nil, nil
	}
	var s session
	err = c.cfg.DB.GetContext(r.Context(), &s.CSRF, `SELECT csrf_token FROM console_sessions
		WHERE id_hash = $1 AND expires_at > $2 AND token_mac = $3`, hashID(ck.Value), c.now(), c.bindingOf(ck.Value))
	if database.IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, database.MapError(err)
	}
	s.idHash = hashID(ck.Value)
	return &s, nil
}

func (c *Console) deleteSession(ctx context.Context, s *session) error {
	_, err := c.cfg.DB.ExecContext(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, s.idHash)
	return database.MapError(err)
}

func (c *Console) setSessionCookie(w http.ResponseWriter, r *http.Request, id string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name:     c.cookieName(r),
		Value:    id,
		Path:     "/",
		Expires:  expires,
		MaxAge:   int(c.cfg.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   c.isTLS(r),
		SameSite: http.SameSiteStrictMode,
	})
}

func (c *Console) clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: c.cookieName(r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: c.isTLS(r), SameSite: http.SameSiteStrictMode,
	})
}

// checkCSRF compares the form's csrf field with the session's token.
func checkCSRF(r *http.Request, s *session) bool {
	got := r.PostFormValue("csrf")
	return got != "" && equalSecret(got, s.CSRF)
}

// RevokeSessions ends every console session, of every replica: what `api
// console sessions revoke` runs. It returns how many there were.
func RevokeSessions(ctx context.Context, db *database.DB) (int64, error) {
	res, err := db.ExecContext(ctx, `DELETE FROM console_sessions`)
	if err != nil {
		return 0, database.MapError(err)
	}
	n, err := res.RowsAffected()
	return n, database.MapError(err)
}
