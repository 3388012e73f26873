package segstore

import (
	"runtime"
	"testing"
)

// BenchmarkLiveIndexMemory reports the Go heap the live file's key
// directory holds per key: 500k random-order 16-byte keys (100-byte values)
// written to the live file of a store on the real file system, heap
// measured after a GC before and after the writes. It uses only the public
// API, so the same file measures an older build side by side.
//
//	go test -run x -bench LiveIndexMemory -benchtime 1x ./segstore/
func BenchmarkLiveIndexMemory(b *testing.B) {
	const n = 500_000
	for range b.N {
		s, err := Open(b.TempDir(), &Options{Sync: SyncManual, Merge: MergeOptions{Disable: true}})
		if err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		var kb [16]byte
		val := make([]byte, 100)
		batch := s.NewBatch()
		for i := 0; i < n; i++ {
			if err := batch.Put(scanKeyMem(kb[:], uint64(i)), val); err != nil {
				b.Fatal(err)
			}
			if batch.Len() == 1000 || i == n-1 {
				if err := s.Apply(batch); err != nil {
					b.Fatal(err)
				}
				batch = s.NewBatch()
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		after := ms.HeapAlloc
		if m := s.Metrics(); m.Segments != 0 {
			b.Fatalf("%d segments: the keys must all be in the live file", m.Segments)
		}
		b.ReportMetric(float64(after-before)/n, "heap-B/key")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// scanKeyMem is key i in random order, 16 bytes (a copy of the scan
// benchmarks' key, so that this file stands alone).
func scanKeyMem(dst []byte, i uint64) []byte {
	x := i + 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	for j := range 8 {
		dst[j] = byte(x >> (56 - 8*j))
		dst[8+j] = byte(i >> (56 - 8*j))
	}
	return dst[:16]
}
