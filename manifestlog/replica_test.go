package manifestlog

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// writeGroups writes generation gen: header, an empty checkpoint, then each
// group as the writer would (frames plus replica, the group's watermark
// vouching for everything before it). It returns the path and the offset
// where each group starts.
func writeGroups(t *testing.T, fsys vfs.FS, gen uint64, groups ...[][]byte) (string, []int64) {
	t.Helper()
	buf := wal.AppendFrame(nil, appendHeader(nil, gen), 0)
	buf = wal.AppendFrame(buf, appendCheckpoint(nil, &snapshot{}, 0), 0)
	var starts []int64
	for _, g := range groups {
		starts = append(starts, int64(len(buf)))
		buf = appendGroups(buf, 0, g, uint64(len(buf)))
	}
	path := filepath.Join(testDir, genName(gen))
	writeRaw(t, fsys, path, buf)
	return path, starts
}

// threeGroups is a history whose last group holds three edits.
func threeGroups() ([][]byte, [][]byte) {
	first := [][]byte{appendActivate(nil, 0), editPayload(1, Edit{Add: []SegmentMeta{seg(1)}, NextID: 2})}
	last := [][]byte{
		editPayload(2, Edit{Add: []SegmentMeta{seg(2)}, NextID: 3}),
		editPayload(3, Edit{Add: []SegmentMeta{seg(3)}, Remove: []uint64{1}, NextID: 4}),
		editPayload(4, Edit{SetLive: true, LiveID: 9, NextID: 10}),
	}
	return first, last
}

func copyBytes(b []byte) []byte { return append([]byte(nil), b...) }

// validEnd is the offset just past the last valid frame of path.
func validEnd(t *testing.T, fsys vfs.FS, path string) int64 {
	t.Helper()
	return scanFile(t, fsys, path, nil).End
}

// TestReplicaRestoresEveryByteOfTheLastGroup flips each bit position of one
// byte at every offset of the last group (three edits and their replica),
// one offset per trial. No later frame vouches for these bytes, so without
// the replica each flip would look like a torn tail and drop acknowledged
// edits. Every trial must open to the full state and leave a file that
// reopens clean and keeps taking commits.
func TestReplicaRestoresEveryByteOfTheLastGroup(t *testing.T) {
	first, last := threeGroups()
	ref := vfs.NewMem()
	path, starts := writeGroups(t, ref, 1, first, last)
	l, want, _ := openLog(t, ref, Options{})
	require.NoError(t, l.Close())
	require.Equal(t, uint64(4), want.Seq)
	orig, err := ref.ReadFile(path)
	require.NoError(t, err)
	end := validEnd(t, ref, path)
	restored, replicaRewritten := 0, 0
	for off := starts[1]; off < end; off++ {
		for _, bit := range []byte{0x01, 0x80} {
			fsys := vfs.NewMem()
			b := copyBytes(orig)
			b[off] ^= bit
			writeRaw(t, fsys, path, b)
			l, got, rep, err := Open(fsys, testDir, Options{})
			require.NoError(t, err, "flip at %d", off)
			requireStateEqual(t, want, got, "flip at %d: %v", off, rep.Actions)
			require.NotEmpty(t, rep.Actions, "flip at %d went unnoticed", off)
			if len(rep.RestoredFrames) > 0 {
				restored++
			} else {
				replicaRewritten++
			}
			_, err = l.Commit(Edit{Add: []SegmentMeta{seg(20)}})
			require.NoError(t, err)
			after := l.State()
			require.NoError(t, l.Close())
			l2, got2, rep2 := openLog(t, fsys, Options{})
			require.Empty(t, rep2.Actions, "flip at %d: the repair did not leave a clean file", off)
			requireStateEqual(t, after, got2)
			require.NoError(t, l2.Close())
		}
	}
	t.Logf("flips in the last group: %d restored frames from the replica, %d rewrote a damaged replica", restored, replicaRewritten)
	require.Positive(t, restored)
	require.Positive(t, replicaRewritten)
}

// TestReplicaRestoresActivate: a rotation's last write (backlog and
// activate) damaged with no commit after it is restored, so the generation
// counts as activated.
func TestReplicaRestoresActivate(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{})
	for id := uint64(1); id <= 3; id++ {
		_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
		require.NoError(t, err)
	}
	require.NoError(t, l.Checkpoint())
	want := l.State()
	l.mu.Lock()
	ckptEnd, path := l.ckptEnd, l.path
	l.mu.Unlock()
	require.NoError(t, l.Close())
	testutil.FlipByte(t, fsys, path, ckptEnd+frameHeaderSize, 0x40) // the activate record's kind byte
	require.Len(t, manifestFiles(t, fsys), 1, "the older generation is gone: without the activate record nothing would open")

	l2, got, rep := openLog(t, fsys, Options{})
	requireStateEqual(t, want, got)
	require.Equal(t, []int64{ckptEnd}, rep.RestoredFrames)
	require.NoError(t, l2.Close())
}

// TestReplicaBothCopiesDamaged: damage to a frame and to its replica cannot
// be told from a torn group and drops the group (the stated limit of the
// format: two independent faults in the last group).
func TestReplicaBothCopiesDamaged(t *testing.T) {
	first, last := threeGroups()
	fsys := vfs.NewMem()
	path, starts := writeGroups(t, fsys, 1, first, last)
	b, err := fsys.ReadFile(path)
	require.NoError(t, err)
	offs := frameOffsets(t, fsys, path)
	b[starts[1]+frameHeaderSize] ^= 1         // the first edit of the last group
	b[offs[len(offs)-1]+frameHeaderSize] ^= 1 // its replica
	writeRaw(t, fsys, path, b)
	l, got, rep := openLog(t, fsys, Options{})
	defer l.Close()
	require.Equal(t, uint64(1), got.Seq)
	require.Equal(t, starts[1], rep.TruncatedAt)
}

// TestReplicaMismatchIsCorruption: a valid replica that disagrees with the
// valid frames of its group is damage no crash produces.
func TestReplicaMismatchIsCorruption(t *testing.T) {
	for name, tc := range map[string]struct {
		damageFirst bool // also damage the group's first frame, so the replica is needed
	}{"all frames valid": {}, "replica needed": {damageFirst: true}} {
		t.Run(name, func(t *testing.T) {
			first, last := threeGroups()
			fsys := vfs.NewMem()
			buf := wal.AppendFrame(nil, appendHeader(nil, 1), 0)
			buf = wal.AppendFrame(buf, appendCheckpoint(nil, &snapshot{}, 0), 0)
			buf = appendGroups(buf, 0, first, uint64(len(buf)))
			start := int64(len(buf))
			wm := uint64(len(buf))
			for _, p := range last {
				buf = wal.AppendFrame(buf, p, wm)
			}
			// Same sizes as the group, so the replica fits the gap.
			other := append([][]byte{copyBytes(last[0])}, last[1], editPayload(4, Edit{SetLive: true, LiveID: 8, NextID: 10}))
			require.Len(t, other[2], len(last[2]))
			replicaOff := int64(len(buf))
			buf = wal.AppendFrame(buf, appendReplica(nil, start, other), wm)
			if tc.damageFirst {
				buf[start+frameHeaderSize+3] ^= 1
			}
			path := filepath.Join(testDir, genName(1))
			writeRaw(t, fsys, path, buf)
			_, _, _, err := Open(fsys, testDir, Options{})
			ce := testutil.RequireCorrupt(t, err)
			require.Equal(t, path, ce.Path)
			if tc.damageFirst {
				// The surviving third edit disagrees with the replica.
				require.Equal(t, start+int64(2*frameHeaderSize+len(last[0])+len(last[1])), ce.Offset)
			} else {
				require.Equal(t, replicaOff, ce.Offset)
			}
		})
	}
}

// TestTornGroupWithoutReplicaTruncated: a crash kept part of a group and
// none of its replica. The complete frames are kept (a legal prefix), the
// torn rest truncated, and the replica of what was kept written.
func TestTornGroupWithoutReplicaTruncated(t *testing.T) {
	first, last := threeGroups()
	fsys := vfs.NewMem()
	path, _ := writeGroups(t, fsys, 1, first)
	b, err := fsys.ReadFile(path)
	require.NoError(t, err)
	end := validEnd(t, fsys, path)
	// The crash kept the first two edits of the last group and tore the
	// third and the replica away.
	var tail []byte
	for _, p := range last[:2] {
		tail = wal.AppendFrame(tail, p, uint64(end))
	}
	third := wal.AppendFrame(nil, last[2], uint64(end))
	tail = append(tail, third[:len(third)/2]...)
	b = append(b[:end], tail...)
	writeRaw(t, fsys, path, b)
	l, got, rep := openLog(t, fsys, Options{})
	require.Equal(t, uint64(3), got.Seq, "the two complete frames are a legal prefix")
	require.NotZero(t, rep.TruncatedBytes)
	require.Contains(t, rep.Actions[len(rep.Actions)-1], "missing replica")
	want := l.State()
	require.NoError(t, l.Close())
	l2, got2, rep2 := openLog(t, fsys, Options{})
	require.Empty(t, rep2.Actions)
	requireStateEqual(t, want, got2)
	require.NoError(t, l2.Close())
}

// TestSplitWriteReplicaRestored: one write larger than maxGroupPayload is
// several groups sharing one watermark, so a later group does not vouch
// for an earlier group's replica. A flip in that replica must be repaired
// (the replica rebuilt from its intact group), not read as a torn tail
// that drops the later groups' acknowledged commits.
func TestSplitWriteReplicaRestored(t *testing.T) {
	big := func(id uint64) SegmentMeta {
		m := seg(id)
		m.MinKey = bytes.Repeat([]byte{'a'}, 3<<20)
		return m
	}
	first := [][]byte{appendActivate(nil, 0), editPayload(1, Edit{Add: []SegmentMeta{seg(1)}, NextID: 2})}
	last := [][]byte{
		editPayload(2, Edit{Add: []SegmentMeta{big(2)}, NextID: 3}),
		editPayload(3, Edit{Add: []SegmentMeta{big(3)}, NextID: 4}),
	}
	ref := vfs.NewMem()
	path, starts := writeGroups(t, ref, 1, first, last)
	var offs []int64 // edit 2, its replica R1, edit 3, its replica R2
	for _, o := range frameOffsets(t, ref, path) {
		if o >= starts[1] {
			offs = append(offs, o)
		}
	}
	require.Len(t, offs, 4, "the write was split into two groups")
	orig, err := ref.ReadFile(path)
	require.NoError(t, err)
	r1, r1End := offs[1], offs[2]
	for _, at := range []int64{r1, r1 + 8, r1 + frameHeaderSize, r1 + frameHeaderSize + 5, (r1 + r1End) / 2, r1End - 1} {
		fsys := vfs.NewMem()
		b := copyBytes(orig)
		b[at] ^= 0x04
		writeRaw(t, fsys, path, b)
		l, got, rep := openLog(t, fsys, Options{})
		require.Equal(t, uint64(3), got.Seq, "flip at %d: %v", at, rep.Actions)
		require.Equal(t, []int64{r1}, rep.RestoredFrames, "flip at %d", at)
		require.NoError(t, l.Close())
		l, got, rep = openLog(t, fsys, Options{})
		require.Empty(t, rep.Actions, "flip at %d: the repair left the file dirty", at)
		require.Equal(t, uint64(3), got.Seq)
		require.NoError(t, l.Close())
	}
}
