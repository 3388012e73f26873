package segstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// dirDigest hashes every file of dir, names, sizes and contents, so that a
// test can tell that nothing at all changed.
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	h := sha256.New()
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		fmt.Fprintf(h, "%s %d\n", e.Name(), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// dumpStore reads every key with an iterator and every key again with Get.
func dumpStore(t *testing.T, s *Store) map[string]string {
	t.Helper()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	out := dumpIter(t, it)
	for k, v := range out {
		got, err := s.Get([]byte(k))
		require.NoError(t, err)
		require.Equal(t, v, string(got), "key %q", k)
	}
	return out
}

// dumpIter reads every key and value of it, then closes it.
func dumpIter(t *testing.T, it *Iterator) map[string]string {
	t.Helper()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		out[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	return out
}

// copyStoreDir copies the regular files of src into a new directory.
func copyStoreDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return dst
}

func appendTo(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(b)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// damagedStore writes a store with sealed segments and live writes, closes
// it, then leaves it in every state a writable Open repairs: a torn tail on
// the live file and on the manifest log, one index missing and one
// torn, an interrupted index rebuild's temporary file, and an orphan
// segment and index a crash before their commit would leave.
func damagedStore(t *testing.T) (dir string, want map[string]string) {
	t.Helper()
	dir = t.TempDir()
	s := mustOpen(t, dir, &Options{Merge: MergeOptions{Disable: true}})
	want = map[string]string{}
	for i := range 300 {
		k, v := fmt.Sprintf("key-%04d", i), strings.Repeat(fmt.Sprint(i), 1+i%7)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		want[k] = v
		if i%100 == 99 {
			require.NoError(t, s.Seal())
		}
	}
	require.NoError(t, s.Delete([]byte("key-0005")))
	delete(want, "key-0005")
	require.NoError(t, s.Put([]byte("key-0010"), []byte("live")))
	want["key-0010"] = "live"
	segs := s.Segments()
	require.GreaterOrEqual(t, len(segs), 3)
	require.NoError(t, s.Close())

	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var live, manifest string
	for _, e := range names {
		if _, ext, ok := segment.ParseName(e.Name()); ok && ext == segment.NameLog {
			live = filepath.Join(dir, e.Name())
		}
		if strings.HasPrefix(e.Name(), "MANIFEST-") {
			manifest = filepath.Join(dir, e.Name()) // the newest comes last
		}
	}
	require.NotEmpty(t, live)
	require.NotEmpty(t, manifest)
	junk := bytes.Repeat([]byte{0xab}, 23) // no frame parses from it: a torn tail
	appendTo(t, live, junk)
	appendTo(t, manifest, junk)
	require.NoError(t, os.Remove(filepath.Join(dir, segment.IndexName(segs[0].ID))))
	ix1 := filepath.Join(dir, segment.IndexName(segs[1].ID))
	b, err := os.ReadFile(ix1)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ix1, b[:len(b)/2], 0o644)) // torn: its top block is gone
	require.NoError(t, os.WriteFile(filepath.Join(dir, segment.IndexName(segs[2].ID)+".rebuild"), []byte("partial"), 0o644))
	orphan := segs[len(segs)-1].ID + 1000
	require.NoError(t, os.WriteFile(filepath.Join(dir, segment.DataName(orphan, segment.KindSeg)), []byte("never committed"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, segment.IndexName(orphan)), []byte("never committed"), 0o644))
	return dir, want
}

func baseNames(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, filepath.Base(strings.SplitN(p, ": ", 2)[0]))
	}
	slices.Sort(out)
	return out
}

// A read-only Open of a store that needs every kind of repair changes no
// byte of the directory, answers what a writable Open answers after its
// repairs, reports what it would have repaired, and refuses every write.
func TestReadOnlyOpenRepairsNothing(t *testing.T) {
	dir, want := damagedStore(t)
	twin := copyStoreDir(t, dir)
	before := dirDigest(t, dir)

	ro, err := Open(dir, &Options{ReadOnly: true})
	require.NoError(t, err)
	got := dumpStore(t, ro)
	require.Equal(t, want, got)
	_, err = ro.Get([]byte("key-0005"))
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, ro.Check())
	rep := ro.RecoveryReport()
	require.True(t, rep.ReadOnly)
	require.True(t, rep.Repaired())
	require.Len(t, rep.TornTails, 1)
	require.Len(t, rep.RebuiltIndexes, 2)
	require.NotEmpty(t, rep.ManifestActions)

	// Every write is refused.
	ctx := context.Background()
	require.ErrorIs(t, ro.Put([]byte("k"), []byte("v")), ErrReadOnly)
	require.ErrorIs(t, ro.Delete([]byte("k")), ErrReadOnly)
	require.ErrorIs(t, ro.DeleteRange([]byte("a"), []byte("z")), ErrReadOnly)
	b := ro.NewBatch()
	require.NoError(t, b.Put([]byte("k"), []byte("v")))
	require.ErrorIs(t, ro.Apply(b), ErrReadOnly)
	require.ErrorIs(t, ro.Seal(), ErrReadOnly)
	require.ErrorIs(t, ro.Sync(), ErrReadOnly)
	require.ErrorIs(t, ro.Compact(ctx), ErrReadOnly)
	_, err = ro.Import(ctx)
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = ro.ReplaceAll(ctx, nil)
	require.ErrorIs(t, err, ErrReadOnly)
	_, err = ro.NewSealedSnapshot()
	require.ErrorIs(t, err, ErrReadOnly)
	// Reads other than Get work: a snapshot, an export of a segment.
	sn, err := ro.NewSnapshot()
	require.NoError(t, err)
	v, err := sn.Get([]byte("key-0010"))
	require.NoError(t, err)
	require.Equal(t, "live", string(v))
	require.NoError(t, sn.Close())
	var buf bytes.Buffer
	_, err = ro.Export(ctx, ro.Segments()[0].ID, &buf)
	require.NoError(t, err)
	require.NoError(t, ro.Close())

	require.Equal(t, before, dirDigest(t, dir), "a read-only open changed the directory")

	// The same damage opened writable: repaired, and the same answers.
	rw, err := Open(twin, nil)
	require.NoError(t, err)
	require.Equal(t, want, dumpStore(t, rw))
	wrep := rw.RecoveryReport()
	require.False(t, wrep.ReadOnly)
	require.Equal(t, baseNames(rep.RemovedFiles), baseNames(wrep.RemovedFiles))
	require.Equal(t, baseNames(rep.RebuiltIndexes), baseNames(wrep.RebuiltIndexes))
	require.Len(t, wrep.TornTails, 1)
	require.Equal(t, filepath.Base(rep.TornTails[0].Path), filepath.Base(wrep.TornTails[0].Path))
	require.Equal(t, rep.TornTails[0].Offset, wrep.TornTails[0].Offset)
	require.Equal(t, len(rep.ManifestActions), len(wrep.ManifestActions))
	require.NoError(t, rw.Close())
	require.NotEqual(t, before, dirDigest(t, twin), "the writable open was expected to repair")
}

// A read-only Open and a writable one exclude each other, both ways.
func TestReadOnlyOpenLocking(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, dir, nil)
	require.NoError(t, w.Put([]byte("a"), []byte("1")))
	_, err := Open(dir, &Options{ReadOnly: true})
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, w.Close())

	ro := mustOpen(t, dir, &Options{ReadOnly: true})
	_, err = Open(dir, nil)
	require.ErrorIs(t, err, ErrLocked)
	_, err = Open(dir, &Options{ReadOnly: true})
	require.ErrorIs(t, err, ErrLocked)
	v, err := ro.Get([]byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
	require.NoError(t, ro.Close())
	require.ErrorIs(t, ro.Close(), ErrClosed)
	w = mustOpen(t, dir, nil)
	require.NoError(t, w.Close())
}

// A read-only Open creates nothing: a missing directory stays missing and an
// empty one holds no store.
func TestReadOnlyOpenNeedsAStore(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := Open(missing, &Options{ReadOnly: true})
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, statErr := os.Stat(missing)
	require.ErrorIs(t, statErr, fs.ErrNotExist)

	empty := t.TempDir()
	_, err = Open(empty, &Options{ReadOnly: true})
	require.ErrorIs(t, err, fs.ErrNotExist)
	ents, err := os.ReadDir(empty)
	require.NoError(t, err)
	for _, e := range ents {
		require.Equal(t, lockName, e.Name(), "only the lock file may be created")
	}
}

// memFiles is every file of dir in fsys with its contents.
func memFiles(t *testing.T, fsys *vfs.Mem, dir string) map[string]string {
	t.Helper()
	names, err := fsys.List(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range names {
		b, err := fsys.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		out[n] = string(b)
	}
	return out
}

// After a crash between a seal's switch and its manifest commit, a
// read-only Open serves the live chain as it is (the file being sealed and
// its continuation), seals nothing, and answers what a writable Open does.
func TestReadOnlyOpenServesTheLiveChain(t *testing.T) {
	img, _, want := epContinuation(t)
	twin := img.CrashClone(vfs.CrashDropUnsynced, nil) // a crash image holds only durable state
	before := memFiles(t, img, "/db")

	ro, err := Open("/db", &Options{FS: img, ReadOnly: true})
	require.NoError(t, err)
	got := dumpStore(t, ro)
	require.Equal(t, map[string]string(want), got)
	require.NoError(t, ro.Check())
	require.Empty(t, ro.Segments(), "nothing was sealed")
	require.NoError(t, ro.Close())
	require.Equal(t, before, memFiles(t, img, "/db"), "a read-only open changed the directory")

	rw, err := Open("/db", &Options{FS: twin})
	require.NoError(t, err)
	require.Equal(t, got, dumpStore(t, rw))
	require.Len(t, rw.Segments(), 1, "the writable open finished the seal")
	require.NoError(t, rw.Close())
}
