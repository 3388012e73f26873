package segstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/segkv/segkv/segstore"
)

func Example() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The zero Options: durable writes (SyncAlways), 64 MiB segments,
	// background merging.
	s, err := segstore.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	if err := s.Put([]byte("user/1"), []byte("ada")); err != nil {
		log.Fatal(err)
	}
	v, err := s.Get([]byte("user/1"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", v)
	// Output: ada
}

func ExampleStore_Apply() {
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

	// A batch is all-or-nothing, across crashes too, and costs one
	// fdatasync however many operations it holds.
	b := s.NewBatch()
	b.Put([]byte("account/a"), []byte("90"))
	b.Put([]byte("account/b"), []byte("110"))
	b.Delete([]byte("pending/a-to-b"))
	if err := s.Apply(b); err != nil {
		log.Fatal(err)
	}
	v, _ := s.Get([]byte("account/b"))
	fmt.Printf("%s\n", v)
	// Output: 110
}

func ExampleStore_NewIterator() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := segstore.Open(dir, &segstore.Options{Sync: segstore.SyncManual})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"log/1", "log/2", "log/3", "user/1"} {
		if err := s.Put([]byte(k), []byte("v")); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.Seal(); err != nil { // some keys in a sealed segment, some live
		log.Fatal(err)
	}
	if err := s.Put([]byte("log/4"), []byte("v")); err != nil {
		log.Fatal(err)
	}

	// The newest two log entries: walk the prefix backward.
	it, err := s.NewIterator(&segstore.IterOptions{Prefix: []byte("log/")})
	if err != nil {
		log.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.Last(); ok && n < 2; ok = it.Prev() {
		fmt.Printf("%s\n", it.Key())
		n++
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// log/4
	// log/3
}

func ExampleStore_Import() {
	src, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(src)
	dst, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dst)
	a, err := segstore.Open(src, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := segstore.Open(dst, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	// Seal on one side, ship the segments, adopt them on the other in one
	// atomic commit. A segment the peer already has is skipped.
	if err := a.Put([]byte("k"), []byte("from a")); err != nil {
		log.Fatal(err)
	}
	if err := a.Seal(); err != nil {
		log.Fatal(err)
	}
	var streams []*os.File
	for _, sg := range a.Segments() {
		f, err := os.CreateTemp("", "segkv-export")
		if err != nil {
			log.Fatal(err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if _, err := a.Export(context.Background(), sg.ID, f); err != nil {
			log.Fatal(err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			log.Fatal(err)
		}
		streams = append(streams, f)
	}
	added, err := b.Import(context.Background(), streams[0])
	if err != nil {
		log.Fatal(err)
	}
	v, _ := b.Get([]byte("k"))
	fmt.Printf("%d segment adopted; k = %s\n", len(added), v)
	// Output: 1 segment adopted; k = from a
}

// Trimming the head of a log: one DeleteRange deletes every entry below a
// point, whatever their number; once sealed, the segments that held only
// deleted entries are dropped whole.
func ExampleStore_DeleteRange() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := segstore.Open(dir, &segstore.Options{Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	for seg := range 3 {
		b := s.NewBatch()
		for i := range 100 {
			b.Put(fmt.Appendf(nil, "log/%04d", seg*100+i), []byte("entry"))
		}
		if err := s.Apply(b); err != nil {
			log.Fatal(err)
		}
		if err := s.Seal(); err != nil { // one segment per 100 entries
			log.Fatal(err)
		}
	}
	// Delete entries 0000-0149: the first segment whole, half the second.
	if err := s.DeleteRange([]byte("log/0000"), []byte("log/0150")); err != nil {
		log.Fatal(err)
	}
	if err := s.Seal(); err != nil {
		log.Fatal(err)
	}
	_, err = s.Get([]byte("log/0120"))
	fmt.Println(errors.Is(err, segstore.ErrNotFound))
	v, _ := s.Get([]byte("log/0150"))
	fmt.Printf("%s\n", v)
	fmt.Println("segments dropped whole:", s.Metrics().RangeDropped)
	// Output:
	// true
	// entry
	// segments dropped whole: 1
}
