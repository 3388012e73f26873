package legacy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

func fsyncs(c vfs.Counts) int64 { return c.Syncs + c.DirSyncs }

// The reference protocol's budget, exactly: six fsyncs (three of the
// directory) and three renames per seal.
func TestSealCostsSixFsyncsThreeRenames(t *testing.T) {
	cnt := vfs.NewCounting(vfs.NewMem())
	require.NoError(t, cnt.MkdirAll("/db"))
	st, err := Open(cnt, "/db/legacy")
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, st.Put(fmt.Appendf(nil, "key-%028d", i), make([]byte, 100)))
		before := cnt.Counts()
		require.NoError(t, st.Seal())
		after := cnt.Counts()
		require.Equal(t, int64(6), fsyncs(after)-fsyncs(before), "seal %d: fsyncs", i)
		require.Equal(t, int64(3), after.DirSyncs-before.DirSyncs, "seal %d: directory fsyncs", i)
		require.Equal(t, int64(3), after.Renames-before.Renames, "seal %d: renames", i)
	}
	require.Equal(t, 20, st.Segments())
	// Sealing nothing costs nothing.
	before := cnt.Counts()
	require.NoError(t, st.Seal())
	require.Equal(t, fsyncs(before), fsyncs(cnt.Counts()))
	require.NoError(t, st.Close())
}

// Over a whole run of 200 seals, Open and Close included, the totals are
// the ones the reference measured with strace -c: 1207 fsyncs, 603 renames.
func TestTwoHundredSealsMatchReferenceStrace(t *testing.T) {
	cnt := vfs.NewCounting(vfs.NewMem())
	require.NoError(t, cnt.MkdirAll("/db"))
	cnt.Reset()
	st, err := Open(cnt, "/db/legacy")
	require.NoError(t, err)
	for i := range 200 {
		require.NoError(t, st.Put(fmt.Appendf(nil, "key-%028d", i), make([]byte, 100)))
		require.NoError(t, st.Seal())
	}
	require.NoError(t, st.Close())
	c := cnt.Counts()
	require.Equal(t, int64(1207), fsyncs(c))
	require.Equal(t, int64(603), c.Renames)
}

// The manifest's size reproduces the reference table: 46974, 187976 and
// 376976 bytes at 250, 1000 and 2000 segments.
func TestManifestSizeMatchesReferenceTable(t *testing.T) {
	want := map[int]int{250: 46974, 1000: 187976, 2000: 376976}
	var segs []entry
	for id := uint64(1); id <= 2000; id++ {
		segs = append(segs, entry{id: id, size: 153, smallest: []byte("key"), largest: []byte("key")})
		if w, ok := want[len(segs)]; ok {
			require.Len(t, EncodeManifest(id+1, segs, false), w, "%d segments", len(segs))
		}
	}
}

// The file written by real seals has that size too, and it is what the
// store reports.
func TestManifestOnDiskAfterSeals(t *testing.T) {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/db"))
	st, err := Open(fs, "/db/legacy")
	require.NoError(t, err)
	for i := range 250 {
		require.NoError(t, st.Put(fmt.Appendf(nil, "key-%028d", i), make([]byte, 100)))
		require.NoError(t, st.Seal())
	}
	size, err := fs.Stat(st.ManifestPath())
	require.NoError(t, err)
	require.Equal(t, int64(46974), size)
	require.Equal(t, size, st.ManifestSize())
	names, err := fs.List("/db/legacy")
	require.NoError(t, err)
	require.Len(t, names, 1+2*250, "manifest plus a data and an index file per segment, no temporary left")
	require.NoError(t, st.Close())
}

func TestOpenRefusesExistingStore(t *testing.T) {
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/db"))
	st, err := Open(fs, "/db/legacy")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	_, err = Open(fs, "/db/legacy")
	require.Error(t, err)
	require.Error(t, st.Put([]byte("k"), nil), "closed")
}
