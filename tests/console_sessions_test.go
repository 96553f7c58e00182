package tests

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/dbtest"
)

// browserOf is a cookie-keeping client of the console that does not follow
// redirects.
func browserOf(t *testing.T, tr http.RoundTripper) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// visit sends a console request and returns the status, the headers and
// the body.
func visit(t *testing.T, hc *http.Client, method, u string, form url.Values) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(b)
}

var csrfFieldRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs hc in to the console at base with token and returns the
// session's CSRF token.
func signIn(t *testing.T, hc *http.Client, base, token string) string {
	t.Helper()
	if st, h, _ := visit(t, hc, http.MethodPost, base+"/ui/login", url.Values{"token": {token}}); st != http.StatusSeeOther {
		t.Fatalf("sign in: %d %v", st, h)
	}
	st, _, body := visit(t, hc, http.MethodGet, base+"/ui/", nil)
	m := csrfFieldRE.FindStringSubmatch(body)
	if st != http.StatusOK || m == nil {
		t.Fatalf("overview after sign-in: %d", st)
	}
	return m[1]
}

// TestConsoleSessionRotation: a console session ends when the server
// restarts with another admin token (the old cookie neither opens pages
// nor posts forms), and `repolock console sessions revoke` ends the sessions of
// the new one.
func TestConsoleSessionRotation(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	s1 := startServerWith(t, serverOptions{DatabaseURL: dbURL})
	hc := browserOf(t, nil)
	csrf := signIn(t, hc, s1.URL, s1.AdminToken)
	if st, _, _ := visit(t, hc, http.MethodGet, s1.URL+"/ui/gc", nil); st != http.StatusOK {
		t.Fatalf("/ui/gc signed in: %d", st)
	}
	s1.stop(t)

	rotated := "rla_rotated_" + randomHex(16)
	s2 := startServerWith(t, serverOptions{DatabaseURL: dbURL, Env: []string{"ADMIN_TOKEN=" + rotated}})
	// The cookie jar is per host:port; carry the old cookie over.
	u1, _ := url.Parse(s1.URL)
	u2, _ := url.Parse(s2.URL)
	hc.Jar.SetCookies(u2, hc.Jar.Cookies(u1))
	st, h, _ := visit(t, hc, http.MethodGet, s2.URL+"/ui/gc", nil)
	if st != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/login") {
		t.Fatalf("old cookie after rotation: %d Location %q, want a redirect to sign in", st, h.Get("Location"))
	}
	if st, _, _ := visit(t, hc, http.MethodPost, s2.URL+"/ui/tenants", url.Values{"csrf": {csrf}, "name": {"mallory"}}); st != http.StatusForbidden {
		t.Fatalf("old cookie creating a tenant after rotation: %d, want 403", st)
	}
	if st, _, _ := visit(t, browserOf(t, nil), http.MethodPost, s2.URL+"/ui/login", url.Values{"token": {s1.AdminToken}}); st != http.StatusUnauthorized {
		t.Fatalf("the old token signing in: %d, want 401", st)
	}
	// The failure is counted on /metrics.
	if _, _, metrics := visit(t, browserOf(t, nil), http.MethodGet, s2.URL+"/metrics", nil); !strings.Contains(metrics, "\nrepolock_auth_failures_total 1\n") ||
		!strings.Contains(metrics, "\nrepolock_auth_refused_total 0\n") {
		t.Fatalf("auth metrics after one failed sign-in:\n%s", metrics)
	}

	// A session of the new token, ended by the CLI with the dead one of the
	// old token (its row stays until it expires or is revoked).
	hc2 := browserOf(t, nil)
	signIn(t, hc2, s2.URL, rotated)
	cmd := exec.CommandContext(t.Context(), binPath, "console", "sessions", "revoke")
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ended 2 console session(s)" {
		t.Fatalf("repolock console sessions revoke: %v %q", err, out)
	}
	if st, _, _ := visit(t, hc2, http.MethodGet, s2.URL+"/ui/gc", nil); st != http.StatusSeeOther {
		t.Fatalf("a session after revoke: %d, want 303", st)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir and returns their paths and the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "repolock test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// wantSecureCookie checks a console sign-in's Set-Cookie.
func wantSecureCookie(t *testing.T, h http.Header) {
	t.Helper()
	ck := h.Get("Set-Cookie")
	for _, want := range []string{"__Host-repolock_console=", "; Path=/", "; HttpOnly", "; Secure", "; SameSite=Strict"} {
		if !strings.Contains(ck, want) {
			t.Errorf("Set-Cookie %q lacks %q", ck, want)
		}
	}
	if strings.Contains(ck, "Domain=") {
		t.Errorf("Set-Cookie %q has a Domain (a __Host- cookie must not)", ck)
	}
	if got := h.Get("Strict-Transport-Security"); got != "max-age=31536000" {
		t.Errorf("Strict-Transport-Security %q", got)
	}
}

// TestServeTLS: with TLS_CERT_FILE/TLS_KEY_FILE the server speaks HTTPS;
// the console's cookie is then __Host-, Secure, and every answer carries
// HSTS.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, cert := selfSigned(t, t.TempDir())
	s := startServerWith(t, serverOptions{Env: []string{"TLS_CERT_FILE=" + certFile, "TLS_KEY_FILE=" + keyFile}})
	base := strings.Replace(s.URL, "http://", "https://", 1)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	hc := browserOf(t, tr)
	st, h, _ := visit(t, hc, http.MethodPost, base+"/ui/login", url.Values{"token": {s.AdminToken}})
	if st != http.StatusSeeOther {
		t.Fatalf("sign in over TLS: %d", st)
	}
	wantSecureCookie(t, h)
	if st, h, _ := visit(t, hc, http.MethodGet, base+"/healthz", nil); st != http.StatusOK || h.Get("Strict-Transport-Security") == "" {
		t.Fatalf("/healthz over TLS: %d HSTS %q", st, h.Get("Strict-Transport-Security"))
	}
	// Plain HTTP on the TLS port is refused.
	if st, _, _ := visit(t, browserOf(t, nil), http.MethodGet, s.URL+"/healthz", nil); st != http.StatusBadRequest {
		t.Fatalf("plain HTTP to the TLS listener: %d, want 400", st)
	}
}

// TestServeTrustForwardedProto: behind a TLS-terminating proxy
// (TRUST_FORWARDED_PROTO=1), "X-Forwarded-Proto: https" gets the secure
// cookie and HSTS; without the setting the header is ignored.
func TestServeTrustForwardedProto(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	for _, trusted := range []bool{true, false} {
		env := []string{}
		if trusted {
			env = append(env, "TRUST_FORWARDED_PROTO=1")
		}
		s := startServerWith(t, serverOptions{DatabaseURL: dbURL, Env: env})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/ui/login",
			strings.NewReader(url.Values{"token": {s.AdminToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-Proto", "https")
		res, err := browserOf(t, nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if trusted {
			wantSecureCookie(t, res.Header)
		} else if ck := res.Header.Get("Set-Cookie"); strings.Contains(ck, "Secure") || strings.HasPrefix(ck, "__Host-") ||
			res.Header.Get("Strict-Transport-Security") != "" {
			t.Errorf("untrusted X-Forwarded-Proto honoured: Set-Cookie %q", ck)
		}
		s.stop(t)
	}
}

// TestServeAdminTokenRules: a short admin token stops serve (unless
// ALLOW_WEAK_ADMIN_TOKEN), and an unset one is generated into
// ADMIN_TOKEN_FILE, which the logs name but never the token.
func TestServeAdminTokenRules(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t, false)
	cmd := exec.CommandContext(t.Context(), binPath, "serve", "--listen", "127.0.0.1:0")
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "ADMIN_TOKEN=x")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "the admin token is 1 bytes; at least 32 are required") {
		t.Fatalf("ADMIN_TOKEN=x: %v %q, want exit 2 and the rule", err, out)
	}

	weak := startServerWith(t, serverOptions{DatabaseURL: dbURL, Env: []string{"ADMIN_TOKEN=dev", "ALLOW_WEAK_ADMIN_TOKEN=1"}})
	weak.AdminToken = "dev"
	if _, err := weak.admin(t).ListUsersPage(t.Context(), client.ListOptions{}); err != nil {
		t.Fatalf("a weak token with ALLOW_WEAK_ADMIN_TOKEN=1: %v", err)
	}
	weak.stop(t)

	file := filepath.Join(t.TempDir(), "admin-token")
	s := startServerWith(t, serverOptions{DatabaseURL: dbURL, Env: []string{"ADMIN_TOKEN=", "ADMIN_TOKEN_FILE=" + file}})
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode: %v %v", fi.Mode(), err)
	}
	s.AdminToken = strings.TrimSpace(string(b))
	if len(s.AdminToken) < 32 {
		t.Fatalf("generated token %d bytes", len(s.AdminToken))
	}
	if _, err := s.admin(t).ListUsersPage(t.Context(), client.ListOptions{}); err != nil {
		t.Fatalf("the generated token: %v", err)
	}
	s.waitForLog(t, "the token file's path", func(rec map[string]any) bool { return rec["admin_token_file"] == file })
	if logs := s.logs.String(); strings.Contains(logs, s.AdminToken) {
		t.Fatal("the generated admin token is in the logs")
	}
}
