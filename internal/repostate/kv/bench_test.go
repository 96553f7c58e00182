package kv

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// BenchmarkKVvsRawSQL measures Get, Set and SetIf through the Postgres
// store against a floor: the very same SQL statements issued directly on
// the pool, without the store's argument checks, predicate handling and
// error wrapping. Both run in the same process against the same database,
// interleaved operation by operation (each worker alternates raw and store
// calls, flipping which goes first), so that load from elsewhere on the
// machine hits both alike. ops/s is derived from the summed time of each
// implementation's calls: workers / mean latency. Target: store/raw ops/s
// ratio >= 0.8 for every operation.
//
// The workload is fixed and runs once, whatever b.N.
func BenchmarkKVvsRawSQL(b *testing.B) {
	ctx := context.Background()
	db := dbtest.New(b)
	store := NewPostgres(db)
	const (
		opsPerWorker = 1000 // per operation and implementation
		keysPerWork  = 50
		value        = `{"commit_id":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","staging_token":"staging/x/y-z/main/abc","sealed_tokens":[]}`
	)
	pk := []byte("bench/partition")

	// One implementation of the three operations. Each has its own keys,
	// so their SetIf versions never interfere.
	type impl struct {
		name  string
		get   func(k []byte) error
		set   func(k []byte) error
		setIf func(k []byte, ver *int64) error
	}
	raw := impl{
		name: "raw SQL",
		get: func(k []byte) error {
			var (
				v   []byte
				ver int64
			)
			return db.QueryRowContext(ctx, sqlGet, pk, k).Scan(&v, &ver)
		},
		set: func(k []byte) error {
			_, err := db.ExecContext(ctx, sqlSet, pk, k, []byte(value))
			return err
		},
		setIf: func(k []byte, ver *int64) error {
			return db.QueryRowContext(ctx, sqlUpdateIfVersion, pk, k, []byte(value), *ver).Scan(ver)
		},
	}
	store_ := impl{
		name: "kv.Store",
		get: func(k []byte) error {
			_, _, err := store.Get(ctx, pk, k)
			return err
		},
		set: func(k []byte) error { return store.Set(ctx, pk, k, []byte(value)) },
		setIf: func(k []byte, ver *int64) error {
			p, err := store.SetIf(ctx, pk, k, []byte(value), version(*ver))
			if err == nil {
				*ver = int64(p.(version))
			}
			return err
		},
	}
	impls := []impl{raw, store_}
	key := func(im, w, i int) []byte {
		return []byte(fmt.Sprintf("branches/%d-w%02d-k%03d", im, w, i%keysPerWork))
	}
	ops := []string{"Get", "Set", "SetIf"}

	for _, workers := range []int{1, 8} {
		// versions[im][w][k]: the current version of each key.
		versions := make([][][]int64, len(impls))
		refresh := func() {
			for im := range impls {
				versions[im] = make([][]int64, workers)
				for w := range workers {
					versions[im][w] = make([]int64, keysPerWork)
					for i := range keysPerWork {
						if err := db.QueryRowContext(ctx, `SELECT version FROM kv WHERE partition_key = $1 AND key = $2`,
							pk, key(im, w, i)).Scan(&versions[im][w][i]); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		}
		for im := range impls {
			for w := range workers {
				for i := range keysPerWork {
					if err := store.Set(ctx, pk, key(im, w, i), []byte(value)); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		// lat[op][im]: every call's latency.
		lat := map[string][][]time.Duration{}
		for _, op := range ops {
			refresh()
			lat[op] = make([][]time.Duration, len(impls))
			var (
				wg sync.WaitGroup
				mu sync.Mutex
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mine := make([][]time.Duration, len(impls))
					for i := range opsPerWorker {
						for j := range impls {
							im := (i + j + w) % len(impls) // alternate who goes first
							k := key(im, w, i)
							t0 := time.Now()
							var err error
							switch op {
							case "Get":
								err = impls[im].get(k)
							case "Set":
								err = impls[im].set(k)
							case "SetIf":
								err = impls[im].setIf(k, &versions[im][w][i%keysPerWork])
							}
							mine[im] = append(mine[im], time.Since(t0))
							if err != nil {
								b.Errorf("%s %s: %v", impls[im].name, op, err)
								return
							}
						}
					}
					mu.Lock()
					for im := range impls {
						lat[op][im] = append(lat[op][im], mine[im]...)
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			if b.Failed() {
				return
			}
		}

		var sb strings.Builder
		fmt.Fprintf(&sb, "\nKV store vs raw SQL floor, %d worker(s), %d calls per operation and implementation, interleaved\n",
			workers, workers*opsPerWorker)
		fmt.Fprintf(&sb, "%-6s %-9s %9s %9s %9s %7s %s\n", "op", "impl", "ops/s", "p50", "p99", "ratio", "target")
		for _, op := range ops {
			var rawOps float64
			for im := range impls {
				l := lat[op][im]
				var sum time.Duration
				for _, d := range l {
					sum += d
				}
				opsPerSec := float64(workers) * float64(len(l)) / sum.Seconds()
				ratio, target := "", ""
				if im == 0 {
					rawOps = opsPerSec
				} else {
					ratio, target = fmt.Sprintf("%.2f", opsPerSec/rawOps), ">= 0.80"
					b.ReportMetric(opsPerSec/rawOps, fmt.Sprintf("%s-ratio-%dw", strings.ToLower(op), workers))
				}
				fmt.Fprintf(&sb, "%-6s %-9s %9.0f %9s %9s %7s %s\n", op, impls[im].name, opsPerSec,
					percentile(l, 50).Round(time.Microsecond), percentile(l, 99).Round(time.Microsecond), ratio, target)
			}
		}
		fmt.Print(sb.String())
	}
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}
