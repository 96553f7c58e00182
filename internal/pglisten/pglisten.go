// Package pglisten is the process's one LISTEN session (issue 26: each
// replica holds one LISTEN connection, so that its Postgres sessions stay
// at the pool size + 1). Components subscribe to channels before Start;
// the Listener LISTENs on every subscribed channel over one connection,
// delivers each notification to its channel's subscribers and tells every
// subscriber the state of the session.
//
// # State
//
// Subscribers start down. State(true) is delivered once LISTEN took effect
// on every channel and the session is up; State(false) when it is lost (a
// disconnection, or a ping unanswered within Config.PingTimeout: a
// session that died silently is only noticed when used). Each
// reconnection delivers State(true) again (lib/pq re-issues every LISTEN
// before it reports the reconnection), and so does lib/pq's nil
// notification, which it sends after a reconnection: notifications may
// have been lost meanwhile. State(true) therefore means "listening now;
// anything before may have been missed": a subscriber resynchronizes at
// each one (re-reads, invalidates, wakes its waiters), even when it was
// already up.
//
// Every callback of every subscriber is called from one delivery at a
// time, in order: a State(false) is never overtaken by the State(true) or
// the notification that follows it. Callbacks must be quick and must not
// call Close.
package pglisten

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lib/pq"
)

// Defaults of Config.
const (
	DefaultPingInterval = 10 * time.Second
	DefaultPingTimeout  = 5 * time.Second
)

// Subscriber is one component's interest in a channel.
type Subscriber struct {
	// Notify receives the payload of each notification on the channel.
	Notify func(payload string)
	// State reports the session: true once LISTEN took effect on every
	// channel, and again after every reconnection or possible loss of
	// notifications (resynchronize); false when the session is lost.
	State func(up bool)
}

// Config configures a Listener.
type Config struct {
	// URL is the connection string of the session: a direct session
	// (behind a transaction-pooling PgBouncer, the direct URL). Required.
	URL string
	// Logger receives the session's state changes. Required.
	Logger *slog.Logger
	// PingInterval is how often the session is pinged
	// (0: DefaultPingInterval).
	PingInterval time.Duration
	// PingTimeout is how long a ping may go unanswered before the session
	// counts as down until it answers (0: DefaultPingTimeout).
	PingTimeout time.Duration
}

// Listener owns the process's LISTEN session. Build it with New,
// Subscribe, then Start; Close stops it.
type Listener struct {
	cfg Config

	mu      sync.Mutex
	subs    map[string][]Subscriber
	started bool
	// The session is up when all three hold.
	ready     bool // LISTEN was issued on every channel
	connected bool // lib/pq's connection is up
	stalled   bool // a ping is unanswered past PingTimeout
	up        bool // last state delivered

	// deliver serializes the callbacks (and Close's end of them).
	deliver sync.Mutex
	closed  bool // under deliver: no callback after Close

	pq       *pq.Listener
	upOnce   sync.Once
	firstUp  chan struct{}
	done     chan struct{}
	closeOne sync.Once
	wg       sync.WaitGroup
}

// New returns a listener on cfg.URL. It does not connect: Start does.
func New(cfg Config) *Listener {
	if cfg.URL == "" || cfg.Logger == nil {
		panic("pglisten.New: a URL and a logger are required")
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	return &Listener{cfg: cfg, subs: map[string][]Subscriber{}, firstUp: make(chan struct{}), done: make(chan struct{})}
}

// Subscribe adds sub to channel's subscribers. It must be called before
// Start (it panics after).
func (l *Listener) Subscribe(channel string, sub Subscriber) {
	if channel == "" || sub.Notify == nil || sub.State == nil {
		panic("pglisten.Subscribe: a channel, Notify and State are required")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		panic("pglisten.Subscribe after Start")
	}
	l.subs[channel] = append(l.subs[channel], sub)
}

// Channels are the subscribed channels, sorted.
func (l *Listener) Channels() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	chs := make([]string, 0, len(l.subs))
	for ch := range l.subs {
		chs = append(chs, ch)
	}
	slices.Sort(chs)
	return chs
}

// Start connects the session in the background and LISTENs on every
// subscribed channel. It never fails: while the database is unreachable
// lib/pq retries with capped backoff, and subscribers stay down.
func (l *Listener) Start() {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		panic("pglisten.Start twice")
	}
	l.started = true
	l.mu.Unlock()
	chs := l.Channels()
	if len(chs) == 0 {
		l.cfg.Logger.Info("pglisten: no subscriber; no LISTEN session")
		return
	}
	l.pq = pq.NewListener(l.cfg.URL, 50*time.Millisecond, 5*time.Second, l.event)
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		for _, ch := range chs {
			// Listen blocks until a connection is up (or Close); lib/pq
			// re-issues it at every reconnection.
			if err := l.pq.Listen(ch); err != nil {
				select {
				case <-l.done:
				default:
					l.cfg.Logger.Warn("pglisten: LISTEN failed; subscribers stay down", "channel", ch, "error", err.Error())
				}
				return
			}
		}
		l.update(func() { l.ready = true }, false)
	}()
	go func() {
		defer l.wg.Done()
		l.run()
	}()
}

// event is lib/pq's state callback.
func (l *Listener) event(ev pq.ListenerEventType, err error) {
	switch ev {
	case pq.ListenerEventConnected, pq.ListenerEventReconnected:
		// On a reconnection every LISTEN was re-issued before this event.
		l.update(func() { l.connected = true }, true)
	case pq.ListenerEventDisconnected:
		l.cfg.Logger.Warn("pglisten: session lost; reconnecting", "error", errString(err))
		l.update(func() { l.connected = false }, false)
	case pq.ListenerEventConnectionAttemptFailed:
		l.cfg.Logger.Warn("pglisten: cannot connect; retrying", "error", errString(err))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// update changes the state under the locks and delivers State to every
// subscriber when the session went up or down, or (resync) when it is up
// and notifications may have been lost.
func (l *Listener) update(change func(), resync bool) {
	l.deliver.Lock()
	defer l.deliver.Unlock()
	l.mu.Lock()
	change()
	was := l.up
	l.up = l.ready && l.connected && !l.stalled
	up := l.up
	l.mu.Unlock()
	if l.closed || (up == was && !(up && resync)) {
		return
	}
	if up != was {
		if up {
			l.cfg.Logger.Info("pglisten: listening", "channels", l.Channels())
		} else {
			l.cfg.Logger.Warn("pglisten: not listening until the session is back")
		}
	}
	for _, subs := range l.subs { // not written after Start
		for _, s := range subs {
			s.State(up)
		}
	}
	if up {
		l.upOnce.Do(func() { close(l.firstUp) })
	}
}

func (l *Listener) notify(ch, payload string) {
	l.deliver.Lock()
	defer l.deliver.Unlock()
	if l.closed {
		return
	}
	for _, s := range l.subs[ch] {
		s.Notify(payload)
	}
}

func (l *Listener) run() {
	notes := l.pq.NotificationChannel()
	defer func() {
		// lib/pq sends on its channel until it has closed the connection.
		go func() {
			for range notes {
			}
		}()
	}()
	tick := time.NewTicker(l.cfg.PingInterval)
	defer tick.Stop()
	pinged := make(chan struct{}, 1)
	pinging := false
	var timeout <-chan time.Time
	for {
		select {
		case <-l.done:
			return
		case n, ok := <-notes:
			if !ok {
				return
			}
			if n == nil { // after a reconnection: notifications may have been lost
				l.update(func() {}, true)
				continue
			}
			l.notify(n.Channel, n.Extra)
		case <-tick.C:
			if pinging {
				continue
			}
			pinging = true
			timeout = time.After(l.cfg.PingTimeout)
			go func() {
				// An error means the connection is gone: lib/pq reports it.
				_ = l.pq.Ping()
				pinged <- struct{}{}
			}()
		case <-pinged:
			pinging, timeout = false, nil
			// Up again after a stall delivers State(true): resynchronize.
			l.update(func() { l.stalled = false }, false)
		case <-timeout:
			timeout = nil
			l.cfg.Logger.Warn("pglisten: ping unanswered; counting the session as down until it answers", "timeout", l.cfg.PingTimeout.String())
			l.update(func() { l.stalled = true }, false)
		}
	}
}

// Up reports whether the session is up (the last state delivered).
func (l *Listener) Up() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

// Connected is closed once the session was first up (a test signal).
func (l *Listener) Connected() <-chan struct{} { return l.firstUp }

// Close stops the session and waits for the listener's goroutines; no
// callback runs after it returns. A nil Listener has nothing to close.
func (l *Listener) Close() {
	if l == nil {
		return
	}
	l.closeOne.Do(func() {
		l.deliver.Lock()
		l.closed = true
		l.deliver.Unlock()
		close(l.done)
		if l.pq != nil {
			_ = l.pq.Close()
		}
		l.wg.Wait()
	})
}
