package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/segkv/segkv/segstore"
)

func sh(t *testing.T, want int, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb, false); code != want {
		t.Fatalf("segbackup %v: exit %d, want %d; stderr %s", args, code, want, errb.String())
	}
	return out.String()
}

func writeStore(t *testing.T, dir string, from, to int) {
	s, err := segstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < to; i++ {
		if err := s.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, dir string) int {
	s, err := segstore.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	var ierr error
	for range s.All(&ierr) {
		n++
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

func TestCommandLine(t *testing.T) {
	root := t.TempDir()
	store, bk := filepath.Join(root, "store"), filepath.Join(root, "bk")
	writeStore(t, store, 0, 100)
	var first struct{ Seq uint64 }
	if err := json.Unmarshal([]byte(sh(t, 0, "run", "-store", store, "-to", bk, "-once", "-json")), &first); err != nil {
		t.Fatal(err)
	}
	writeStore(t, store, 100, 150)
	sh(t, 0, "run", "-store", store, "-to", bk, "-once")
	r1 := filepath.Join(root, "r1")
	sh(t, 0, "restore", "-from", bk, "-to", r1)
	if n := count(t, r1); n != 150 {
		t.Fatalf("latest restore holds %d keys", n)
	}
	r0 := filepath.Join(root, "r0")
	sh(t, 0, "restore", "-from", bk, "-to", r0, "-seq", fmt.Sprint(first.Seq))
	if n := count(t, r0); n != 100 {
		t.Fatalf("restore at seq %d holds %d keys", first.Seq, n)
	}
	sh(t, 1, "restore", "-from", bk, "-to", r0) // not empty
	sh(t, 0, "prune", "-from", bk, "-keep-checkpoints", "1", "-json")
	sh(t, 2, "run", "-store", store)
	sh(t, 2, "bogus")
}
