package segstore_test

import (
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/segkv/segkv/segstore"
)

// Metrics is a point-in-time reading: counters only grow (a rate is the
// difference of two readings), gauges are current values.
func ExampleStore_Metrics() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := segstore.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	for _, k := range []string{"a", "b", "c"} {
		if err := s.Put([]byte(k), []byte("value")); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.Seal(); err != nil {
		log.Fatal(err)
	}
	s.Get([]byte("a"))
	s.Get([]byte("zzz")) // absent: the segment's bloom filter rules it out

	m := s.Metrics()
	fmt.Println("writes:", m.Writes, "seals:", m.Seals, "segments:", m.Segments)
	fmt.Println("gets:", m.Gets, "hits:", m.GetHits, "misses:", m.GetMisses, "bloom negatives:", m.BloomNegatives)
	fmt.Println("manifest commits:", m.ManifestCommits.Count, "failed:", m.Failed)
	// Output:
	// writes: 3 seals: 1 segments: 1
	// gets: 2 hits: 1 misses: 1 bloom negatives: 1
	// manifest commits: 1 failed: false
}

// An EventListener is a struct of optional funcs: set the ones you need.
// They run on the goroutine doing the work, so they must return quickly
// and must not call Seal, Compact, Import, Sync or Close.
func ExampleEventListener() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	var sealed atomic.Int64
	var failed atomic.Pointer[error]
	events := segstore.EventListener{
		SealEnd: func(info segstore.SealInfo) {
			if info.Err == nil {
				sealed.Add(info.Bytes)
			}
		},
		// Exactly once, with the I/O error that stopped writes: the place
		// to page someone, or to start a reopen.
		StoreFailed: func(info segstore.StoreFailedInfo) {
			failed.Store(&info.Err)
		},
	}
	s, err := segstore.Open(dir, &segstore.Options{Events: events})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		log.Fatal(err)
	}
	if err := s.Seal(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sealed bytes match the segment:", sealed.Load() == s.Segments()[0].Size)
	fmt.Println("failed:", failed.Load() != nil)
	// Output:
	// sealed bytes match the segment: true
	// failed: false
}

// The Logger gets lifecycle records at INFO (open, seal, merge, import,
// rotation, close), repairs and recovered failures at WARN, the store
// failing at ERROR; every figure is an attribute.
func ExampleOptions_logger() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A handler that prints message and level only, so that the output is
	// stable; a service would use slog.NewJSONHandler(os.Stderr, nil).
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.MessageKey || a.Key == slog.LevelKey {
				return a
			}
			return slog.Attr{}
		},
	}))
	s, err := segstore.Open(dir, &segstore.Options{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		log.Fatal(err)
	}
	if err := s.Seal(); err != nil {
		log.Fatal(err)
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// level=INFO msg="segkv: opened store"
	// level=INFO msg="segkv: sealed segment"
	// level=INFO msg="segkv: closed store"
}
