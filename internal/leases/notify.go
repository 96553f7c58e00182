package leases

import (
	"log/slog"
	"sync"
	"time"

	"github.com/lib/pq"
)

// Notifier is a process's one LISTEN connection on NotifyChan, shared by
// every acquisition waiting for a key: Release notifies tenant/key at
// commit, and the Notifier wakes that key's waiters in this process. After
// a reconnection it wakes every waiter (a notification may have been
// missed while it was down); while it is down, waiters still wake at their
// holder's expiry.
type Notifier struct {
	url    string
	logger *slog.Logger

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}

	listener      *pq.Listener
	connected     chan struct{}
	connectedOnce sync.Once
	done          chan struct{}
	closeOnce     sync.Once
	wg            sync.WaitGroup
}

// NewNotifier returns a notifier that will LISTEN on listenURL (a direct
// session: behind a transaction-pooling PgBouncer, the direct URL). Both
// are required. Start connects it; Close stops it.
func NewNotifier(listenURL string, logger *slog.Logger) *Notifier {
	if listenURL == "" || logger == nil {
		panic("leases.NewNotifier: a URL and a logger are required")
	}
	return &Notifier{url: listenURL, logger: logger, waiters: map[string]map[chan struct{}]struct{}{},
		connected: make(chan struct{}), done: make(chan struct{})}
}

// Start connects the listener in the background; it retries with capped
// backoff and never fails.
func (n *Notifier) Start() {
	n.listener = pq.NewListener(n.url, 50*time.Millisecond, 5*time.Second, n.event)
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := n.listener.Listen(NotifyChan); err != nil {
			select {
			case <-n.done:
			default:
				n.logger.Warn("leases: LISTEN failed; waiting acquisitions wake only at their holder's expiry", "error", err.Error())
			}
			return
		}
		n.wakeAll()
		n.connectedOnce.Do(func() { close(n.connected) })
		n.logger.Info("leases: listening for releases", "channel", NotifyChan)
	}()
	go func() {
		defer n.wg.Done()
		n.run()
	}()
}

func (n *Notifier) event(ev pq.ListenerEventType, err error) {
	switch ev {
	case pq.ListenerEventReconnected:
		n.wakeAll()
		n.logger.Info("leases: listener reconnected")
	case pq.ListenerEventDisconnected:
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		n.logger.Warn("leases: listener disconnected; waiting acquisitions wake at their holder's expiry until it reconnects", "error", msg)
	}
}

func (n *Notifier) run() {
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-n.done:
			return
		case m, ok := <-n.listener.Notify:
			if !ok {
				return
			}
			if m == nil {
				n.wakeAll()
				continue
			}
			n.wake(m.Extra)
		case <-tick.C:
			go func() { _ = n.listener.Ping() }()
		}
	}
}

// Connected is closed once LISTEN first took effect.
func (n *Notifier) Connected() <-chan struct{} { return n.connected }

// Close stops the listener and wakes every waiter.
func (n *Notifier) Close() {
	if n == nil {
		return
	}
	n.closeOnce.Do(func() {
		close(n.done)
		if n.listener != nil {
			_ = n.listener.Close()
		}
		n.wg.Wait()
		n.wakeAll()
	})
}

// subscribe registers a waiter for tenant's key: the channel is closed at
// the next release of the key (or reconnection). cancel unregisters it.
func (n *Notifier) subscribe(tenantID, key string) (<-chan struct{}, func()) {
	name := tenantID + "/" + key
	ch := make(chan struct{})
	n.mu.Lock()
	set := n.waiters[name]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		n.waiters[name] = set
	}
	set[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if set, ok := n.waiters[name]; ok {
			if _, ok := set[ch]; ok {
				delete(set, ch)
				if len(set) == 0 {
					delete(n.waiters, name)
				}
			}
		}
	}
}

// Waiting is how many acquisitions wait in this process (a test signal).
func (n *Notifier) Waiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, set := range n.waiters {
		c += len(set)
	}
	return c
}

func (n *Notifier) wake(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.waiters[name] {
		close(ch)
	}
	delete(n.waiters, name)
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, set := range n.waiters {
		for ch := range set {
			close(ch)
		}
		delete(n.waiters, name)
	}
}
