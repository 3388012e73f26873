package peers

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkShortScan compares a 100-key scan from a random key, one
// iterator per scan (DB.Scan), over 1,000 keys: fresh (in the live file or
// memtable) and settled (Settler.Settle: sealed or flushed, background work
// done). It is the peer side of segstore's BenchmarkShortScan.
//
//	cd bench && go test -run '^$' -bench ShortScan ./peers/
func BenchmarkShortScan(b *testing.B) {
	const n = 1000
	for _, name := range []string{"segkv", "pebble"} {
		for _, state := range []string{"fresh", "settled"} {
			b.Run(name+"/"+state, func(b *testing.B) {
				e, err := Lookup(name)
				if err != nil {
					b.Fatal(err)
				}
				db, err := e.Open(b.TempDir(), Bulk)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				keys := make([][]byte, n)
				vals := make([][]byte, n)
				for i := range keys {
					keys[i] = Key(make([]byte, KeySize), uint64(i))
					vals[i] = make([]byte, ValueSize)
				}
				if err := db.Batch(keys, vals, false); err != nil {
					b.Fatal(err)
				}
				if state == "settled" {
					if err := db.(Settler).Settle(context.Background(), 100*time.Millisecond); err != nil {
						b.Fatal(err)
					}
				}
				sink := 0
				fn := func(k, v []byte) { sink += len(k) + len(v) }
				if c, err := db.Scan(nil, 2*n, false, fn); err != nil || c != n {
					b.Fatal(c, err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				var kb [KeySize]byte
				b.ReportAllocs()
				b.ResetTimer()
				cpu0, cpuOK := cpuTime()
				for range b.N {
					if _, err := db.Scan(Key(kb[:], rng.Uint64N(n)), 100, false, fn); err != nil {
						b.Fatal(err)
					}
				}
				// The machine may be shared: the process's CPU time per
				// scan is less disturbed by other work than the wall clock.
				if cpu1, _ := cpuTime(); cpuOK {
					b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
