package segstore_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/segkv/segkv/segstore"
)

// A snapshot reads the store as it was when it was taken, whatever is
// written afterwards.
func ExampleStore_NewSnapshot() {
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

	if err := s.Put([]byte("config"), []byte("v1")); err != nil {
		log.Fatal(err)
	}
	sn, err := s.NewSnapshot()
	if err != nil {
		log.Fatal(err)
	}
	defer sn.Close()
	if err := s.Put([]byte("config"), []byte("v2")); err != nil {
		log.Fatal(err)
	}

	then, _ := sn.Get([]byte("config"))
	now, _ := s.Get([]byte("config"))
	fmt.Printf("snapshot: %s, store: %s\n", then, now)
	// Output: snapshot: v1, store: v2
}

// All walks the store with a range loop. The loop closes its iterator when
// it ends, breaks included; the error that stopped it early lands in err.
// Keys and values are reused between iterations: clone what you keep.
func ExampleStore_All() {
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
	for _, k := range []string{"b", "a", "c", "d"} {
		if err := s.Put([]byte(k), []byte("value of "+k)); err != nil {
			log.Fatal(err)
		}
	}

	var walkErr error
	for k, v := range s.Range([]byte("b"), nil, &walkErr) {
		fmt.Printf("%s = %s\n", k, v)
		if string(k) == "c" {
			break
		}
	}
	if walkErr != nil {
		log.Fatal(walkErr)
	}
	// Output:
	// b = value of b
	// c = value of c
}

// Errors match the package's sentinels with errors.Is, whatever context
// wraps them; damage also carries its file and offset (errors.As).
func Example_errors() {
	dir, err := os.MkdirTemp("", "segkv-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := segstore.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		log.Fatal(err)
	}
	if err := s.Seal(); err != nil {
		log.Fatal(err)
	}
	_, err = s.Get([]byte("absent"))
	fmt.Println("absent key:", errors.Is(err, segstore.ErrNotFound))
	seg := s.Segments()[0]
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Close:", errors.Is(s.Put([]byte("k"), nil), segstore.ErrClosed))

	// A read-only store refuses writes.
	ro, err := segstore.Open(dir, &segstore.Options{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read-only:", errors.Is(ro.Put([]byte("k"), nil), segstore.ErrReadOnly))
	if err := ro.Close(); err != nil {
		log.Fatal(err)
	}

	// Damage a sealed segment behind the store's back: the read that
	// meets it says which file, and never returns a wrong value.
	path := filepath.Join(dir, fmt.Sprintf("%016x.log", seg.ID))
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	data[len(data)-2] ^= 0xff // inside the only record's value or checksum
	if err := os.WriteFile(path, data, 0o644); err != nil {
		log.Fatal(err)
	}
	s, err = segstore.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	_, err = s.Get([]byte("k"))
	var ce *segstore.CorruptionError
	if errors.As(err, &ce) {
		fmt.Println("corrupt:", errors.Is(err, segstore.ErrCorrupt), filepath.Base(ce.Path) == filepath.Base(path))
	}
	// A write after an I/O error fails the store: every later write
	// returns an error matching ErrFailed until it is reopened.
	if err := s.Put([]byte("k2"), []byte("v")); errors.Is(err, segstore.ErrFailed) {
		fmt.Println("failed store: reopen it")
	}
	// Output:
	// absent key: true
	// after Close: true
	// read-only: true
	// corrupt: true true
}
