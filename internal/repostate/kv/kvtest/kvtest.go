// Package kvtest is the conformance suite of kv.Store, and a fault-injecting
// kv.Store wrapper for tests of code built on it.
//
// Any implementation is checked with
//
//	func TestConformance(t *testing.T) {
//		kvtest.Run(t, func(t *testing.T) kv.Store { return newMyStore(t) })
//	}
//
// newStore is called once per subtest; the suite still uses partitions of
// its own in each subtest, so a store shared between calls is fine.
package kvtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/repolock/repolock/internal/repostate/kv"
)

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) kv.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s kv.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"GetMissing", testGetMissing},
		{"MissingArguments", testMissingArguments},
		{"EmptyValue", testEmptyValue},
		{"SetIf", testSetIf},
		{"DeleteIf", testDeleteIf},
		{"DeleteMissingIsNotAnError", testDeleteMissing},
		{"ScanByteOrder", testScanByteOrder},
		{"ScanPaging", testScanPaging},
		{"ScanFromKey", testScanFromKey},
		{"ScanEmptyPartitionAndEmptyLastPage", testScanEmptyLastPage},
		{"ScanIsNotASnapshot", testScanNotSnapshot},
		{"ScanDeleteWhileIterating", testScanDeleteWhileIterating},
		{"ScanStopEarly", testScanStopEarly},
		{"PartitionsDoNotBleed", testPartitionsDoNotBleed},
		{"DeletePartition", testDeletePartition},
		{"CancelledContext", testCancelledContext},
		{"CancelDuringScan", testCancelDuringScan},
		{"ConcurrentSetIfSamePredicate", testConcurrentSetIf},
		{"ConcurrentSetIfNil", testConcurrentSetIfNil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// partition returns a partition key no other test uses.
func partition(t *testing.T, name string) []byte {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return []byte("kvtest/" + t.Name() + "/" + name + "/" + hex.EncodeToString(b))
}

func mustSet(t *testing.T, s kv.Store, pk, key, value []byte) {
	t.Helper()
	if err := s.Set(context.Background(), pk, key, value); err != nil {
		t.Fatalf("Set(%q, %q): %v", pk, key, err)
	}
}

func mustGet(t *testing.T, s kv.Store, pk, key []byte) ([]byte, kv.Predicate) {
	t.Helper()
	v, p, err := s.Get(context.Background(), pk, key)
	if err != nil {
		t.Fatalf("Get(%q, %q): %v", pk, key, err)
	}
	return v, p
}

func wantValue(t *testing.T, s kv.Store, pk, key, want []byte) {
	t.Helper()
	got, _ := mustGet(t, s, pk, key)
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q, %q) = %q, want %q", pk, key, got, want)
	}
}

func wantNotFound(t *testing.T, s kv.Store, pk, key []byte) {
	t.Helper()
	_, _, err := s.Get(context.Background(), pk, key)
	if !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Get(%q, %q) error = %v, want ErrNotFound", pk, key, err)
	}
}

// scanAll collects every key of a scan.
func scanAll(t *testing.T, s kv.Store, pk, from []byte, pageSize int) [][]byte {
	t.Helper()
	var keys [][]byte
	for e, err := range s.Scan(context.Background(), pk, from, pageSize) {
		if err != nil {
			t.Fatalf("Scan(%q): %v", pk, err)
		}
		keys = append(keys, e.Key)
	}
	return keys
}

func keysOf(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func equalKeys(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

func testRoundTrip(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	cases := []struct {
		key, value []byte
	}{
		{[]byte("a"), []byte("1")},
		{[]byte("binary\x00key\xff"), []byte{0, 1, 2, 0xfe, 0xff}},
		{[]byte("utf8/ключ/鍵"), []byte(`{"json":true}`)},
		{bytes.Repeat([]byte("k"), 1024), bytes.Repeat([]byte{0xab}, 1<<16)},
	}
	for _, c := range cases {
		mustSet(t, s, pk, c.key, c.value)
	}
	for _, c := range cases {
		wantValue(t, s, pk, c.key, c.value)
	}
}

func testOverwrite(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	mustSet(t, s, pk, []byte("k"), []byte("first"))
	_, p1 := mustGet(t, s, pk, []byte("k"))
	mustSet(t, s, pk, []byte("k"), []byte("second"))
	wantValue(t, s, pk, []byte("k"), []byte("second"))
	// An unconditional overwrite is a change: the old predicate is stale.
	if _, err := s.SetIf(context.Background(), pk, []byte("k"), []byte("third"), p1); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf with a predicate from before Set: error = %v, want ErrPredicateFailed", err)
	}
	// Overwriting with the same bytes is a change too.
	_, p2 := mustGet(t, s, pk, []byte("k"))
	mustSet(t, s, pk, []byte("k"), []byte("second"))
	if _, err := s.SetIf(context.Background(), pk, []byte("k"), []byte("third"), p2); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf after a same-value Set: error = %v, want ErrPredicateFailed (predicates are versions, not values)", err)
	}
}

func testGetMissing(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	wantNotFound(t, s, pk, []byte("nope"))
	mustSet(t, s, pk, []byte("k"), []byte("v"))
	wantNotFound(t, s, pk, []byte("k2"))
	wantNotFound(t, s, pk, []byte("K"))
}

func testMissingArguments(t *testing.T, s kv.Store) {
	ctx := context.Background()
	pk := partition(t, "p")
	mustSet(t, s, pk, []byte("k"), []byte("v"))
	_, pred := mustGet(t, s, pk, []byte("k"))
	firstErr := func(seq func(func(kv.Entry, error) bool)) error {
		var got error
		seq(func(_ kv.Entry, err error) bool { got = err; return false })
		return got
	}
	// One byte over the limit together with pk.
	long := bytes.Repeat([]byte("k"), kv.MaxKeyBytes-len(pk)+1)
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"Get/nil partition", func() error { _, _, err := s.Get(ctx, nil, []byte("k")); return err }, kv.ErrMissingPartitionKey},
		{"Get/empty partition", func() error { _, _, err := s.Get(ctx, []byte{}, []byte("k")); return err }, kv.ErrMissingPartitionKey},
		{"Get/nil key", func() error { _, _, err := s.Get(ctx, pk, nil); return err }, kv.ErrMissingKey},
		{"Get/empty key", func() error { _, _, err := s.Get(ctx, pk, []byte{}); return err }, kv.ErrMissingKey},
		{"Set/partition", func() error { return s.Set(ctx, nil, []byte("k"), []byte("v")) }, kv.ErrMissingPartitionKey},
		{"Set/key", func() error { return s.Set(ctx, pk, []byte{}, []byte("v")) }, kv.ErrMissingKey},
		{"Set/value", func() error { return s.Set(ctx, pk, []byte("k"), nil) }, kv.ErrMissingValue},
		{"SetIf/partition", func() error { _, err := s.SetIf(ctx, []byte{}, []byte("k"), []byte("v"), nil); return err }, kv.ErrMissingPartitionKey},
		{"SetIf/key", func() error { _, err := s.SetIf(ctx, pk, nil, []byte("v"), nil); return err }, kv.ErrMissingKey},
		{"SetIf/value", func() error { _, err := s.SetIf(ctx, pk, []byte("k"), nil, pred); return err }, kv.ErrMissingValue},
		{"Delete/partition", func() error { return s.Delete(ctx, nil, []byte("k")) }, kv.ErrMissingPartitionKey},
		{"Delete/key", func() error { return s.Delete(ctx, pk, nil) }, kv.ErrMissingKey},
		{"DeleteIf/partition", func() error { return s.DeleteIf(ctx, nil, []byte("k"), pred) }, kv.ErrMissingPartitionKey},
		{"DeleteIf/key", func() error { return s.DeleteIf(ctx, pk, nil, pred) }, kv.ErrMissingKey},
		{"DeleteIf/predicate", func() error { return s.DeleteIf(ctx, pk, []byte("k"), nil) }, kv.ErrMissingPredicate},
		{"SetIf/foreign predicate", func() error { _, err := s.SetIf(ctx, pk, []byte("k"), []byte("v"), "not a predicate"); return err }, kv.ErrInvalidPredicate},
		{"Scan/partition", func() error { return firstErr(s.Scan(ctx, nil, nil, 10)) }, kv.ErrMissingPartitionKey},
		{"DeletePartition/partition", func() error { _, err := s.DeletePartition(ctx, []byte{}, 10); return err }, kv.ErrMissingPartitionKey},
		{"Get/key too long", func() error { _, _, err := s.Get(ctx, pk, long); return err }, kv.ErrKeyTooLong},
		{"Set/key too long", func() error { return s.Set(ctx, pk, long, []byte("v")) }, kv.ErrKeyTooLong},
		{"SetIf/key too long", func() error { _, err := s.SetIf(ctx, pk, long, []byte("v"), nil); return err }, kv.ErrKeyTooLong},
		{"Delete/key too long", func() error { return s.Delete(ctx, pk, long) }, kv.ErrKeyTooLong},
		{"DeleteIf/key too long", func() error { return s.DeleteIf(ctx, pk, long, pred) }, kv.ErrKeyTooLong},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: error = %v, want %v", c.name, err, c.want)
		}
	}
	// None of the rejected calls wrote anything.
	wantValue(t, s, pk, []byte("k"), []byte("v"))
	if keys := scanAll(t, s, pk, nil, 10); !equalKeys(keys, keysOf("k")) {
		t.Fatalf("partition after rejected calls = %q, want [k]", keys)
	}
}

func testEmptyValue(t *testing.T, s kv.Store) {
	ctx := context.Background()
	pk := partition(t, "p")
	mustSet(t, s, pk, []byte("set"), []byte{})
	if _, err := s.SetIf(ctx, pk, []byte("setif"), []byte{}, nil); err != nil {
		t.Fatalf("SetIf(nil) with an empty value: %v", err)
	}
	for _, k := range []string{"set", "setif"} {
		v, _ := mustGet(t, s, pk, []byte(k))
		if v == nil || len(v) != 0 {
			t.Fatalf("Get(%s) = %#v, want a non-nil empty value", k, v)
		}
	}
	_, p := mustGet(t, s, pk, []byte("setif"))
	if _, err := s.SetIf(ctx, pk, []byte("setif"), []byte{}, p); err != nil {
		t.Fatalf("SetIf(pred) with an empty value: %v", err)
	}
}

func testSetIf(t *testing.T, s kv.Store) {
	ctx := context.Background()
	pk := partition(t, "p")
	k := []byte("k")

	// nil predicate on an absent key: written.
	p1, err := s.SetIf(ctx, pk, k, []byte("v1"), nil)
	if err != nil {
		t.Fatalf("SetIf(nil) on absent key: %v", err)
	}
	wantValue(t, s, pk, k, []byte("v1"))

	// nil predicate on a present key: refused, value unchanged.
	if _, err := s.SetIf(ctx, pk, k, []byte("other"), nil); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf(nil) on present key: error = %v, want ErrPredicateFailed", err)
	}
	wantValue(t, s, pk, k, []byte("v1"))

	// The predicate SetIf returned and the one Get returns are both fresh.
	_, pGet := mustGet(t, s, pk, k)
	p2, err := s.SetIf(ctx, pk, k, []byte("v2"), p1)
	if err != nil {
		t.Fatalf("SetIf with the predicate SetIf returned: %v", err)
	}
	wantValue(t, s, pk, k, []byte("v2"))

	// pGet was taken before that write: stale.
	if _, err := s.SetIf(ctx, pk, k, []byte("stale"), pGet); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf with a stale predicate: error = %v, want ErrPredicateFailed", err)
	}
	wantValue(t, s, pk, k, []byte("v2"))

	// A predicate from Scan is fresh too.
	var pScan kv.Predicate
	for e, err := range s.Scan(ctx, pk, nil, 10) {
		if err != nil {
			t.Fatal(err)
		}
		pScan = e.Predicate
	}
	p3, err := s.SetIf(ctx, pk, k, []byte("v3"), pScan)
	if err != nil {
		t.Fatalf("SetIf with a predicate from Scan: %v", err)
	}
	if _, err := s.SetIf(ctx, pk, k, []byte("v3"), p2); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf with the previous version's predicate: error = %v, want ErrPredicateFailed", err)
	}

	// After a delete, the predicate no longer holds; not even after the
	// key is written again with the same value (no ABA).
	if err := s.Delete(ctx, pk, k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetIf(ctx, pk, k, []byte("after-delete"), p3); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf with a predicate of a deleted key: error = %v, want ErrPredicateFailed", err)
	}
	wantNotFound(t, s, pk, k)
	if _, err := s.SetIf(ctx, pk, k, []byte("v3"), nil); err != nil {
		t.Fatalf("SetIf(nil) after delete: %v", err)
	}
	if _, err := s.SetIf(ctx, pk, k, []byte("aba"), p3); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf with a predicate from before delete+recreate: error = %v, want ErrPredicateFailed", err)
	}
	wantValue(t, s, pk, k, []byte("v3"))

	// A predicate is bound to its key.
	mustSet(t, s, pk, []byte("other"), []byte("x"))
	_, pk4 := mustGet(t, s, pk, k)
	if _, err := s.SetIf(ctx, pk, []byte("other"), []byte("y"), pk4); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("SetIf with another key's predicate: error = %v, want ErrPredicateFailed", err)
	}
}

func testDeleteIf(t *testing.T, s kv.Store) {
	ctx := context.Background()
	pk := partition(t, "p")
	k := []byte("k")
	mustSet(t, s, pk, k, []byte("v1"))
	_, p1 := mustGet(t, s, pk, k)
	mustSet(t, s, pk, k, []byte("v2"))
	if err := s.DeleteIf(ctx, pk, k, p1); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("DeleteIf with a stale predicate: error = %v, want ErrPredicateFailed", err)
	}
	wantValue(t, s, pk, k, []byte("v2"))
	_, p2 := mustGet(t, s, pk, k)
	if err := s.DeleteIf(ctx, pk, k, p2); err != nil {
		t.Fatalf("DeleteIf with a fresh predicate: %v", err)
	}
	wantNotFound(t, s, pk, k)
	if err := s.DeleteIf(ctx, pk, k, p2); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("DeleteIf of a deleted key: error = %v, want ErrPredicateFailed", err)
	}
}

func testDeleteMissing(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	if err := s.Delete(context.Background(), pk, []byte("never-written")); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	mustSet(t, s, pk, []byte("k"), []byte("v"))
	for i := 0; i < 2; i++ {
		if err := s.Delete(context.Background(), pk, []byte("k")); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	wantNotFound(t, s, pk, []byte("k"))
}

func testScanByteOrder(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	// Byte order, not locale order: upper case before lower case, "a"
	// before "a\x00" before "ab", high bytes last, "é" (0xc3 0xa9) after
	// "z".
	want := keysOf("\x00", "\x01", "A", "B", "Z", "_", "a", "a\x00", "a\x01", "ab", "b", "z", "\x7f", "\x80", "é", "\xff", "\xff\xff")
	shuffled := slices.Clone(want)
	for i := range shuffled {
		j := int(randByte()) % len(shuffled)
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	for _, k := range shuffled {
		mustSet(t, s, pk, k, k)
	}
	if !slices.IsSortedFunc(want, bytes.Compare) {
		t.Fatal("test keys are not in byte order")
	}
	for _, pageSize := range []int{1, 3, 10, 1000} {
		if got := scanAll(t, s, pk, nil, pageSize); !equalKeys(got, want) {
			t.Fatalf("Scan(page %d) order = %q, want %q", pageSize, got, want)
		}
	}
	for e, err := range s.Scan(context.Background(), pk, nil, 10) {
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Key, e.Value) {
			t.Fatalf("entry %q has value %q", e.Key, e.Value)
		}
	}
}

func randByte() byte {
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	return b[0]
}

func numbered(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%04d", i))
	}
	return keys
}

func testScanPaging(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	keys := numbered(95)
	for _, k := range keys {
		mustSet(t, s, pk, k, []byte("v"))
	}
	for _, pageSize := range []int{10, 1, 94, 95, 96, 0} {
		if got := scanAll(t, s, pk, nil, pageSize); !equalKeys(got, keys) {
			t.Fatalf("Scan(page %d): got %d keys, want 95 in order", pageSize, len(got))
		}
	}
}

func testScanFromKey(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	keys := numbered(30)
	for _, k := range keys {
		mustSet(t, s, pk, k, []byte("v"))
	}
	cases := []struct {
		from string
		want [][]byte
	}{
		{"", keys},
		{"key-0010", keys[10:]},     // inclusive
		{"key-0010\x00", keys[11:]}, // the next key after key-0010
		{"key-001", keys[10:]},      // a prefix that is not a key
		{"key-0029", keys[29:]},
		{"key-0030", nil},
		{"zzz", nil},
		{"\x00", keys},
	}
	for _, c := range cases {
		if got := scanAll(t, s, pk, []byte(c.from), 10); !equalKeys(got, c.want) {
			t.Errorf("Scan(from %q) = %d keys starting %q, want %d", c.from, len(got), firstKey(got), len(c.want))
		}
	}
}

func firstKey(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}

func testScanEmptyLastPage(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	if got := scanAll(t, s, pk, nil, 10); len(got) != 0 {
		t.Fatalf("Scan of an empty partition = %q", got)
	}
	// Exactly two full pages: the third page is empty and must end the
	// scan cleanly, without an error or a repeated key.
	keys := numbered(20)
	for _, k := range keys {
		mustSet(t, s, pk, k, []byte("v"))
	}
	if got := scanAll(t, s, pk, nil, 10); !equalKeys(got, keys) {
		t.Fatalf("Scan of 2 full pages: got %d keys, want 20 in order", len(got))
	}
}

// testScanNotSnapshot shows pages are fetched lazily: keys written beyond
// the first page after iteration began are seen; keys deleted there are not.
func testScanNotSnapshot(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	keys := numbered(30)
	for _, k := range keys {
		mustSet(t, s, pk, k, []byte("v"))
	}
	var got [][]byte
	for e, err := range s.Scan(context.Background(), pk, nil, 10) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Key)
		if len(got) == 10 {
			mustSet(t, s, pk, []byte("key-0015x"), []byte("late"))
			if err := s.Delete(context.Background(), pk, []byte("key-0020")); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := slices.Concat(keys[:16], keysOf("key-0015x"), keys[16:20], keys[21:])
	if !equalKeys(got, want) {
		t.Fatalf("Scan with writes after the first page:\n got %q\nwant %q", got, want)
	}
}

func testScanDeleteWhileIterating(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	keys := numbered(45)
	for _, k := range keys {
		mustSet(t, s, pk, k, []byte("v"))
	}
	var got [][]byte
	for e, err := range s.Scan(context.Background(), pk, nil, 10) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Key)
		if err := s.Delete(context.Background(), pk, e.Key); err != nil {
			t.Fatal(err)
		}
	}
	if !equalKeys(got, keys) {
		t.Fatalf("deleting each key as it is yielded: got %d keys, want every one of 45 once, in order", len(got))
	}
	if rest := scanAll(t, s, pk, nil, 10); len(rest) != 0 {
		t.Fatalf("partition not empty after deleting while iterating: %q", rest)
	}
}

func testScanStopEarly(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	for _, k := range numbered(25) {
		mustSet(t, s, pk, k, []byte("v"))
	}
	n := 0
	for _, err := range s.Scan(context.Background(), pk, nil, 10) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 12 {
			break
		}
	}
	if n != 12 {
		t.Fatalf("stopped after %d entries, want 12", n)
	}
}

func testPartitionsDoNotBleed(t *testing.T, s kv.Store) {
	base := partition(t, "")
	m, ma := append(slices.Clone(base), 'm'), append(slices.Clone(base), 'm', 'a')
	// "m"+"ab" and "ma"+"b" concatenate to the same bytes.
	mustSet(t, s, m, []byte("ab"), []byte("in m"))
	mustSet(t, s, m, []byte("z"), []byte("in m"))
	mustSet(t, s, ma, []byte("b"), []byte("in ma"))
	mustSet(t, s, ma, []byte("a"), []byte("in ma"))
	if got := scanAll(t, s, m, nil, 1); !equalKeys(got, keysOf("ab", "z")) {
		t.Fatalf("Scan(m) = %q, want [ab z]", got)
	}
	if got := scanAll(t, s, ma, nil, 1); !equalKeys(got, keysOf("a", "b")) {
		t.Fatalf("Scan(ma) = %q, want [a b]", got)
	}
	wantNotFound(t, s, m, []byte("b"))
	wantNotFound(t, s, ma, []byte("ab"))
	wantValue(t, s, ma, []byte("b"), []byte("in ma"))
	n, err := s.DeletePartition(context.Background(), m, 1)
	if err != nil || n != 2 {
		t.Fatalf("DeletePartition(m) = %d, %v; want 2, nil", n, err)
	}
	if got := scanAll(t, s, ma, nil, 10); !equalKeys(got, keysOf("a", "b")) {
		t.Fatalf("Scan(ma) after deleting m = %q, want [a b]", got)
	}
}

func testDeletePartition(t *testing.T, s kv.Store) {
	ctx := context.Background()
	pk, other := partition(t, "victim"), partition(t, "other")
	const n = 1234
	for _, k := range numbered(n) {
		mustSet(t, s, pk, k, []byte("v"))
	}
	mustSet(t, s, other, []byte("keep"), []byte("v"))
	for _, c := range []struct {
		batch int
		want  int64
	}{{100, n}, {7, 0}} {
		got, err := s.DeletePartition(ctx, pk, c.batch)
		if err != nil || got != c.want {
			t.Fatalf("DeletePartition(batch %d) = %d, %v; want %d, nil", c.batch, got, err, c.want)
		}
	}
	if rest := scanAll(t, s, pk, nil, 100); len(rest) != 0 {
		t.Fatalf("%d keys left after DeletePartition", len(rest))
	}
	wantValue(t, s, other, []byte("keep"), []byte("v"))
	// Default batch size.
	mustSet(t, s, pk, []byte("again"), []byte("v"))
	if got, err := s.DeletePartition(ctx, pk, 0); err != nil || got != 1 {
		t.Fatalf("DeletePartition(batch 0) = %d, %v; want 1, nil", got, err)
	}
}

func testCancelledContext(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	mustSet(t, s, pk, []byte("k"), []byte("v"))
	_, pred := mustGet(t, s, pk, []byte("k"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, _, err := s.Get(ctx, pk, []byte("k")); return err }},
		{"Set", func() error { return s.Set(ctx, pk, []byte("k"), []byte("x")) }},
		{"SetIf(nil)", func() error { _, err := s.SetIf(ctx, pk, []byte("new"), []byte("x"), nil); return err }},
		{"SetIf(pred)", func() error { _, err := s.SetIf(ctx, pk, []byte("k"), []byte("x"), pred); return err }},
		{"Delete", func() error { return s.Delete(ctx, pk, []byte("k")) }},
		{"DeleteIf", func() error { return s.DeleteIf(ctx, pk, []byte("k"), pred) }},
		{"DeletePartition", func() error { _, err := s.DeletePartition(ctx, pk, 10); return err }},
		{"Scan", func() error {
			var got error
			for _, err := range s.Scan(ctx, pk, nil, 10) {
				got = err
				if err == nil {
					return errors.New("Scan yielded an entry on a cancelled context")
				}
			}
			return got
		}},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s on a cancelled context: error = %v, want context.Canceled", c.name, err)
		}
	}
	// Nothing changed.
	v, p := mustGet(t, s, pk, []byte("k"))
	if string(v) != "v" {
		t.Fatalf("value after cancelled writes = %q, want v", v)
	}
	if _, err := s.SetIf(context.Background(), pk, []byte("k"), []byte("v2"), p); err != nil {
		t.Fatalf("key changed by a cancelled write: %v", err)
	}
	wantNotFound(t, s, pk, []byte("new"))
}

func testCancelDuringScan(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	for _, k := range numbered(25) {
		mustSet(t, s, pk, k, []byte("v"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		n       int
		lastErr error
		errs    int
	)
	for _, err := range s.Scan(ctx, pk, nil, 10) {
		if err != nil {
			lastErr = err
			errs++
			continue
		}
		n++
		if n == 10 {
			cancel()
		}
	}
	if n != 10 || errs != 1 || !errors.Is(lastErr, context.Canceled) {
		t.Fatalf("cancel after the first page: %d entries, %d errors, last %v; want 10 entries then one context.Canceled", n, errs, lastErr)
	}
}

func testConcurrentSetIf(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	k := []byte("contended")
	mustSet(t, s, pk, k, []byte("start"))
	_, pred := mustGet(t, s, pk, k)
	const n = 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, results[i] = s.SetIf(context.Background(), pk, k, []byte(fmt.Sprintf("writer-%d", i)), pred)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range results {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both won SetIf with the same predicate", winner, i)
			}
			winner = i
		case !errors.Is(err, kv.ErrPredicateFailed):
			t.Fatalf("writer %d: error = %v, want nil or ErrPredicateFailed", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	wantValue(t, s, pk, k, []byte(fmt.Sprintf("writer-%d", winner)))
}

func testConcurrentSetIfNil(t *testing.T, s kv.Store) {
	pk := partition(t, "p")
	k := []byte("created-once")
	const n = 16
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		wins  []int
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.SetIf(context.Background(), pk, k, []byte(fmt.Sprintf("creator-%d", i)), nil)
			switch {
			case err == nil:
				mu.Lock()
				wins = append(wins, i)
				mu.Unlock()
			case !errors.Is(err, kv.ErrPredicateFailed):
				t.Errorf("creator %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d creators won SetIf(nil) on one key, want exactly 1", len(wins))
	}
	wantValue(t, s, pk, k, []byte(fmt.Sprintf("creator-%d", wins[0])))
}
