package wal

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/segkv/segkv/vfs"
)

// BenchmarkCommit measures durable commits (Sync: true, 128-byte payloads,
// about one small put) on the real disk, with 1 and 32 concurrent
// committers, appending to a growing file and overwriting a preallocated
// one. syncs/op shows how many commits share one fdatasync.
func BenchmarkCommit(b *testing.B) {
	for _, prealloc := range []bool{false, true} {
		for _, goroutines := range []int{1, 32} {
			name := fmt.Sprintf("grow/goroutines=%d", goroutines)
			if prealloc {
				name = fmt.Sprintf("prealloc/goroutines=%d", goroutines)
			}
			b.Run(name, func(b *testing.B) { benchCommit(b, goroutines, prealloc) })
		}
	}
}

func benchCommit(b *testing.B, goroutines int, prealloc bool) {
	const payloadSize = 128
	fs := vfs.NewOS()
	path := filepath.Join(b.TempDir(), "live.log")
	of, err := fs.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer of.Close()
	if prealloc {
		if err := of.Preallocate(0, max(64<<20, int64(b.N)*(HeaderSize+payloadSize))); err != nil {
			b.Fatal(err)
		}
		if err := of.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	f := &testFile{File: of}
	w := NewWriter(f, path, 0, 0, Options{})
	payload := make([]byte, payloadSize)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.SetBytes(payloadSize)
	b.ResetTimer()
	for range goroutines {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := w.Commit(&Request{Payload: payload, Sync: true}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(f.syncs.Load())/float64(b.N), "syncs/op")
	b.ReportMetric(float64(f.writes.Load())/float64(b.N), "writes/op")
}
