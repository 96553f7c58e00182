package leases

import (
	"log/slog"
	"sync"
)

// Notifier wakes the acquisitions waiting for a key in this process:
// Release notifies tenant/key on NotifyChan at commit, and the process's
// LISTEN session (internal/pglisten, wired by cmd/api) calls Notify with
// the payload, which wakes that key's waiters. Each SetListening(true) (the
// session up, after a reconnection or a possible loss of notifications)
// wakes every waiter: a notification may have been missed. While the
// session is down, waiters still wake at their holder's expiry.
type Notifier struct {
	logger *slog.Logger

	mu        sync.Mutex
	waiters   map[string]map[chan struct{}]struct{}
	listening bool
}

// NewNotifier returns a notifier with no waiter. The logger is required.
func NewNotifier(logger *slog.Logger) *Notifier {
	if logger == nil {
		panic("leases.NewNotifier: a logger is required")
	}
	return &Notifier{logger: logger, waiters: map[string]map[chan struct{}]struct{}{}}
}

// Notify is a notification on NotifyChan (pglisten.Subscriber.Notify):
// the key tenant/key of the payload was released.
func (n *Notifier) Notify(payload string) { n.wake(payload) }

// SetListening is the state of the LISTEN session
// (pglisten.Subscriber.State). Up, it wakes every waiter.
func (n *Notifier) SetListening(up bool) {
	n.mu.Lock()
	changed := n.listening != up
	n.listening = up
	n.mu.Unlock()
	if up {
		n.wakeAll()
	}
	if !changed {
		return
	}
	if up {
		n.logger.Info("leases: listening for releases", "channel", NotifyChan)
	} else {
		n.logger.Warn("leases: not listening; waiting acquisitions wake at their holder's expiry until the session is back")
	}
}

// Listening reports whether releases arrive by notification.
func (n *Notifier) Listening() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listening
}

// Close wakes every waiter (at shutdown).
func (n *Notifier) Close() {
	if n == nil {
		return
	}
	n.wakeAll()
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
