package segstore

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkShortScan measures what a short scan costs when the iterator is
// made for it: NewIterator, a seek to a random key, 100 keys read (Key and
// value), Close. Over a small store (1,000 16-byte keys, 100-byte values,
// written in random key order, on the OS file system) the fixed cost of
// the iterator is most of it. Three states of the same keys:
//
//   - fresh: all in the live file;
//   - sealed1: all in one sealed segment, compacted into key order (a
//     settled store);
//   - sealed6: spread over 6 sealed segments (each covering the whole key
//     range) and the live file.
//
// Each state runs forward with Value (a copy per key), forward and reverse
// with AppendValue into one reused buffer (what bench/peers does for the
// comparison with Pebble), and seek-only measures the fixed cost alone
// (NewIterator, Seek, Close).
//
//	go test -run '^$' -bench ShortScan -count 6 ./segstore/
func BenchmarkShortScan(b *testing.B) {
	const n = 1000
	for _, st := range []struct {
		name  string
		build func(b *testing.B, s *Store)
	}{
		{"fresh", func(b *testing.B, s *Store) { shortScanWrite(b, s, 0, n) }},
		{"sealed1", func(b *testing.B, s *Store) {
			shortScanWrite(b, s, 0, n)
			if err := s.Seal(); err != nil {
				b.Fatal(err)
			}
			if err := s.Compact(context.Background()); err != nil {
				b.Fatal(err)
			}
		}},
		{"sealed6", func(b *testing.B, s *Store) {
			const per = 150 // 6 x 150 sealed, 100 live
			for i := 0; i < 6; i++ {
				shortScanWrite(b, s, i*per, (i+1)*per)
				if err := s.Seal(); err != nil {
					b.Fatal(err)
				}
			}
			shortScanWrite(b, s, 6*per, n)
		}},
	} {
		b.Run(st.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), &Options{Sync: SyncManual, Merge: MergeOptions{Disable: true}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			st.build(b, s)
			// Read everything once, so that the data files are mapped and
			// their pages touched before the timed scans.
			it, err := s.NewIterator(nil)
			if err != nil {
				b.Fatal(err)
			}
			count := 0
			for ok := it.First(); ok; ok = it.Next() {
				if _, err := it.Value(); err != nil {
					b.Fatal(err)
				}
				count++
			}
			if err := it.Close(); err != nil {
				b.Fatal(err)
			}
			if count != n {
				b.Fatalf("%d keys, want %d", count, n)
			}
			for _, c := range []struct {
				name            string
				reverse, append bool
			}{
				{"forward", false, false},
				{"forward-append", false, true},
				{"reverse-append", true, true},
			} {
				b.Run(c.name, func(b *testing.B) {
					benchmarkScan(b, s, n, c.reverse, true, c.append)
				})
			}
			// The fixed cost alone: NewIterator, Seek, Close.
			b.Run("seek-only", func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				var kb [16]byte
				b.ReportAllocs()
				cpu0, cpuOK := cpuTime()
				for range b.N {
					it, err := s.NewIterator(nil)
					if err != nil {
						b.Fatal(err)
					}
					if !it.Seek(scanKey(kb[:], rng.Uint64N(n))) {
						b.Fatal("seek found nothing")
					}
					it.Close()
				}
				if cpu1, _ := cpuTime(); cpuOK {
					b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		})
	}
}

// shortScanWrite writes keys [from, to) of BenchmarkShortScan's key set
// (scanKey: random key order) in one batch.
func shortScanWrite(b *testing.B, s *Store, from, to int) {
	val := make([]byte, 100)
	var kb [16]byte
	batch := s.NewBatch()
	for i := from; i < to; i++ {
		for j := range val {
			val[j] = byte(i + j)
		}
		if err := batch.Put(scanKey(kb[:], uint64(i)), val); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Apply(batch); err != nil {
		b.Fatal(err)
	}
}
