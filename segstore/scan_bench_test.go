package segstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// The scan benchmarks read 100-key ranges from random seeks over sealed data:
// scanKeys 16-byte keys with 100-byte values, written in random key order
// with the default options (64 MiB segments, background merge on) and
// SyncManual, then closed and reopened, so that every key is in a sealed
// segment with an index file. Building the store takes a while, so it is
// kept in a fixed directory (SEGKV_SCAN_DIR, default under os.TempDir) and
// reused by later runs; SEGKV_SCAN_KEYS changes the key count (default 2M).
//
//	go test -run x -bench ScanSealed -cpu 1 ./segstore/

const scanLen = 100

var scanBench struct {
	once sync.Once
	dir  string
	n    int
	err  error
}

// scanKey writes key i: a hash of i (random order) then i, 16 bytes.
func scanKey(dst []byte, i uint64) []byte {
	dst = dst[:16]
	binary.BigEndian.PutUint64(dst, scanMix(i))
	binary.BigEndian.PutUint64(dst[8:], i)
	return dst
}

func scanMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func scanStoreDir(b *testing.B) (string, int) {
	scanBench.once.Do(func() {
		n := 2_000_000
		if v := os.Getenv("SEGKV_SCAN_KEYS"); v != "" {
			n, scanBench.err = strconv.Atoi(v)
			if scanBench.err != nil {
				return
			}
		}
		dir := os.Getenv("SEGKV_SCAN_DIR")
		if dir == "" {
			dir = filepath.Join(os.TempDir(), fmt.Sprintf("segkv-scanbench-%d", n))
		}
		scanBench.dir, scanBench.n = dir, n
		done := filepath.Join(dir, "LOADED")
		if _, err := os.Stat(done); err == nil {
			return
		}
		os.RemoveAll(dir)
		scanBench.err = buildScanStore(dir, n)
		if scanBench.err == nil {
			scanBench.err = os.WriteFile(done, nil, 0o644)
		}
	})
	if scanBench.err != nil {
		b.Fatal(scanBench.err)
	}
	return scanBench.dir, scanBench.n
}

func buildScanStore(dir string, n int) error {
	s, err := Open(dir, &Options{Sync: SyncManual})
	if err != nil {
		return err
	}
	var kb [16]byte
	val := make([]byte, 100)
	batch := s.NewBatch()
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(val, uint64(i))
		if err := batch.Put(scanKey(kb[:], uint64(i)), val); err != nil {
			return err
		}
		if batch.Len() == 1000 || i == n-1 {
			if err := s.Apply(batch); err != nil {
				return err
			}
			batch = s.NewBatch()
		}
	}
	if err := s.Seal(); err != nil {
		return err
	}
	return s.Close()
}

func openScanStore(b *testing.B) (*Store, int) {
	dir, n := scanStoreDir(b)
	return openScanDir(b, dir, n)
}

func openScanDir(b *testing.B, dir string, n int) (*Store, int) {
	// Merges off: the benchmark must measure the segments as loaded, not a
	// background merge racing it.
	s, err := Open(dir, &Options{Merge: MergeOptions{Disable: true}})
	if err != nil {
		b.Fatal(err)
	}
	// Read every value once, so that the timed scans find the data files
	// mapped and their pages in this process's page tables: otherwise the
	// first touch of each page (a minor fault) lands in whichever run comes
	// first and makes short runs incomparable.
	it, err := s.NewIterator(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if _, err := it.Value(); err != nil {
			b.Fatal(err)
		}
	}
	return s, n
}

// BenchmarkScanCompacted is BenchmarkScanSealed over the same keys after a
// full Compact into one segment, whose records are in key order: the scan's
// value reads are then sequential instead of scattered over the files in
// write order. The compacted copy is kept next to the loaded store.
func BenchmarkScanCompacted(b *testing.B) {
	dir, n := scanStoreDir(b)
	cdir := dir + "-compacted"
	if _, err := os.Stat(filepath.Join(cdir, "LOADED")); err != nil {
		os.RemoveAll(cdir)
		if err := os.CopyFS(cdir, os.DirFS(dir)); err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(filepath.Join(cdir, "LOADED")); err != nil {
			b.Fatal(err)
		}
		s, err := Open(cdir, &Options{Merge: MergeOptions{Disable: true, MaxStepBytes: 1 << 40}})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Compact(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cdir, "LOADED"), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, _ := openScanDir(b, cdir, n)
	defer s.Close()
	b.Run("forward", func(b *testing.B) { benchmarkScan(b, s, n, false, false, false) })
	b.Run("forward-append", func(b *testing.B) { benchmarkScan(b, s, n, false, false, true) })
}

// BenchmarkScanSealed measures 100-key scans from random seeks, reading
// each key and value: forward (Seek, Next) and reverse (SeekLT, Prev), with
// one iterator for all scans and with a new iterator per scan.
func BenchmarkScanSealed(b *testing.B) {
	s, n := openScanStore(b)
	defer s.Close()
	m := s.Metrics()
	b.Logf("%d keys in %d segments (%d bytes), live %d bytes", n, m.Segments, m.SegmentBytes, m.LiveBytes)
	for _, c := range []struct {
		name                     string
		reverse, perScan, append bool
	}{
		{"forward", false, false, false},
		{"forward-append", false, false, true},
		{"forward-newiter", false, true, false},
		{"reverse", true, false, false},
		{"reverse-append", true, false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchmarkScan(b, s, n, c.reverse, c.perScan, c.append)
		})
	}
}

// benchmarkScan runs the scans: reverse walks backward; perScan makes an
// iterator per scan; appendValue reads values with AppendValue into one
// reused buffer instead of Value (a copy per key).
func benchmarkScan(b *testing.B, s *Store, n int, reverse, perScan, appendValue bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	var kb [16]byte
	var it *Iterator
	var err error
	if !perScan {
		if it, err = s.NewIterator(nil); err != nil {
			b.Fatal(err)
		}
		defer it.Close()
	}
	var sink int
	var vbuf []byte
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := cpuTime()
	for range b.N {
		if perScan {
			if it, err = s.NewIterator(nil); err != nil {
				b.Fatal(err)
			}
		}
		key := scanKey(kb[:], rng.Uint64N(uint64(n)))
		var ok bool
		if reverse {
			ok = it.SeekLT(key)
		} else {
			ok = it.Seek(key)
		}
		for j := 0; ok && j < scanLen; j++ {
			var v []byte
			var err error
			if appendValue {
				vbuf, err = it.AppendValue(vbuf[:0])
				v = vbuf
			} else {
				v, err = it.Value()
			}
			if err != nil {
				b.Fatal(err)
			}
			sink += len(it.Key()) + len(v)
			if reverse {
				ok = it.Prev()
			} else {
				ok = it.Next()
			}
		}
		if perScan {
			it.Close()
		}
	}
	cpu1, _ := cpuTime()
	cpu := cpu1 - cpu0
	b.StopTimer()
	if sink == 0 {
		b.Fatal("nothing read")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "scans/s")
	// The machine may be shared: the process's CPU time per scan is less
	// disturbed by other work than the wall clock.
	if cpuOK {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkIteratorLive measures the live file's side of iteration on
// freshly written data (200k random-order 16-byte keys, 100-byte values,
// all in the live file): creating an iterator (an O(1) copy of the live key
// directory, shared until the next write), a Seek, and a 100-key scan, with
// and without a write between iterators (which makes each iterator copy
// the directory again, and the write copy the nodes it touches).
//
//	go test -run x -bench IteratorLive ./segstore/
func BenchmarkIteratorLive(b *testing.B) {
	const n = 200_000
	s, err := Open(b.TempDir(), &Options{Sync: SyncManual})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var kb [16]byte
	val := make([]byte, 100)
	batch := s.NewBatch()
	for i := 0; i < n; i++ {
		if err := batch.Put(scanKey(kb[:], uint64(i)), val); err != nil {
			b.Fatal(err)
		}
		if batch.Len() == 1000 || i == n-1 {
			if err := s.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch = s.NewBatch()
		}
	}
	if m := s.Metrics(); m.Segments != 0 {
		b.Fatalf("%d segments: the keys must all be in the live file", m.Segments)
	}
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			it, err := s.NewIterator(nil)
			if err != nil {
				b.Fatal(err)
			}
			it.Close()
		}
	})
	b.Run("create-after-write", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(3, 4))
		b.ReportAllocs()
		for range b.N {
			if err := s.Put(scanKey(kb[:], rng.Uint64N(n)), val); err != nil {
				b.Fatal(err)
			}
			it, err := s.NewIterator(nil)
			if err != nil {
				b.Fatal(err)
			}
			it.Close()
		}
	})
	b.Run("seek", func(b *testing.B) {
		it, err := s.NewIterator(nil)
		if err != nil {
			b.Fatal(err)
		}
		defer it.Close()
		rng := rand.New(rand.NewPCG(5, 6))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if !it.Seek(scanKey(kb[:], rng.Uint64N(n))) {
				b.Fatal("seek found nothing")
			}
		}
	})
	b.Run("scan", func(b *testing.B) { benchmarkScan(b, s, n, false, true, true) })
}
