package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func shErr(t *testing.T, want int, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb, false); code != want {
		t.Fatalf("segbackup %v: exit %d, want %d; stderr %s", args, code, want, errb.String())
	}
	return errb.String()
}

func absent(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s was created (stat: %v)", p, err)
	}
}

// TestRunRefusesWhatIsNotAStore: a -store that does not exist or holds
// no store is an error, and nothing is created there or at -to (segstore
// would create a new store and back that up, exit 0).
func TestRunRefusesWhatIsNotAStore(t *testing.T) {
	root := t.TempDir()
	bk := filepath.Join(root, "bk")
	missing := filepath.Join(root, "typo")
	if e := shErr(t, 1, "run", "-store", missing, "-to", bk, "-once"); !strings.Contains(e, "no segkv store") {
		t.Fatalf("stderr %q", e)
	}
	absent(t, missing)
	absent(t, bk)
	other := filepath.Join(root, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	shErr(t, 1, "run", "-store", other, "-to", bk, "-once")
	if names, _ := os.ReadDir(other); len(names) != 1 {
		t.Fatalf("%s now holds %d entries", other, len(names))
	}
}

// TestRefusedLocations: a mem:// target (gone at exit), a malformed URL
// (not a directory named "scheme:"), and a -from path that does not exist
// (not created empty) are errors that leave nothing behind.
func TestRefusedLocations(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "store")
	writeStore(t, store, 0, 10)
	shErr(t, 2, "run", "-store", store, "-to", "mem://", "-once")
	shErr(t, 2, "run", "-store", store, "-to", filepath.Join(root, "bk"), "-poll", "-1s")
	shErr(t, 2, "run", "-store", store, "-to", filepath.Join(root, "bk"), "-seal", "-1s")
	absent(t, filepath.Join(root, "bk"))
	wd, _ := os.Getwd()
	t.Chdir(root)
	shErr(t, 1, "run", "-store", store, "-to", "://bucket", "-once")
	absent(t, filepath.Join(root, ":"))
	t.Chdir(wd)
	missing := filepath.Join(root, "nobackup")
	shErr(t, 1, "restore", "-from", missing, "-to", filepath.Join(root, "r"))
	absent(t, missing)
	absent(t, filepath.Join(root, "r"))
	shErr(t, 1, "prune", "-from", missing, "-keep-checkpoints", "1")
	absent(t, missing)
}
