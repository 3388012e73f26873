package segstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// logKeys fills s with keys log-0000.. in order, sealing every per keys, as
// a log store does; it returns the number of sealed segments.
func logKeys(t *testing.T, s *Store, n, per int) int {
	t.Helper()
	for i := range n {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("log-%04d", i)), []byte(strings.Repeat("v", 50))))
		if (i+1)%per == 0 {
			require.NoError(t, s.Seal())
		}
	}
	return len(s.Segments())
}

// segmentFiles returns the paths of the data files of s's sealed segments.
func segmentFiles(s *Store, dir string) []string {
	var out []string
	for _, sg := range s.Segments() {
		out = append(out, dir+"/"+segment.DataName(sg.ID, segment.KindLog))
	}
	return out
}

func existing(fsys vfs.FS, paths []string) (n int) {
	for _, p := range paths {
		if _, err := fsys.Stat(p); err == nil {
			n++
		}
	}
	return n
}

// Under SyncAlways a DeleteRange drops the sealed segments it covers whole
// before it returns: their files are gone, reads agree, and so do a reopen
// and a crash image taken right after.
func TestDeleteRangeDropsCoveredSegmentsAtOnce(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	require.Equal(t, 10, logKeys(t, s, 1000, 100))
	files := segmentFiles(s, "/db")
	require.Equal(t, 10, existing(mem, files))

	// The head: log-0000 up to log-0549; five segments are covered whole,
	// the sixth only in part.
	require.NoError(t, s.DeleteRange([]byte("log-"), []byte("log-0550")))
	require.Equal(t, int64(5), s.Metrics().RangeDropped)
	require.Len(t, s.Segments(), 5+1, "five left, and the sealed segment holding the tombstone")
	require.Equal(t, 5, existing(mem, files), "the covered files are removed")
	check := func(s *Store) {
		t.Helper()
		for _, k := range []string{"log-0000", "log-0499", "log-0549"} {
			_, err := s.Get([]byte(k))
			require.ErrorIs(t, err, ErrNotFound, k)
		}
		for _, k := range []string{"log-0550", "log-0999"} {
			_, err := s.Get([]byte(k))
			require.NoError(t, err, k)
		}
	}
	check(s)
	img := mem.CrashClone(vfs.CrashDropUnsynced, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, s.Close())
	s = mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	check(s)
	require.Len(t, s.Segments(), 5+1)
	require.NoError(t, s.Close())
	s = mustOpen(t, "/db", &Options{FS: img, Merge: MergeOptions{Disable: true}})
	check(s)
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
}

// A snapshot taken before the drop keeps seeing the dropped segments' keys
// and keeps their files until it is closed.
func TestDeleteRangeDropKeepsSnapshots(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	defer s.Close()
	logKeys(t, s, 300, 100)
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	var covered []string // the files of the two segments the drop covers
	for _, sg := range s.Segments()[:2] {
		covered = append(covered, "/db/"+segment.DataName(sg.ID, segment.KindLog))
	}
	exist := func() (n int) {
		for _, p := range covered {
			if _, err := mem.Stat(p); err == nil {
				n++
			}
		}
		return n
	}
	require.Equal(t, 2, exist())
	require.NoError(t, s.DeleteRange([]byte("log-"), []byte("log-0200")))
	require.Equal(t, int64(2), s.Metrics().RangeDropped)
	v, err := sn.Get([]byte("log-0042"))
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("v", 50), string(v))
	require.Equal(t, 2, exist(), "pinned by the snapshot")
	require.NoError(t, sn.Close())
	require.Zero(t, exist(), "removed once the snapshot is closed")
}

// Without SyncAlways the tombstone is not durable when DeleteRange returns,
// so nothing is dropped before it is: the seal that makes it durable drops
// the covered segments.
func TestDeleteRangeDropWaitsForDurability(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: mem, Sync: SyncManual, Merge: MergeOptions{Disable: true}})
	defer s.Close()
	logKeys(t, s, 300, 100)
	require.NoError(t, s.DeleteRange([]byte("log-"), []byte("log-0200")))
	require.Zero(t, s.Metrics().RangeDropped)
	require.Len(t, s.Segments(), 3)
	require.NoError(t, s.Seal())
	require.Equal(t, int64(2), s.Metrics().RangeDropped)
}

// Writes in the same batch after the tombstone, and segments that hold
// keys outside it, survive; a tombstone that covers a newer segment's
// tombstone and keys drops that segment too, and reads agree with a model.
func TestDeleteRangeDropModel(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	defer s.Close()
	logKeys(t, s, 300, 100)
	b := s.NewBatch()
	require.NoError(t, b.DeleteRange([]byte("log-"), []byte("log-0250")))
	require.NoError(t, b.Put([]byte("log-0001"), []byte("after")))
	require.NoError(t, s.Apply(b))
	require.Equal(t, int64(2), s.Metrics().RangeDropped) // log-0000..0199
	v, err := s.Get([]byte("log-0001"))
	require.NoError(t, err)
	require.Equal(t, "after", string(v))
	require.NoError(t, s.Seal()) // {tombstone, log-0001}: not dropped by its own tombstone
	v, err = s.Get([]byte("log-0001"))
	require.NoError(t, err)
	require.Equal(t, "after", string(v))
	_, err = s.Get([]byte("log-0200"))
	require.ErrorIs(t, err, ErrNotFound)
	// A wider head truncation covers that segment (its tombstone and key)
	// and drops it; log-0250.. stay.
	before := s.Metrics().RangeDropped
	require.NoError(t, s.DeleteRange([]byte("log-"), []byte("log-0260")))
	require.Equal(t, before+1, s.Metrics().RangeDropped)
	_, err = s.Get([]byte("log-0001"))
	require.ErrorIs(t, err, ErrNotFound)
	v, err = s.Get([]byte("log-0260"))
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("v", 50), string(v))
	require.NoError(t, s.Check())
}
