package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// exportAll exports every sealed segment of s.
func exportAll(t testing.TB, s *Store) [][]byte {
	t.Helper()
	var out [][]byte
	for _, si := range s.Segments() {
		var buf bytes.Buffer
		n, err := s.Export(context.Background(), si.ID, &buf)
		require.NoError(t, err)
		require.Equal(t, si.Size, n)
		out = append(out, buf.Bytes())
	}
	return out
}

func readers(streams [][]byte) []io.Reader {
	rs := make([]io.Reader, len(streams))
	for i, b := range streams {
		rs[i] = bytes.NewReader(b)
	}
	return rs
}

func TestExportImportRoundTrip(t *testing.T) {
	a := mustOpen(t, "/a", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	m := model{}
	for i := 0; i < 500; i++ {
		k, v := fmt.Sprintf("key-%03d", i%170), fmt.Sprintf("value-%d", i)
		if i%7 == 0 {
			require.NoError(t, a.Delete([]byte(k)))
			delete(m, k)
		} else {
			require.NoError(t, a.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		if i%50 == 49 {
			require.NoError(t, a.Seal())
		}
	}
	streams := exportAll(t, a)
	require.Len(t, streams, 10)

	bfs := vfs.NewCounting(vfs.NewMem())
	// Merging is off so that the imported segments keep their digests: the
	// skip-by-digest rule applies to segments still present (see docs/SYNC.md).
	b := mustOpen(t, "/b", &Options{FS: bfs, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	infos, err := b.Import(context.Background(), readers(streams)...)
	require.NoError(t, err)
	require.Len(t, infos, 10)
	for i, si := range a.Segments() {
		require.Equal(t, si.Digest, infos[i].Digest, "same content, same digest")
	}
	require.NoError(t, diff(b, m, 170))

	// Re-running the sync adopts nothing new.
	seq := b.ManifestSeq()
	infos, err = b.Import(context.Background(), readers(streams)...)
	require.NoError(t, err)
	require.Empty(t, infos)
	require.Equal(t, seq, b.ManifestSeq())
	checkAndClose(t, b)
	b = mustOpen(t, "/b", &Options{FS: bfs, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	require.NoError(t, diff(b, m, 170))
	checkAndClose(t, b)
	checkAndClose(t, a)
}

// TestImportBatchCost checks that importing N segments in one call costs one
// manifest commit and one directory sync, and manifest bytes linear in N.
func TestImportBatchCost(t *testing.T) {
	src := mustOpen(t, "/src", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	const maxN = 1000
	for i := 0; i < maxN; i++ {
		require.NoError(t, src.Put([]byte(fmt.Sprintf("key-%05d", i)), []byte("v")))
		require.NoError(t, src.Seal())
	}
	streams := exportAll(t, src)
	require.Len(t, streams, maxN)
	checkAndClose(t, src)

	perSeg := map[int]float64{}
	for _, n := range []int{1, 10, 100, 1000} {
		cfs := vfs.NewCounting(vfs.NewMem())
		dst := mustOpen(t, "/dst", &Options{FS: cfs, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
		// Let the background spare settle so its syncs are not counted.
		require.Eventually(t, func() bool { return dst.Metrics().SparesMade >= 1 }, timeout, tick)
		cfs.Reset()
		rotations := func() uint64 {
			// A large import may start a manifest rotation in the background,
			// with a directory sync of its own: wait for it and count it, so
			// that only the import's barriers are measured, however the two
			// goroutines are scheduled.
			var st manifestlog.Stats
			require.Eventually(t, func() bool { st = dst.mlog.Stats(); return !st.Rotating }, timeout, tick)
			return st.Rotations + st.RotationFailures
		}
		rotBefore := rotations()
		seq := dst.ManifestSeq()
		infos, err := dst.Import(context.Background(), readers(streams[:n])...)
		require.NoError(t, err)
		require.Len(t, infos, n)
		rotDirSyncs := int64(rotations() - rotBefore)
		c := cfs.Counts()
		require.Equal(t, seq+1, dst.ManifestSeq(), "one manifest commit for %d segments", n)
		require.EqualValues(t, 1, c.DirSyncs-rotDirSyncs, "one directory sync for %d segments (besides %d of manifest rotations)", n, rotDirSyncs)
		var manifestBytes int64
		for p, b := range c.BytesWritten {
			if strings.Contains(p, "MANIFEST-") {
				manifestBytes += b
			}
		}
		perSeg[n] = float64(manifestBytes) / float64(n)
		t.Logf("import of %4d segments: %d file syncs, %d dir syncs, %d manifest bytes (%.0f per segment)",
			n, c.Syncs, c.DirSyncs, manifestBytes, perSeg[n])
		checkAndClose(t, dst)
	}
	// Linear: per-segment manifest bytes do not grow with N.
	require.Less(t, perSeg[1000], 2*perSeg[10])
}

func TestImportRejectsBadStreams(t *testing.T) {
	src := mustOpen(t, "/src", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, MaxKeySize: 1024, MaxValueSize: 1 << 20})
	require.NoError(t, src.Put([]byte("a"), []byte("1")))
	require.NoError(t, src.Put([]byte("big"), bytes.Repeat([]byte("v"), 2000)))
	require.NoError(t, src.Seal())
	good := exportAll(t, src)[0]
	checkAndClose(t, src)

	flip := func(off int) []byte {
		b := bytes.Clone(good)
		b[off] ^= 0x40
		return b
	}
	cases := map[string][]byte{
		"bad checksum": flip(len(good) - 3),
		"truncated":    good[:len(good)-5],
		"wrong magic":  flip(0),
		"bad version":  flip(8),
		"empty":        {},
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			dst := mustOpen(t, "/dst", &Options{FS: mem, SegmentSize: 64 << 10, MaxValueSize: 1 << 20})
			require.NoError(t, dst.Put([]byte("local"), []byte("x")))
			waitSpare(t, dst, 1) // so that the background's spare is not taken for a leftover
			before, err := mem.List("/dst")
			require.NoError(t, err)
			seq := dst.ManifestSeq()
			_, err = dst.Import(context.Background(), bytes.NewReader(good), bytes.NewReader(bad))
			var ie *ImportError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, 1, ie.Stream, "the bad stream is named")
			require.ErrorIs(t, err, ErrCorrupt)
			require.Equal(t, seq, dst.ManifestSeq(), "nothing committed")
			require.Empty(t, dst.Segments())
			_, err = dst.Get([]byte("a"))
			require.ErrorIs(t, err, ErrNotFound, "nothing of the batch is visible")
			after, err := mem.List("/dst")
			require.NoError(t, err)
			require.ElementsMatch(t, before, after, "the batch's files are removed")
			checkAndClose(t, dst)
		})
	}

	t.Run("value over MaxValueSize", func(t *testing.T) {
		dst := mustOpen(t, "/dst2", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, MaxValueSize: 1000})
		_, err := dst.Import(context.Background(), bytes.NewReader(good))
		var ie *ImportError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, 0, ie.Stream)
		require.Greater(t, ie.Offset, int64(segment.HeaderSize))
		require.Empty(t, dst.Segments())
		checkAndClose(t, dst)
	})

	t.Run("cancelled", func(t *testing.T) {
		dst := mustOpen(t, "/dst3", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := dst.Import(ctx, bytes.NewReader(good))
		require.True(t, errors.Is(err, context.Canceled))
		require.Empty(t, dst.Segments())
		checkAndClose(t, dst)
	})
}

func TestChangesSince(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	seq0 := s.ManifestSeq()
	c := s.ChangesSince(seq0)
	require.True(t, c.Complete)
	require.Empty(t, c.Added)
	for i := 0; i < 3; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprint(i)), []byte("v")))
		require.NoError(t, s.Seal())
	}
	c = s.ChangesSince(seq0)
	require.True(t, c.Complete)
	require.Len(t, c.Added, 3)
	old := s.Segments()
	require.NoError(t, s.Compact(context.Background()))
	c2 := s.ChangesSince(c.Seq)
	require.True(t, c2.Complete)
	require.Len(t, c2.Added, 1)
	require.ElementsMatch(t, []uint64{old[0].ID, old[1].ID, old[2].ID}, c2.Removed)
	checkAndClose(t, s)
}
