// Command benchsql is a helper of scripts/bench-http.sh (make bench-http).
// It depends on no package of the repository: it learns what the api binary
// sends to Postgres by watching it.
//
//	benchsql freeport
//	    prints a free 127.0.0.1:PORT.
//	benchsql capture -bin bin/repolock -database-url URL -admin-token T -token T -out DIR
//	    starts the binary (default settings) with its DATABASE_URL pointed at a
//	    Postgres wire-protocol proxy, sends POST /v1/locks/acquire with a fresh
//	    URL, and records every statement the binary executes during that
//	    request (Bind of a prepared or unnamed statement, or a simple Query),
//	    with its parameter values. It repeats until two requests in a row
//	    executed the same statements (background work such as the GC loop
//	    cannot slip in), then writes DIR/s.sql, a pgbench script of exactly
//	    those statements with $n replaced by pgbench variables, and
//	    DIR/s.defines, one NAME=VALUE per line for pgbench -D. The parameter
//	    equal to the normalized URL becomes :k, computed per transaction by
//	    the script's caller (see scripts/bench-http/key.sql); every other
//	    parameter keeps the value the binary sent (the tenant's token hash,
//	    the normalizer version, the tenant id).
//	benchsql cpusplit [-us N] BINARY PROFILE
//	    prints the samples of a CPU profile of the binary (BENCH_PROFILE)
//	    by category: routing and middleware, auth, JSON, logging, metrics,
//	    rate limit, database driver, handler, background loops, net/http,
//	    the Go runtime (cpusplit.go says how a sample is attributed); with
//	    -us, the binary's CPU per operation, also in µs per operation.
//
// Because the pgbench script is generated from what the binary sends on
// every run, it cannot drift from the code.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchsql freeport | capture [flags] | cpusplit [-us N] BINARY PROFILE")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "freeport":
		var addr string
		addr, err = freePort()
		if err == nil {
			fmt.Println(addr)
		}
	case "capture":
		err = runCapture(os.Args[2:])
	case "cpusplit":
		err = runCPUSplit(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsql:", err)
		os.Exit(1)
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// param is one Bind parameter: nil is SQL NULL; Binary marks format 1.
type param struct {
	Value  []byte
	Binary bool
}

// text is the parameter in the text format pgbench sends. lib/pq sends a
// []byte either as bytea text (\x...) or in binary; binary becomes \x...
func (p param) text() string {
	if p.Binary {
		return `\x` + hex.EncodeToString(p.Value)
	}
	return string(p.Value)
}

// stmt is one executed statement.
type stmt struct {
	SQL    string
	Params []param
}

// recorder collects the statements executed while it is on.
type recorder struct {
	mu    sync.Mutex
	on    bool
	stmts []stmt
}

func (r *recorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.stmts = true, nil
}

func (r *recorder) stop() []stmt {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.stmts
}

func (r *recorder) add(s stmt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.stmts = append(r.stmts, s)
	}
}

// proxy forwards Postgres connections to upstream and decodes what the
// client sends.
type proxy struct {
	ln       net.Listener
	upstream string
	rec      *recorder
}

// startProxy listens on a free 127.0.0.1 port and forwards every connection
// to upstream (host:port; port 5432 when absent).
func startProxy(upstream string) (*proxy, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		upstream = net.JoinHostPort(upstream, "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, rec: &recorder{}}
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102
)

func (p *proxy) handle(client net.Conn) {
	defer client.Close()
	// Startup: SSL and GSS encryption requests are answered "no" here (the
	// proxy must see plain text); then the startup packet is forwarded.
	var startup []byte
	for {
		msg, err := readStartup(client)
		if err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == sslRequestCode || code == gssEncRequestCode {
			if _, err := client.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		startup = msg
		break
	}
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	if _, err := server.Write(startup); err != nil {
		return
	}
	if binary.BigEndian.Uint32(startup[4:8]) == cancelRequestCode {
		return
	}
	go func() {
		_, _ = io.Copy(client, server)
		client.Close()
	}()
	named := map[string]string{} // statement name -> SQL, on this connection
	for {
		typ, body, raw, err := readMessage(client)
		if err != nil {
			return
		}
		switch typ {
		case 'P':
			name, rest := cstring(body)
			query, _ := cstring(rest)
			named[name] = query
		case 'B':
			if s, ok := decodeBind(body, named); ok {
				p.rec.add(s)
			}
		case 'Q':
			q, _ := cstring(body)
			p.rec.add(stmt{SQL: q})
		case 'C':
			if len(body) > 0 && body[0] == 'S' {
				name, _ := cstring(body[1:])
				delete(named, name)
			}
		}
		if _, err := server.Write(raw); err != nil {
			return
		}
	}
}

func readStartup(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 8 || n > 1<<20 {
		return nil, errors.New("bad startup length")
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

func readMessage(r io.Reader) (typ byte, body, raw []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < 4 || n > 1<<30 {
		return 0, nil, nil, errors.New("bad message length")
	}
	raw = make([]byte, 1+n)
	copy(raw, hdr[:])
	if _, err := io.ReadFull(r, raw[5:]); err != nil {
		return 0, nil, nil, err
	}
	return hdr[0], raw[5:], raw, nil
}

func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

// decodeBind decodes a Bind message into the statement it executes.
func decodeBind(b []byte, named map[string]string) (stmt, bool) {
	_, b = cstring(b) // portal
	name, b := cstring(b)
	query, ok := named[name]
	if !ok || len(b) < 2 {
		return stmt{}, false
	}
	nf := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	formats := make([]uint16, nf)
	for i := range formats {
		formats[i] = binary.BigEndian.Uint16(b)
		b = b[2:]
	}
	np := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	s := stmt{SQL: query}
	for i := 0; i < np; i++ {
		n := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		var pr param
		switch {
		case nf == 1:
			pr.Binary = formats[0] == 1
		case nf > 1:
			pr.Binary = formats[i] == 1
		}
		if n >= 0 {
			pr.Value = slices.Clone(b[:n])
			b = b[n:]
		}
		s.Params = append(s.Params, pr)
	}
	return s, true
}

func runCapture(args []string) error {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	bin := fs.String("bin", "bin/repolock", "the api binary")
	dbURL := fs.String("database-url", "", "the benchmark database (migrated)")
	adminToken := fs.String("admin-token", "", "ADMIN_TOKEN for the binary")
	token := fs.String("token", "", "a tenant token")
	out := fs.String("out", "", "output directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" || *token == "" || *out == "" {
		return errors.New("capture needs -database-url, -token and -out")
	}
	u, err := url.Parse(*dbURL)
	if err != nil {
		return err
	}
	p, err := startProxy(u.Host)
	if err != nil {
		return err
	}
	defer p.ln.Close()
	u.Host = p.ln.Addr().String()

	listen, err := freePort()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, *bin, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+u.String(), "ADMIN_TOKEN="+*adminToken, "LISTEN_ADDR="+listen)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	base := "http://" + listen
	if err := waitHealthy(ctx, base); err != nil {
		return fmt.Errorf("%w\n%s", err, logs.String())
	}
	if _, _, err := acquire(base, *token, "https://github.com/benchsql-capture/warm-up"); err != nil {
		return err
	}
	var prev []stmt
	for round := 1; round <= 6; round++ {
		p.rec.start()
		key, status, err := acquire(base, *token, fmt.Sprintf("https://github.com/benchsql-capture/round-%d", round))
		got := p.rec.stop()
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("acquire answered %d", status)
		}
		for i := range got {
			got[i] = replaceKey(got[i], key)
		}
		if prev != nil && sameStatements(prev, got) {
			return writeScript(*out, got)
		}
		prev = got
	}
	return errors.New("two acquires in a row did not execute the same statements: something else is talking to the database")
}

func waitHealthy(ctx context.Context, base string) error {
	for {
		// /readyz: serve listens before the database answered and its
		// migrations ran.
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.New("the binary did not become healthy")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// acquire sends one POST /v1/locks/acquire and returns the normalized URL.
func acquire(base, token, repoURL string) (key string, status int, err error) {
	body, _ := json.Marshal(map[string]string{"repo_url": repoURL})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/locks/acquire", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var r struct {
		NormalizedURL string `json:"normalized_url"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil || r.NormalizedURL == "" {
			return "", resp.StatusCode, fmt.Errorf("acquire: unexpected body %s", b)
		}
	}
	return r.NormalizedURL, resp.StatusCode, nil
}

// keyMarker stands for the per-request URL in a captured statement, and
// keyArrayMarker for an array of that one URL (the binary sends a batch of
// acquires as arrays; one request alone is a batch of one).
var (
	keyMarker      = []byte("\x00key\x00")
	keyArrayMarker = []byte("\x00key[]\x00")
)

func replaceKey(s stmt, key string) stmt {
	for i, p := range s.Params {
		switch {
		case p.Binary:
		case string(p.Value) == key:
			s.Params[i].Value = keyMarker
		case string(p.Value) == "{"+key+"}" || string(p.Value) == `{"`+key+`"}`:
			s.Params[i].Value = keyArrayMarker
		}
	}
	return s
}

func sameStatements(a, b []stmt) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].SQL != b[i].SQL {
			return false
		}
	}
	return true
}

var (
	// sliceRE is an array slice with a name after its colon ("[1:i]"),
	// which pgbench would read as the variable ":i"; writeScript spaces it
	// ("[1: i]", the same SQL).
	sliceRE       = regexp.MustCompile(`\[([^\[\]:]*):([A-Za-z_][^\[\]]*)\]`)
	placeholderRE = regexp.MustCompile(`\$([0-9]+)`)
	pgbenchVarRE  = regexp.MustCompile(`(^|[^:]):[A-Za-z_]`)
)

// writeScript writes the pgbench script (s.sql) and its -D definitions
// (s.defines). It refuses statements pgbench would misread and a capture
// in which no statement carried the URL.
func writeScript(dir string, stmts []stmt) error {
	var script, defines strings.Builder
	script.WriteString("-- Generated by scripts/benchsql from the statements the api binary executed\n" +
		"-- for one POST /v1/locks/acquire. :k is the per-transaction key.\n")
	sawKey := false
	for i, s := range stmts {
		s.SQL = sliceRE.ReplaceAllString(s.SQL, "[$1: $2]")
		if pgbenchVarRE.MatchString(s.SQL) {
			return fmt.Errorf("statement %d contains ':name', which pgbench would read as a variable: %s", i+1, s.SQL)
		}
		names := make([]string, len(s.Params))
		for j, p := range s.Params {
			switch {
			case bytes.Equal(p.Value, keyMarker):
				names[j] = ":k"
				sawKey = true
			case bytes.Equal(p.Value, keyArrayMarker):
				names[j] = "ARRAY[:k]"
				sawKey = true
			case p.Value == nil:
				return fmt.Errorf("statement %d parameter $%d is NULL; pgbench cannot send a NULL parameter", i+1, j+1)
			default:
				v := p.text()
				if strings.ContainsAny(v, "\n\x00") {
					return fmt.Errorf("statement %d parameter $%d does not fit a pgbench -D value", i+1, j+1)
				}
				name := fmt.Sprintf("s%d_p%d", i+1, j+1)
				names[j] = ":" + name
				fmt.Fprintf(&defines, "%s=%s\n", name, v)
			}
		}
		var bad error
		sql := placeholderRE.ReplaceAllStringFunc(s.SQL, func(m string) string {
			n, _ := strconv.Atoi(m[1:])
			if n < 1 || n > len(names) {
				bad = fmt.Errorf("statement %d uses %s but has %d parameters", i+1, m, len(names))
				return m
			}
			return names[n-1]
		})
		if bad != nil {
			return bad
		}
		script.WriteString(strings.TrimRight(strings.TrimSpace(sql), ";") + ";\n")
	}
	if !sawKey {
		return errors.New("no executed statement carried the normalized URL as a parameter; the capture did not see the acquire")
	}
	if err := os.WriteFile(filepath.Join(dir, "s.sql"), []byte(script.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "s.defines"), []byte(defines.String()), 0o644)
}
