package segstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/segkv/segkv/index"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// TestBreakDamagedRangeSectionRebuilt: every single-byte flip of a version
// 2 index (one with a range section), and every truncation, is refused and
// rebuilt from the data file at Open: the reads after it are the same.
func TestBreakDamagedRangeSectionRebuilt(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	require.NoError(t, s.Put([]byte("a"), []byte("old-a")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Put([]byte("c"), []byte("old-c")))
	require.NoError(t, s.Put([]byte("m"), []byte("m1")))
	require.NoError(t, s.DeleteRange([]byte("b"), []byte("d")))
	require.NoError(t, s.DeleteRange([]byte("x"), []byte("y\xff")))
	require.NoError(t, s.Put([]byte("c2"), []byte("new")))
	require.NoError(t, s.Seal())
	want := model{"a": "old-a", "m": "m1", "c2": "new"}
	keys := []string{"a", "b", "c", "c2", "m", "x"}
	segs := s.Segments()
	ixPath := filepath.Join("/db", segment.IndexName(segs[len(segs)-1].ID))
	require.NoError(t, s.Close())
	orig, err := mem.ReadFile(ixPath)
	require.NoError(t, err)
	require.Equal(t, index.Version, binary.LittleEndian.Uint32(orig[8:]), "a current-version index")
	check := func(what string, b []byte) {
		img := mem.CrashClone(vfs.CrashDropUnsynced, nil)
		require.NoError(t, img.WriteFile(ixPath, b))
		s, err := Open("/db", &Options{FS: img, Merge: MergeOptions{Disable: true}})
		require.NoError(t, err, what)
		require.NoError(t, fullDiff(s, want, keys), what)
		require.NoError(t, s.Close())
	}
	// Flips in the last 128 bytes (the range section, its length, the
	// checksum) and a stride of the rest.
	for i := range orig {
		if i < len(orig)-128 && i%7 != 0 {
			continue
		}
		b := bytes.Clone(orig)
		b[i] ^= 0x41
		check(fmt.Sprintf("flip at %d of %d", i, len(orig)), b)
	}
	for n := 0; n < len(orig); n += 9 {
		check(fmt.Sprintf("truncated to %d", n), orig[:n])
	}
}

// TestBreakImportCraftedRangeRecords: streams with a kind-4 record whose
// start is not below its end, or whose end is longer than MaxKeySize, are
// refused whole, and nothing of them becomes visible.
func TestBreakImportCraftedRangeRecords(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: mem, MaxKeySize: 16, Merge: MergeOptions{Disable: true}})
	defer checkAndClose(t, s)
	require.NoError(t, s.Put([]byte("k"), []byte("v")))
	require.NoError(t, s.Seal())
	mk := func(recs ...[]byte) []byte {
		var payload []byte
		for _, r := range recs {
			payload = append(payload, r...)
		}
		return append(segment.Header(), wal.AppendFrame(nil, payload, 0)...)
	}
	put := segment.AppendRecord(nil, segment.KindPut, []byte("z"), []byte("zz"))
	for name, stream := range map[string][]byte{
		"start == end":  mk(put, segment.AppendRecord(nil, segment.KindRangeDelete, []byte("k"), []byte("k"))),
		"start > end":   mk(put, segment.AppendRecord(nil, segment.KindRangeDelete, []byte("l"), []byte("a"))),
		"huge end":      mk(put, segment.AppendRecord(nil, segment.KindRangeDelete, []byte("a"), bytes.Repeat([]byte{0xff}, 17))),
		"huge start":    mk(put, segment.AppendRecord(nil, segment.KindRangeDelete, bytes.Repeat([]byte{0}, 17), bytes.Repeat([]byte{0xff}, 17))),
		"range w/ link": mk(segment.AppendLink(nil, 1, 16), segment.AppendRecord(nil, segment.KindRangeDelete, []byte("a"), []byte("z"))),
	} {
		_, err := s.Import(context.Background(), bytes.NewReader(stream))
		if name == "range w/ link" {
			// A link first is allowed (a sealed live file); the range is valid.
			require.NoError(t, err, name)
			_, err := s.Get([]byte("k"))
			require.ErrorIs(t, err, ErrNotFound, "the imported range deletes k")
			require.NoError(t, s.Put([]byte("k"), []byte("v")))
			continue
		}
		require.Error(t, err, name)
		got, err := s.Get([]byte("k"))
		require.NoError(t, err, name)
		require.Equal(t, "v", string(got), name)
		_, err = s.Get([]byte("z"))
		require.ErrorIs(t, err, ErrNotFound, name)
	}
}
