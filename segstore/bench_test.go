package segstore

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segkv/segkv/vfs"
)

// Benchmarks run on the real file system (b.TempDir) because their point is
// the cost of the barrier. Figures and the machine are in docs/BENCH.md.

func benchKey(i uint64) []byte {
	k := make([]byte, 32)
	copy(k, "key-")
	binary.BigEndian.PutUint64(k[24:], i)
	return k
}

var benchValue = make([]byte, 100)

func benchmarkDurablePut(b *testing.B, writers int) {
	cfs := vfs.NewCounting(vfs.NewOS())
	s, err := Open(b.TempDir(), &Options{FS: cfs})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var next atomic.Uint64
	cfs.Reset()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / writers
	for w := 0; w < writers; w++ {
		n := per
		if w == 0 {
			n += b.N % writers
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if err := s.Put(benchKey(next.Add(1)), benchValue); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	c := cfs.Counts()
	b.ReportMetric(float64(c.Syncs)/float64(b.N), "syncs/op")
}

func BenchmarkDurablePut1(b *testing.B)  { benchmarkDurablePut(b, 1) }
func BenchmarkDurablePut32(b *testing.B) { benchmarkDurablePut(b, 32) }

// BenchmarkBulkApply loads b.N keys in batches of 1000 built with NewBatch
// (SyncManual, background seals on): the foreground cost of a bulk load per
// key. Each 64 MiB of data triggers a seal on the background goroutine.
func BenchmarkBulkApply(b *testing.B) {
	s, err := Open(b.TempDir(), &Options{Sync: SyncManual})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	batch := s.NewBatch()
	for i := 0; i < b.N; i++ {
		if err := batch.Put(benchKey(uint64(i)), benchValue); err != nil {
			b.Fatal(err)
		}
		if batch.Len() == 1000 || i == b.N-1 {
			if err := s.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch = s.NewBatch()
		}
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
}

// loadedStore returns a store of n keys, sealed into segments, for reads.
func loadedStore(b *testing.B, n int, mods ...func(*Options)) *Store {
	o := &Options{Sync: SyncManual, SegmentSize: 16 << 20, Merge: MergeOptions{Disable: true}}
	for _, m := range mods {
		m(o)
	}
	s, err := Open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	batch := s.NewBatch()
	for i := 0; i < n; i++ {
		batch.Put(benchKey(uint64(i)), benchValue)
		if batch.Len() == 1000 {
			if err := s.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch = s.NewBatch()
		}
	}
	if err := s.Apply(batch); err != nil {
		b.Fatal(err)
	}
	if err := s.Seal(); err != nil {
		b.Fatal(err)
	}
	return s
}

const benchKeys = 200_000

// BenchmarkGetHit reads present keys, through the sealed segments' memory
// mappings (the default); BenchmarkGetHitPread the same with DisableMmap.
func BenchmarkGetHit(b *testing.B) { benchmarkGetHit(b) }

func BenchmarkGetHitPread(b *testing.B) {
	benchmarkGetHit(b, func(o *Options) { o.DisableMmap = true })
}

func benchmarkGetHit(b *testing.B, mods ...func(*Options)) {
	s := loadedStore(b, benchKeys, mods...)
	defer s.Close()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		for pb.Next() {
			i = (i + 7919) % benchKeys
			if _, err := s.Get(benchKey(i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkGetMiss(b *testing.B) {
	s := loadedStore(b, benchKeys)
	defer s.Close()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(benchKeys)
		for pb.Next() {
			i++
			if _, err := s.Get(benchKey(i)); err != ErrNotFound {
				b.Error(fmt.Errorf("miss: %v", err))
				return
			}
		}
	})
}

// BenchmarkPutWhileMerging measures durable puts from 32 writers with the
// background merge busy (small segments, eager policy) against the same
// workload with merging disabled: throughput and latency percentiles. A merge
// step must never stall writers: compare p99 and max between the two.
func BenchmarkPutWhileMerging(b *testing.B) {
	for _, merging := range []bool{false, true} {
		name := "merge=off"
		if merging {
			name = "merge=on"
		}
		b.Run(name, func(b *testing.B) {
			o := &Options{SegmentSize: 256 << 10, Merge: MergeOptions{Disable: !merging, MinRun: 2, SizeRatio: 16}}
			s, err := Open(b.TempDir(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const writers = 32
			lat := make([][]time.Duration, writers)
			var next atomic.Uint64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > uint64(b.N) {
							return
						}
						// A bounded key space, so merges have superseded values to drop.
						t0 := time.Now()
						if err := s.Put(benchKey(i%20000), benchValue); err != nil {
							b.Error(err)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			slices.Sort(all)
			pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) }
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "puts/s")
			b.ReportMetric(pct(0.50), "p50-us")
			b.ReportMetric(pct(0.99), "p99-us")
			b.ReportMetric(pct(0.999), "p999-us")
			b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-us")
			b.ReportMetric(float64(s.Metrics().Merges), "merges")
		})
	}
}
