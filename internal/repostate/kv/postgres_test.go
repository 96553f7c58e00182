package kv_test

import (
	"context"
	"errors"
	"testing"

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
