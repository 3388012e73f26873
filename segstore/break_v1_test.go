package segstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// copyDir copies the flat directory src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
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

// testdata/v1store was made by checking out a8bc794 (the commit before
// range tombstones) and running, in its segstore package, a test that
// opens $SEGKV_OLD_DIR on vfs.NewOS() with SegmentSize 16 KiB and merges
// off, puts k000..k299 = "old-kNNN" sealing after every 50th, deletes
// every tenth key, and closes.
//
// v1Want is what testdata/v1store holds: it was written by a8bc794 (data
// file version 1, index version 1, before range tombstones): k000..k299 =
// "old-kNNN", every tenth deleted, six sealed segments and a live file.
func v1Want() map[string]string {
	m := map[string]string{}
	for i := range 300 {
		if i%10 != 0 {
			k := fmt.Sprintf("k%03d", i)
			m[k] = "old-" + k
		}
	}
	return m
}

// TestBreakV1StoreOpens: a store written before range tombstones opens,
// reads, takes a DeleteRange, seals, compacts and reopens.
func TestBreakV1StoreOpens(t *testing.T) {
	dir := copyDir(t, "testdata/v1store")
	o := &Options{FS: vfs.NewOS(), SegmentSize: 16 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, dir, o)
	want := v1Want()
	require.True(t, checkPrefix(t, s, "k", want))
	require.NoError(t, s.DeleteRange([]byte("k100"), []byte("k200")))
	for i := 100; i < 200; i++ {
		delete(want, fmt.Sprintf("k%03d", i))
	}
	require.True(t, checkPrefix(t, s, "k", want))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(t.Context()))
	checkAndClose(t, s)
	s = mustOpen(t, dir, o)
	require.True(t, checkPrefix(t, s, "k", want))
	checkAndClose(t, s)
}

// TestBreakV1LiveFileGetsRangeRecords: a version-1 live file that the new
// code keeps appending to receives a kind-4 record under its version-1
// header. FORMAT/segment.go say version 2 exists so that a version-1
// reader refuses a file with range tombstones instead of misreading it;
// a file upgraded in place defeats that: its header still says 1.
func TestBreakV1LiveFileGetsRangeRecords(t *testing.T) {
	dir := copyDir(t, "testdata/v1store")
	o := &Options{FS: vfs.NewOS(), SegmentSize: 16 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, dir, o)
	live := s.mu.tail.path
	require.NoError(t, s.DeleteRange([]byte("k100"), []byte("k200")))
	require.NoError(t, s.Close())
	b, err := os.ReadFile(live)
	require.NoError(t, err)
	var kinds []segment.RecordKind
	_, err = segment.Replay(vfs.NewOS(), live, -1, func(r segment.Record, _ int64, _ int) error {
		kinds = append(kinds, r.Kind)
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, kinds, segment.KindRangeDelete)
	require.Equal(t, uint32(segment.Version), binary.LittleEndian.Uint32(b[8:]),
		"%s holds a range tombstone (kind 4) but its header says data file version %d", live, binary.LittleEndian.Uint32(b[8:]))
}

// TestBreakImportV1StreamWithRangeRecord: a stream whose header says data
// file version 1 cannot hold a range tombstone (FORMAT.md); Import
// validates every record, yet adopts one holding a kind-4 record (the
// stream a peer exports after the in-place upgrade above).
func TestBreakImportV1StreamWithRangeRecord(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer s.Close()
	require.NoError(t, s.Put([]byte("k"), []byte("v")))
	require.NoError(t, s.Seal())
	hdr := segment.Header()
	binary.LittleEndian.PutUint32(hdr[8:], 1)
	payload := segment.AppendRecord(nil, segment.KindRangeDelete, []byte("a"), []byte("z"))
	stream := append(hdr, wal.AppendFrame(nil, payload, 0)...)
	_, err := s.Import(t.Context(), bytes.NewReader(stream))
	require.Error(t, err, "a version-1 stream with a range tombstone was adopted")
	_, err = s.Get([]byte("k"))
	require.NoError(t, err)
}
