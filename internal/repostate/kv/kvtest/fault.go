package kvtest

import (
	"context"
	"errors"
	"iter"
	"net"
	"sync"
	"syscall"

	"github.com/repolock/repolock/internal/repostate/kv"
)

// ErrInjected matches (errors.Is) every error a FaultStore returns for an
// injected fault.
var ErrInjected = errors.New("kvtest: injected fault")

// InjectedError is the error of an injected fault. It looks like what the
// database driver returns: a fault before the write is a connection that
// could not be made (ECONNREFUSED: nothing was sent), a fault after it is a
// connection reset while the reply was on its way (ECONNRESET: the write
// may have landed), so code under test can tell the two apart as it can in
// production (database.UnknownOutcome).
type InjectedError struct{ Mode FaultMode }

func (e *InjectedError) Error() string {
	return "kvtest: injected fault (" + e.Mode.String() + " the write): " + e.Unwrap().Error()
}

// Is makes errors.Is(err, ErrInjected) true.
func (e *InjectedError) Is(target error) bool { return target == ErrInjected }

// Unwrap returns the system error the fault imitates.
func (e *InjectedError) Unwrap() error {
	if e.Mode == FailAfter {
		return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// FaultMode says when an injected fault strikes relative to the write.
type FaultMode int

const (
	// FailBefore fails the write without performing it.
	FailBefore FaultMode = iota
	// FailAfter performs the write and then reports failure, as a lost
	// reply or a connection dropped before the commit acknowledgement
	// would.
	FailAfter
)

func (m FaultMode) String() string {
	if m == FailAfter {
		return "after"
	}
	return "before"
}

// Write describes one write a FaultStore sees. N counts writes from 1.
type Write struct {
	N         int
	Op        string // Set, SetIf, Delete, DeleteIf, DeletePartition
	Partition []byte
	Key       []byte // nil for DeletePartition
}

// FaultStore wraps a kv.Store and fails chosen writes. Writes are Set,
// SetIf, Delete, DeleteIf and DeletePartition calls; reads fail only in a
// full outage (FailAllFrom).
// It is safe for concurrent use.
type FaultStore struct {
	inner kv.Store

	mu      sync.Mutex
	writes  int
	failAt  int // 0: never
	outage  bool
	reads   bool // the outage fails reads too, once it has struck
	struck  bool
	mode    FaultMode
	log     []Write
	hook    func(ctx context.Context, w Write) error
	injects int
}

var _ kv.Store = (*FaultStore)(nil)

// NewFaultStore wraps s; it injects nothing until told to.
func NewFaultStore(s kv.Store) *FaultStore { return &FaultStore{inner: s} }

// FailNthWrite makes the nth write from now (1-based) fail once, in mode.
func (f *FaultStore) FailNthWrite(n int, mode FaultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt, f.outage, f.mode = f.writes+n, false, mode
}

// FailWritesFrom makes the nth write from now and every later one fail, in
// mode (the first in mode, the rest before they happen): an outage.
func (f *FaultStore) FailWritesFrom(n int, mode FaultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt, f.outage, f.reads, f.struck, f.mode = f.writes+n, true, false, false, mode
}

// FailAllFrom is FailWritesFrom that also fails every read once the nth
// write has struck (refused, as after the database went away): a write
// whose reply was lost cannot be read back.
func (f *FaultStore) FailAllFrom(n int, mode FaultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt, f.outage, f.reads, f.struck, f.mode = f.writes+n, true, true, false, mode
}

// readFault returns the error of a read in a full outage, or nil.
func (f *FaultStore) readFault() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads && f.struck {
		f.injects++
		return &InjectedError{Mode: FailBefore}
	}
	return nil
}

// Heal stops injecting faults.
func (f *FaultStore) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt, f.outage, f.reads, f.struck = 0, false, false, false
}

// SetHook installs fn, called before every write (outside any lock, so it
// may use the store). When fn returns an error the write is not performed
// and the error is returned in its place. nil removes the hook.
func (f *FaultStore) SetHook(fn func(ctx context.Context, w Write) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = fn
}

// Writes returns how many writes the store has seen.
func (f *FaultStore) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// Injected returns how many faults were injected.
func (f *FaultStore) Injected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injects
}

// Log returns every write seen, in order.
func (f *FaultStore) Log() []Write {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Write(nil), f.log...)
}

// begin records a write and decides its fate: run the write or not, and
// fail it afterwards or not.
func (f *FaultStore) begin(ctx context.Context, op string, pk, key []byte) (run bool, failAfter bool, err error) {
	f.mu.Lock()
	f.writes++
	w := Write{N: f.writes, Op: op, Partition: append([]byte(nil), pk...), Key: append([]byte(nil), key...)}
	if key == nil {
		w.Key = nil
	}
	f.log = append(f.log, w)
	hook := f.hook
	fault := f.failAt > 0 && (f.writes == f.failAt || (f.outage && f.writes > f.failAt))
	mode := f.mode
	if f.outage && f.writes > f.failAt {
		mode = FailBefore
	}
	if fault {
		f.injects++
		f.struck = true
	}
	f.mu.Unlock()

	if hook != nil {
		if err := hook(ctx, w); err != nil {
			return false, false, err
		}
	}
	if !fault {
		return true, false, nil
	}
	if mode == FailAfter {
		return true, true, nil
	}
	return false, false, &InjectedError{Mode: FailBefore}
}

// Get implements kv.Store.
func (f *FaultStore) Get(ctx context.Context, pk, key []byte) ([]byte, kv.Predicate, error) {
	if err := f.readFault(); err != nil {
		return nil, nil, err
	}
	return f.inner.Get(ctx, pk, key)
}

// Scan implements kv.Store.
func (f *FaultStore) Scan(ctx context.Context, pk, from []byte, pageSize int) iter.Seq2[kv.Entry, error] {
	if err := f.readFault(); err != nil {
		return func(yield func(kv.Entry, error) bool) { yield(kv.Entry{}, err) }
	}
	return f.inner.Scan(ctx, pk, from, pageSize)
}

// Set implements kv.Store.
func (f *FaultStore) Set(ctx context.Context, pk, key, value []byte) error {
	run, failAfter, err := f.begin(ctx, "Set", pk, key)
	if !run {
		return err
	}
	if err := f.inner.Set(ctx, pk, key, value); err != nil {
		return err
	}
	if failAfter {
		return &InjectedError{Mode: FailAfter}
	}
	return nil
}

// SetIf implements kv.Store.
func (f *FaultStore) SetIf(ctx context.Context, pk, key, value []byte, pred kv.Predicate) (kv.Predicate, error) {
	run, failAfter, err := f.begin(ctx, "SetIf", pk, key)
	if !run {
		return nil, err
	}
	p, err := f.inner.SetIf(ctx, pk, key, value, pred)
	if err != nil {
		return nil, err
	}
	if failAfter {
		return nil, &InjectedError{Mode: FailAfter}
	}
	return p, nil
}

// Delete implements kv.Store.
func (f *FaultStore) Delete(ctx context.Context, pk, key []byte) error {
	run, failAfter, err := f.begin(ctx, "Delete", pk, key)
	if !run {
		return err
	}
	if err := f.inner.Delete(ctx, pk, key); err != nil {
		return err
	}
	if failAfter {
		return &InjectedError{Mode: FailAfter}
	}
	return nil
}

// DeleteIf implements kv.Store.
func (f *FaultStore) DeleteIf(ctx context.Context, pk, key []byte, pred kv.Predicate) error {
	run, failAfter, err := f.begin(ctx, "DeleteIf", pk, key)
	if !run {
		return err
	}
	if err := f.inner.DeleteIf(ctx, pk, key, pred); err != nil {
		return err
	}
	if failAfter {
		return &InjectedError{Mode: FailAfter}
	}
	return nil
}

// DeletePartition implements kv.Store.
func (f *FaultStore) DeletePartition(ctx context.Context, pk []byte, batchSize int) (int64, error) {
	run, failAfter, err := f.begin(ctx, "DeletePartition", pk, nil)
	if !run {
		return 0, err
	}
	n, err := f.inner.DeletePartition(ctx, pk, batchSize)
	if err != nil {
		return n, err
	}
	if failAfter {
		return n, &InjectedError{Mode: FailAfter}
	}
	return n, nil
}
