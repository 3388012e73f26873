// Command gen writes one store of testdata/ and its expected dump. It is
// built at the OLD commit whose format the store is to hold (see
// testdata/README.md): copy this file into a worktree of that commit and run
//
//	go run ./testdata/gen -out /tmp/store -dump /tmp/store.dump [-range]
//
// It uses only the segstore API every commit since the manifest's format
// version 2 has (Open, Put, Delete, Seal, Compact, NewIterator, Get, Close),
// and DeleteRange through an interface check (it exists since data file
// version 2), so the same source builds at each of them. The workload is
// fixed: sealed segments (one of them merged), overwrites, point deletes,
// range tombstones when -range is set, and a live tail left unsealed. The
// dump is written by that old code before Close, so the compatibility test
// compares today's reads with what the writer itself served.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/segkv/segkv/segstore"
)

// candidates is how many keys the dump lists: every key the workload
// touches and a few it never writes.
const candidates = 120

func key(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }

// value varies in length so records do not all look alike.
func value(gen string, i int) []byte {
	return append(fmt.Appendf(nil, "%s-%03d-", gen, i), bytes.Repeat([]byte{'a' + byte(i%26)}, i%40)...)
}

type rangeDeleter interface {
	DeleteRange(start, end []byte) error
}

func main() {
	out := flag.String("out", "", "store directory to create (must not exist)")
	dump := flag.String("dump", "", "file to write the expected dump to")
	withRange := flag.Bool("range", false, "write range tombstones (data file version 2 and later)")
	flag.Parse()
	if *out == "" || *dump == "" {
		log.Fatal("gen: -out and -dump are required")
	}
	if _, err := os.Stat(*out); !errors.Is(err, os.ErrNotExist) {
		log.Fatalf("gen: %s exists", *out)
	}
	s, err := segstore.Open(*out, &segstore.Options{
		Sync:        segstore.SyncAlways,
		SegmentSize: 64 << 10, // no automatic seal: the workload seals where it says
		Merge:       segstore.MergeOptions{Disable: true},
	})
	must(err)
	dr, canRange := any(s).(rangeDeleter)
	if *withRange && !canRange {
		log.Fatal("gen: -range given but this commit has no DeleteRange")
	}

	// Segment 1: the first 60 keys.
	for i := range 60 {
		must(s.Put(key(i), value("v1", i)))
	}
	must(s.Seal())
	// Segment 2: overwrites, deletes, new keys.
	for i := range 20 {
		must(s.Put(key(i), value("v2", i)))
	}
	for i := 20; i < 30; i++ {
		must(s.Delete(key(i)))
	}
	for i := 60; i < 80; i++ {
		must(s.Put(key(i), value("v1", i)))
	}
	must(s.Seal())
	// Merge segments 1 and 2 into one.
	must(s.Compact(context.Background()))
	// Segment 3, not merged: a delete and an overwrite of merged keys, new
	// keys, and a range tombstone with a key written again after it.
	for i := 80; i < 100; i++ {
		must(s.Put(key(i), value("v1", i)))
	}
	must(s.Delete(key(40)))
	must(s.Put(key(41), value("v3", 41)))
	if *withRange {
		must(dr.DeleteRange(key(50), key(55)))
		must(s.Put(key(52), value("v3", 52)))
	}
	must(s.Seal())
	// The live tail, left unsealed.
	for i := 100; i < 110; i++ {
		must(s.Put(key(i), value("v1", i)))
	}
	must(s.Delete(key(1)))
	must(s.Put(key(2), value("v4", 2)))
	if *withRange {
		must(dr.DeleteRange(key(70), key(75)))
		must(dr.DeleteRange(key(105), key(107)))
		must(s.Put(key(106), value("v4", 106)))
	}
	must(s.Sync())

	var b bytes.Buffer
	fmt.Fprintf(&b, "# get: every candidate key\n")
	for i := range candidates {
		v, err := s.Get(key(i))
		switch {
		case errors.Is(err, segstore.ErrNotFound):
			fmt.Fprintf(&b, "get %x -\n", key(i))
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Fprintf(&b, "get %x %x\n", key(i), v)
		}
	}
	fmt.Fprintf(&b, "# scan: every key in order\n")
	it, err := s.NewIterator(nil)
	must(err)
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		must(err)
		fmt.Fprintf(&b, "scan %x %x\n", it.Key(), v)
	}
	must(it.Err())
	must(it.Close())
	must(os.WriteFile(*dump, b.Bytes(), 0o644))
	must(s.Close())
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
