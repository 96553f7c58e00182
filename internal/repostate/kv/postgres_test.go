package kv_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/repostate/kv"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
)

func TestPostgresConformance(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	kvtest.Run(t, func(t *testing.T) kv.Store { return kv.NewPostgres(db) })
}

// The fault wrapper must be transparent while it injects nothing.
func TestFaultStoreConformance(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	kvtest.Run(t, func(t *testing.T) kv.Store { return kvtest.NewFaultStore(kv.NewPostgres(db)) })
}

func TestFaultStoreInjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inner := kv.NewPostgres(dbtest.New(t))
	pk := []byte("fault")
	exists := func(key string) bool {
		_, _, err := inner.Get(ctx, pk, []byte(key))
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	tests := []struct {
		mode    kvtest.FaultMode
		outage  bool
		written []bool // for writes w1..w4: did the write land?
		failed  []bool // ...and did it report an error?
	}{
		{kvtest.FailBefore, false, []bool{true, false, true, true}, []bool{false, true, false, false}},
		{kvtest.FailAfter, false, []bool{true, true, true, true}, []bool{false, true, false, false}},
		{kvtest.FailBefore, true, []bool{true, false, false, false}, []bool{false, true, true, true}},
		{kvtest.FailAfter, true, []bool{true, true, false, false}, []bool{false, true, true, true}},
	}
	for i, tc := range tests {
		fs := kvtest.NewFaultStore(inner)
		if tc.outage {
			fs.FailWritesFrom(2, tc.mode)
		} else {
			fs.FailNthWrite(2, tc.mode)
		}
		for w := range 4 {
			key := []byte{byte('a' + i), byte('0' + w)}
			_, err := fs.SetIf(ctx, pk, key, []byte("v"), nil)
			if got := err != nil; got != tc.failed[w] {
				t.Errorf("case %d write %d: error = %v, want failure %v", i, w+1, err, tc.failed[w])
			}
			if err != nil && !errors.Is(err, kvtest.ErrInjected) {
				t.Errorf("case %d write %d: error = %v, want ErrInjected", i, w+1, err)
			}
			if got := exists(string(key)); got != tc.written[w] {
				t.Errorf("case %d write %d: landed = %v, want %v", i, w+1, got, tc.written[w])
			}
		}
		if fs.Writes() != 4 {
			t.Errorf("case %d: Writes() = %d, want 4", i, fs.Writes())
		}
	}
}

// The key-length limit, against real Postgres: MaxKeyBytes of incompressible
// bytes (split every way between partition key and key) is written, read and
// conditionally rewritten; one byte more is rejected by Set, SetIf and Get
// with the KV's invalid-argument error, before any statement (nothing is
// written); and the limit is needed: the same table refuses a longer key
// itself with 54000.
func TestPostgresKeyLengthLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	s := kv.NewPostgres(db)
	random := func(n int) []byte {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	count := func() int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM kv`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, pkLen := range []int{1, 100, kv.MaxKeyBytes / 2, kv.MaxKeyBytes - 1} {
		buf := random(kv.MaxKeyBytes + 1)
		pk, key := buf[:pkLen], buf[pkLen:kv.MaxKeyBytes]
		if err := s.Set(ctx, pk, key, []byte("v1")); err != nil {
			t.Fatalf("Set at the limit (partition %d bytes): %v", pkLen, err)
		}
		v, pred, err := s.Get(ctx, pk, key)
		if err != nil || string(v) != "v1" {
			t.Fatalf("Get at the limit: %q, %v", v, err)
		}
		if _, err := s.SetIf(ctx, pk, key, []byte("v2"), pred); err != nil {
			t.Fatalf("SetIf at the limit: %v", err)
		}
		before := count()
		long := buf[pkLen : kv.MaxKeyBytes+1]
		for name, op := range map[string]func() error{
			"Set":   func() error { return s.Set(ctx, pk, long, []byte("v")) },
			"SetIf": func() error { _, err := s.SetIf(ctx, pk, long, []byte("v"), nil); return err },
			"Get":   func() error { _, _, err := s.Get(ctx, pk, long); return err },
		} {
			err := op()
			if !errors.Is(err, kv.ErrKeyTooLong) || !errors.Is(err, &repolock.Error{Code: repolock.EInvalid}) {
				t.Errorf("%s one byte over the limit (partition %d bytes): %v, want ErrKeyTooLong (invalid_argument)", name, pkLen, err)
			}
		}
		if n := count(); n != before {
			t.Fatalf("rejected writes left rows: %d, want %d", n, before)
		}
	}
	// Without the check Postgres refuses long incompressible keys itself.
	_, err := db.ExecContext(ctx, `INSERT INTO kv (partition_key, key, value, version) VALUES ($1, $2, 'v', nextval('kv_version_seq'))`,
		[]byte("p"), random(2800))
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code != "54000" {
		t.Fatalf("raw insert of a 2801-byte key: %v, want Postgres 54000", err)
	}
}
