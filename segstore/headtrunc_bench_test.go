package segstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/segkv/segkv/vfs"
)

// BenchmarkHeadTruncation measures deleting the head of an append-only
// keyspace (a log): 1M sequential keys (16-byte keys, 100-byte values) in
// 64 MiB segments, then the first 990k deleted, made durable by a seal, on
// the real file system. "range" is one DeleteRange; "points" is 990k point
// Deletes in batches of 1000, the only way before DeleteRange. Each reports
// the time to durable, the bytes written, and the data files freed (gone
// from the directory once the store is closed) with their sizes; point
// deletes free nothing until merges rewrite the segments.
//
//	go test -run x -bench HeadTruncation -benchtime 1x ./segstore/
func BenchmarkHeadTruncation(b *testing.B) {
	const total, head = 1_000_000, 990_000
	key := func(i int) []byte {
		k := make([]byte, 16)
		copy(k, "log-")
		for j, x := 15, i; j >= 4; j-- {
			k[j] = byte('0' + x%10)
			x /= 10
		}
		return k
	}
	value := make([]byte, 100)
	for _, mode := range []string{"range", "points"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				dir := b.TempDir()
				cfs := vfs.NewCounting(vfs.NewOS())
				s, err := Open(dir, &Options{FS: cfs, Sync: SyncManual, SegmentSize: 64 << 20, Merge: MergeOptions{Disable: true}})
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < total; i += 1000 {
					bt := s.NewBatch()
					for j := i; j < i+1000; j++ {
						if err := bt.Put(key(j), value); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.Apply(bt); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Seal(); err != nil {
					b.Fatal(err)
				}
				// The sealed segments' data files: the only files a truncation
				// may free (the spare and the live file come and go anyway).
				before := map[string]int64{}
				s.mu.RLock()
				for _, sg := range s.mu.segs {
					before[filepath.Base(sg.df.path)] = sg.meta.DataLength
				}
				s.mu.RUnlock()
				cfs.Reset()
				start := time.Now()
				b.StartTimer()
				if mode == "range" {
					if err := s.DeleteRange(nil, key(head)); err != nil {
						b.Fatal(err)
					}
				} else {
					for i := 0; i < head; i += 1000 {
						bt := s.NewBatch()
						for j := i; j < i+1000; j++ {
							if err := bt.Delete(key(j)); err != nil {
								b.Fatal(err)
							}
						}
						if err := s.Apply(bt); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := s.Seal(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				elapsed := time.Since(start)
				var written int64
				for _, n := range cfs.Counts().BytesWritten {
					written += n
				}
				// The seal's tidy (index write, releasing preallocation) runs
				// in the background; Close waits for it.
				m := s.Metrics()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				after := dataFiles(b, dir)
				var freed int64
				files := 0
				for name, size := range before {
					if _, ok := after[name]; !ok {
						freed += size
						files++
					}
				}
				b.ReportMetric(elapsed.Seconds(), "s/truncate")
				b.ReportMetric(float64(written)/(1<<20), "MiB-written")
				b.ReportMetric(float64(freed)/(1<<20), "MiB-freed")
				b.ReportMetric(float64(files), "data-files-freed")
				b.ReportMetric(float64(m.RangeDropped), "segments-dropped")
			}
		})
	}
}

// dataFiles returns the data and index files in dir with their sizes.
func dataFiles(b *testing.B, dir string) map[string]int64 {
	b.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".log", ".seg", ".idx":
			fi, err := e.Info()
			if err != nil {
				b.Fatal(err)
			}
			out[e.Name()] = fi.Size()
		}
	}
	return out
}
