package database

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
)

// Running beyond one database server: several hosts in one URL (failover to
// whichever is the primary) and a PgBouncer in transaction pooling mode in
// front of Postgres. docs/operations.md describes both set-ups.

// ConnString returns the lib/pq connection string for a database URL.
//
// lib/pq (1.11 and later) accepts several hosts as comma-separated host and
// port lists, tried in order, with target_session_attrs (read-write, primary,
// ...) selecting the one to use; but its URL parser only takes them as query
// parameters (postgres:///db?host=a,b&port=5432,5433). ConnString also
// accepts libpq's URL form with the hosts in the authority,
//
//	postgres://user:pass@db1:5432,db2:5433/repolock?target_session_attrs=read-write
//
// and turns it into the equivalent key=value string. Every other URL, and
// every key=value string, is returned unchanged.
func ConnString(rawURL string) (string, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return rawURL, nil
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hostlist := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hostlist = authority[:i], authority[i+1:]
	}
	if !strings.Contains(hostlist, ",") {
		return rawURL, nil
	}
	kv := map[string]string{}
	var hosts, ports []string
	anyPort := false
	for _, hp := range strings.Split(hostlist, ",") {
		host, port := hp, ""
		if h, p, err := net.SplitHostPort(hp); err == nil {
			host, port = h, p
			anyPort = true
		} else if strings.HasPrefix(hp, "[") && strings.HasSuffix(hp, "]") {
			host = hp[1 : len(hp)-1]
		}
		if host == "" {
			return "", fmt.Errorf("database URL: empty host in host list %q", hostlist)
		}
		host, err := url.PathUnescape(host)
		if err != nil {
			return "", fmt.Errorf("database URL: host %q: %w", hp, err)
		}
		hosts = append(hosts, host)
		ports = append(ports, port)
	}
	kv["host"] = strings.Join(hosts, ",")
	if anyPort {
		kv["port"] = strings.Join(ports, ",") // an empty item is the default, 5432
	}
	if userinfo != "" {
		u, err := url.Parse("postgres://" + userinfo + "@h")
		if err != nil {
			return "", fmt.Errorf("database URL: user information: %w", err)
		}
		kv["user"] = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			kv["password"] = pw
		}
	}
	path, query, _ := strings.Cut(tail, "?")
	if db := strings.TrimPrefix(path, "/"); db != "" {
		name, err := url.PathUnescape(db)
		if err != nil {
			return "", fmt.Errorf("database URL: database name: %w", err)
		}
		kv["dbname"] = name
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("database URL: parameters: %w", err)
	}
	for k := range q {
		kv[k] = q.Get(k)
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	esc := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"='"+esc.Replace(kv[k])+"'")
	}
	return strings.Join(parts, " "), nil
}

// ForTransactionPooling returns the connection URL with what a PgBouncer in
// transaction pooling mode needs from lib/pq: binary_parameters=yes, so that
// a statement with arguments is sent as one Parse/Bind/Execute exchange. lib/pq
// otherwise parses an unnamed statement in one exchange and binds it in a
// second, and between the two PgBouncer may hand the server connection to
// another client ("unnamed prepared statement does not exist"). Use it
// together with PoolConfig.NoPreparedStatements.
func ForTransactionPooling(rawURL string) string {
	if strings.Contains(rawURL, "binary_parameters=") {
		return rawURL
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if ok && (scheme == "postgres" || scheme == "postgresql") {
		if strings.Contains(rawURL, "?") {
			return rawURL + "&binary_parameters=yes"
		}
		return rawURL + "?binary_parameters=yes"
	}
	if strings.TrimSpace(rawURL) == "" {
		return "binary_parameters=yes"
	}
	return rawURL + " binary_parameters=yes"
}
