package dbtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between a client (the server under test, a pool)
// and Postgres that injects the faults of a database outage: it refuses
// connections (its port is closed), resets the connections it carries (TCP
// RST), restores service, and cuts a connection right after a COMMIT
// reached the server (the commit is applied, its answer never arrives).
//
// It reads the client's side of the Postgres frontend protocol just enough
// to find COMMIT: the untyped startup (and SSLRequest) messages, then typed
// messages (one type byte, an int32 length); a simple query 'Q' whose text
// is COMMIT is what CutNextCommit waits for (lib/pq commits that way).
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[*proxyConn]struct{}
	cutNext chan struct{} // armed by CutNextCommit/CutNextStatement, closed when cut
	cutSync bool          // cut at an extended-protocol Sync, not at COMMIT
	hold    chan struct{} // Hold: the server's bytes wait until it is closed
	closed  bool
	wg      sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	once           sync.Once
	// cut is set when the COMMIT was forwarded: the server's answer is
	// dropped and both sides reset.
	cut chan struct{}
	// answered is closed when serverToClient ends (after the cut: once
	// the server answered the COMMIT).
	answered chan struct{}
}

// NewProxy starts a proxy to the host:port of dbURL and returns it with
// the URL that goes through it. It stops when t ends.
func NewProxy(t testing.TB, dbURL string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("dbtest: proxy: parse URL: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dbtest: proxy: listen: %v", err)
	}
	p := &Proxy{t: t, target: u.Host, addr: ln.Addr().String(), conns: map[*proxyConn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.close)
	pu := *u
	pu.Host = p.addr
	return p, pu.String()
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.handle(c)
		}
	}()
}

func (p *Proxy) handle(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		reset(client)
		return
	}
	pc := &proxyConn{client: client, server: server, cut: make(chan struct{}), answered: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.ln == nil {
		p.mu.Unlock()
		pc.reset()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.clientToServer(pc) }()
	go func() { defer p.wg.Done(); p.serverToClient(pc) }()
}

// Refuse closes the proxy's port (new connections are refused) and resets
// every connection it carries: the database is gone.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Reset()
}

// Reset resets every connection the proxy carries (RST to the client).
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Restore reopens the proxy's port after Refuse.
func (p *Proxy) Restore() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		return
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("dbtest: proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// CutNextCommit arms the proxy: the next COMMIT a client sends is forwarded
// to Postgres, its answer is dropped and the connection is reset. The
// channel is closed once that happened.
func (p *Proxy) CutNextCommit() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutNext, p.cutSync = make(chan struct{}), false
	return p.cutNext
}

// CutNextStatement is CutNextCommit for a statement run outside a
// transaction with the extended protocol (Parse/Bind/Execute/Sync, as
// lib/pq runs statements with arguments): the Sync after an Execute, at
// which Postgres commits the implicit transaction, is forwarded, its answer
// dropped and the connection reset.
func (p *Proxy) CutNextStatement() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutNext, p.cutSync = make(chan struct{}), true
	return p.cutNext
}

// Hold stops forwarding what Postgres sends to the clients until Release:
// a connection that died silently (requests go out, no answer comes
// back, no error either).
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = make(chan struct{})
	}
}

// Release forwards again what Hold kept back.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
}

func (p *Proxy) close() {
	p.Release()
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) forget(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST
	}
	_ = c.Close()
}

func (pc *proxyConn) reset() {
	pc.once.Do(func() {
		reset(pc.client)
		_ = pc.server.Close()
	})
}

const sslRequestCode = 80877103

func (p *Proxy) clientToServer(pc *proxyConn) {
	defer p.forget(pc)
	defer pc.reset()
	r := bufio.NewReader(pc.client)
	// Startup: untyped messages (int32 length including itself, payload);
	// an SSLRequest is followed by another untyped message.
	for {
		msg, err := readMessage(r, false)
		if err != nil {
			return
		}
		if _, err := pc.server.Write(msg); err != nil {
			return
		}
		if len(msg) == 8 && binary.BigEndian.Uint32(msg[4:]) == sslRequestCode {
			continue
		}
		break
	}
	executed := false // an Execute since the last Sync
	for {
		msg, err := readMessage(r, true)
		if err != nil {
			return
		}
		commit := msg[0] == 'Q' && isCommit(msg[5:])
		sync := msg[0] == 'S' && executed
		switch msg[0] {
		case 'E':
			executed = true
		case 'S':
			executed = false
		}
		var done chan struct{}
		if commit || sync {
			p.mu.Lock()
			if p.cutNext != nil && p.cutSync == sync {
				done, p.cutNext = p.cutNext, nil
			}
			p.mu.Unlock()
		}
		if done != nil {
			close(pc.cut) // the server's answer to this COMMIT is dropped
		}
		if _, err := pc.server.Write(msg); err != nil {
			return
		}
		if done != nil {
			// Wait until the server answered (serverToClient resets
			// then), so the commit is known to be applied.
			<-pc.answered
			close(done)
			return
		}
	}
}

func (p *Proxy) serverToClient(pc *proxyConn) {
	defer close(pc.answered)
	defer pc.reset()
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.server.Read(buf)
		p.mu.Lock()
		hold := p.hold
		p.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if n > 0 {
			select {
			case <-pc.cut:
				return // the deferred reset drops the answer
			default:
			}
			if _, werr := pc.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func readMessage(r *bufio.Reader, typed bool) ([]byte, error) {
	head := 4
	if typed {
		head = 5
	}
	msg := make([]byte, head)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(msg[head-4:]))
	if n < 4 || n > 1<<30 {
		return nil, errors.New("dbtest: proxy: bad message length")
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(msg, body...), nil
}

func isCommit(q []byte) bool {
	s := strings.TrimRight(strings.TrimSpace(string(q)), "\x00; \n\t")
	return strings.EqualFold(s, "COMMIT") || strings.EqualFold(s, "END")
}
