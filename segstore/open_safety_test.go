package segstore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/internal/testutil"
)

// treeDigest is dirDigest for a directory that may hold subdirectories:
// every entry's name, kind and content, recursively.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			fmt.Fprintf(h, "dir %s\n", rel)
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "file %s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	require.NoError(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// issueStore makes the issue's store: Put a, Seal, Put b, Close. It
// returns the path of its only manifest generation.
func issueStore(t *testing.T, dir string) string {
	t.Helper()
	s := mustOpen(t, dir, &Options{Merge: MergeOptions{Disable: true}})
	require.NoError(t, s.Put([]byte("a"), []byte("1")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Put([]byte("b"), []byte("2")))
	require.NoError(t, s.Close())
	m := filepath.Join(dir, "MANIFEST-0000000000000001")
	_, err := os.Stat(m)
	require.NoError(t, err, "a store that never rotated: generation 1 alone")
	return m
}

// requireRefusedUnchanged opens dir read-only and writable and requires
// both to fail with a *CorruptionError whose text holds want, leaving the
// directory exactly as it was.
func requireRefusedUnchanged(t *testing.T, dir, want string) {
	t.Helper()
	before := treeDigest(t, dir)
	for _, ro := range []bool{false, true} {
		s, err := Open(dir, &Options{ReadOnly: ro})
		if err == nil {
			got := dumpStore(t, s)
			s.Close()
			t.Fatalf("read-only %v: Open succeeded with %d keys %v; want a refusal", ro, len(got), got)
		}
		ce := testutil.RequireCorrupt(t, err, "read-only %v", ro)
		require.Contains(t, err.Error(), want, "read-only %v: the error should name the cause", ro)
		require.NotNil(t, ce)
		require.Equal(t, before, treeDigest(t, dir), "read-only %v: the refused open changed the directory", ro)
	}
}

// TestOpenRefusesRenamedManifest is issue 28 item 4: the store's only
// manifest renamed to another name starting with MANIFEST- used to pass
// the "data without a manifest" refusal (any MANIFEST- prefix counted) and
// be ignored by the manifest log (only canonical names count), which then
// created an empty generation; recovery removed every data file as an
// orphan. Open must refuse, name the file, and change nothing.
func TestOpenRefusesRenamedManifest(t *testing.T) {
	for _, name := range []string{
		"MANIFEST-0000000000000001.bak",
		"MANIFEST-1",
		"MANIFEST-backup",
		"MANIFEST-00000000000000001", // 17 digits
		"MANIFEST-000000000000000A",  // upper-case hex
		"MANIFEST-",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			m := issueStore(t, dir)
			require.NoError(t, os.Rename(m, filepath.Join(dir, name)))
			requireRefusedUnchanged(t, dir, name)

			// Put back, the store is whole.
			require.NoError(t, os.Rename(filepath.Join(dir, name), m))
			s := mustOpen(t, dir, nil)
			require.Equal(t, map[string]string{"a": "1", "b": "2"}, dumpStore(t, s))
			require.NoError(t, s.Close())
		})
	}
}

// TestOpenRefusesStrayManifestName: a non-canonical MANIFEST-* name beside
// a valid generation and data files (a copy kept by hand, or a renamed
// newer generation beside an older one) is refused too: Open cannot tell
// which manifest the data files belong to, and taking the wrong one would
// remove files as uncommitted.
func TestOpenRefusesStrayManifestName(t *testing.T) {
	dir := t.TempDir()
	m := issueStore(t, dir)
	b, err := os.ReadFile(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(m+".bak", b, 0o644))
	requireRefusedUnchanged(t, dir, "MANIFEST-0000000000000001.bak")
}

// TestOpenManifestRenamedToAnotherGeneration: the manifest renamed to the
// canonical name of another generation says so in its header.
func TestOpenManifestRenamedToAnotherGeneration(t *testing.T) {
	dir := t.TempDir()
	m := issueStore(t, dir)
	other := filepath.Join(dir, "MANIFEST-0000000000000007")
	require.NoError(t, os.Rename(m, other))
	requireRefusedUnchanged(t, dir, "MANIFEST-0000000000000007")
}

// TestOpenGarbageNewerManifest: a garbage file with the canonical name of
// a newer generation beside the real one is what a crash inside a rotation
// can leave (a new generation never activated): Open keeps every write and
// every data file.
func TestOpenGarbageNewerManifest(t *testing.T) {
	dir := t.TempDir()
	issueStore(t, dir)
	junk := make([]byte, 300)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "MANIFEST-0000000000000009"), junk, 0o644))
	data := storeFiles(t, dir)
	for _, ro := range []bool{true, false} {
		s, err := Open(dir, &Options{ReadOnly: ro, Merge: MergeOptions{Disable: true}})
		require.NoError(t, err, "read-only %v", ro)
		require.Equal(t, map[string]string{"a": "1", "b": "2"}, dumpStore(t, s), "read-only %v", ro)
		require.NoError(t, s.Close())
		for _, p := range data {
			_, err := os.Stat(p)
			require.NoError(t, err, "read-only %v: data file removed", ro)
		}
	}
}

// TestOpenRemovedManifestIsRefused: with no MANIFEST-* file at all, and
// with only index files left beside it (an index is a data file for this
// rule: only a store with a manifest writes one).
func TestOpenRemovedManifestIsRefused(t *testing.T) {
	t.Run("all files", func(t *testing.T) {
		dir := t.TempDir()
		m := issueStore(t, dir)
		require.NoError(t, os.Remove(m))
		requireRefusedUnchanged(t, dir, "no manifest")
	})
	t.Run("indexes only", func(t *testing.T) {
		dir := t.TempDir()
		m := issueStore(t, dir)
		require.NoError(t, os.Remove(m))
		for _, p := range storeFiles(t, dir) {
			if !strings.HasSuffix(p, ".idx") {
				require.NoError(t, os.Remove(p))
			}
		}
		requireRefusedUnchanged(t, dir, ".idx")
	})
}

// TestOpenDataFileRenamed: a sealed segment's data file renamed to another
// id is missing where the manifest names it: refused, and the renamed file
// (which the manifest does not name) is not removed as an orphan.
func TestOpenDataFileRenamed(t *testing.T) {
	for _, to := range []string{"00000000000000ff.log", "00000000000000ff.seg"} {
		t.Run(to, func(t *testing.T) {
			dir := t.TempDir()
			issueStore(t, dir)
			s := mustOpen(t, dir, &Options{ReadOnly: true})
			segs := s.Segments()
			require.NoError(t, s.Close())
			require.Len(t, segs, 1)
			from := filepath.Join(dir, fmt.Sprintf("%016x.log", segs[0].ID))
			require.NoError(t, os.Rename(from, filepath.Join(dir, to)))
			requireRefusedUnchanged(t, dir, from)
		})
	}
}

// TestOpenIndexIsDirectory is issue 28 item 6: a directory where a
// segment's index file belongs made a writable Open fail with a bare "file
// exists" (the rename of the rebuilt index onto it). Open refuses with a
// typed error naming the path, read-only too, and never removes the
// directory (the store did not create it).
func TestOpenIndexIsDirectory(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("nonempty=%v", full), func(t *testing.T) {
			dir := t.TempDir()
			issueStore(t, dir)
			s := mustOpen(t, dir, &Options{ReadOnly: true})
			segs := s.Segments()
			require.NoError(t, s.Close())
			require.Len(t, segs, 1)
			ix := filepath.Join(dir, fmt.Sprintf("%016x.idx", segs[0].ID))
			require.NoError(t, os.Remove(ix))
			require.NoError(t, os.Mkdir(ix, 0o755))
			if full {
				require.NoError(t, os.WriteFile(filepath.Join(ix, "x"), []byte("x"), 0o644))
			}
			requireRefusedUnchanged(t, dir, ix)

			// Moved away, the index is rebuilt.
			require.NoError(t, os.RemoveAll(ix))
			s = mustOpen(t, dir, nil)
			require.Equal(t, map[string]string{"a": "1", "b": "2"}, dumpStore(t, s))
			require.NoError(t, s.Close())
		})
	}
}

// TestOpenNeverRemovesDirectories: a directory named like a file recovery
// removes (a stray index, an uncommitted output, an unused spare, an index
// rebuild's temporary file) is not the store's: Open refuses, naming it,
// and removes nothing, empty or not.
func TestOpenNeverRemovesDirectories(t *testing.T) {
	for _, name := range []string{"00000000000000f0.idx", "00000000000000f0.seg", "00000000000000f0.log", "0000000000000001.idx.rebuild"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			issueStore(t, dir)
			p := filepath.Join(dir, name)
			require.NoError(t, os.Mkdir(p, 0o755))
			requireRefusedUnchanged(t, dir, p)
		})
	}
}

// storeFiles lists the store's data and index files.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".log", ".seg", ".idx":
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	require.NotEmpty(t, out)
	return out
}

var _ = errors.Is
var _ = corruption.ErrCorrupt
