package manifestlog

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
)

var update = flag.Bool("update", false, "rewrite testdata/golden-v3.manifest and the fuzz seed corpus")

const (
	goldenPath   = "testdata/golden-v3.manifest"
	goldenV2Path = "testdata/golden-v2.manifest" // the version-2 part of the history in format version 2 (2026-12-06)
	goldenV1Path = "testdata/golden-v1.manifest" // the same history in format version 1 (2026-12-02)
	goldenGen    = 2                             // the golden history rotates once
)

// goldenHistory is the fixed history of the golden file of format version
// v. It exercises every record kind and field: a checkpoint with segments,
// adds with and without keys, removes, a merge, a live switch and counter
// raises; from version 3 on also a mirrored segment (Origin), a followed
// seq in the checkpoint and in an edit, and adopted digests in both.
func goldenHistory(v uint32) (before, after []Edit) {
	empty := SegmentMeta{ID: 9, FileKind: 2, Order: 1 << 40, DataLength: 16, DataDigest: 0xffffffffffffffff}
	before = []Edit{
		{SetLive: true, LiveID: 1, NextID: 2},
		{Add: []SegmentMeta{seg(1), seg(2)}, SetLive: true, LiveID: 3, NextOrder: 3},
		{Add: []SegmentMeta{empty}, NextID: 100},
		{Remove: []uint64{2}},
	}
	after = []Edit{
		{Add: []SegmentMeta{seg(4)}, NextOrder: 10},
		{Add: []SegmentMeta{seg(5)}, Remove: []uint64{1, 9}, SetLive: true, LiveID: 6},
		{},
	}
	if v >= 3 {
		before[1].Adopt = []uint64{seg(1).DataDigest, seg(2).DataDigest}
		before[2].SetFollowed, before[2].Followed = true, 1<<33
		after[0].Add[0].Origin = 1 << 35
		after[0].SetFollowed, after[0].Followed = true, 1<<34
		after[1].Adopt = []uint64{seg(5).DataDigest}
		after[2].ForgetAdopted, after[2].Adopt = true, []uint64{1 << 50}
	}
	return before, after
}

// writeGolden builds the golden log on a Mem FS and returns its bytes up to
// the logical end (the preallocated zero fill is not part of the format).
func writeGolden(t *testing.T) ([]byte, State) {
	t.Helper()
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{MinCheckpointBytes: 1 << 40})
	m := newModel()
	before, after := goldenHistory(Version)
	for _, e := range before {
		_, err := l.Commit(e)
		require.NoError(t, err)
		m.apply(e)
	}
	require.NoError(t, l.Checkpoint())
	for _, e := range after {
		_, err := l.Commit(e)
		require.NoError(t, err)
		m.apply(e)
	}
	require.Equal(t, uint64(goldenGen), l.Stats().Generation)
	l.mu.Lock()
	end, path := l.end, l.path
	l.mu.Unlock()
	require.NoError(t, l.Close())
	f, err := fsys.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, end)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	return b, m.clone()
}

// TestGolden decodes the committed golden file and compares it with the
// state its history must produce, and checks that the encoder still writes
// exactly those bytes. If this fails after a format change, bump Version
// (an old reader must refuse the new format) and regenerate with -update.
func TestGolden(t *testing.T) {
	fresh, want := writeGolden(t)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(goldenPath, fresh, 0o644))
		writeSeedCorpus(t, fresh)
	}
	golden, err := os.ReadFile(goldenPath)
	require.NoError(t, err, "run go test -run TestGolden -update to create it")

	fsys := vfs.NewMem()
	writeRaw(t, fsys, filepath.Join(testDir, genName(goldenGen)), golden)
	l, got, rep := openLog(t, fsys, Options{})
	defer l.Close()
	require.Empty(t, rep.Actions)
	requireStateEqual(t, want, got)
	require.Equal(t, uint64(7), got.Seq)
	require.Equal(t, uint64(100), got.NextID)
	require.Equal(t, uint64(10), got.NextOrder)
	require.Equal(t, uint64(6), got.LiveID)
	require.Equal(t, []uint64{4, 5}, sortedIDs(got))
	require.Equal(t, uint64(4), l.ckptSeq)
	require.Equal(t, uint64(1<<34), got.Followed)
	require.Equal(t, []uint64{1 << 50}, got.Adopted)

	require.Equal(t, golden, fresh, "the encoder no longer writes the version-%d format byte for byte", Version)
}

// TestGoldenV2Upgraded: a version 2 file reads to the state of its history
// (no origins, no followed seq, nothing adopted); a writable Open rewrites
// it as a version 3 generation before appending, and what it appends reads
// back after a reopen.
func TestGoldenV2Upgraded(t *testing.T) {
	v2, err := os.ReadFile(goldenV2Path)
	require.NoError(t, err)
	m := newModel()
	before, after := goldenHistory(2)
	for _, e := range append(before, after...) {
		m.apply(e)
	}
	want := m.clone()

	fsys := vfs.NewMem()
	path := filepath.Join(testDir, genName(goldenGen))
	writeRaw(t, fsys, path, v2)
	infos, err := Inspect(fsys, testDir)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.NoError(t, infos[0].Err)
	requireStateEqual(t, want, infos[0].State)

	l, got, rep := openLog(t, fsys, Options{})
	requireStateEqual(t, want, got)
	require.Equal(t, uint64(goldenGen+1), rep.Generation, "the version-2 generation must be rewritten before anything is appended")
	require.NotEmpty(t, rep.Actions)
	s := seg(11)
	s.Origin = 7
	_, err = l.Commit(Edit{Add: []SegmentMeta{s}, SetFollowed: true, Followed: 99, Adopt: []uint64{42}})
	require.NoError(t, err)
	want = l.State()
	require.NoError(t, l.Close())
	require.Equal(t, []string{filepath.Join(testDir, genName(goldenGen+1))}, manifestFiles(t, fsys))

	l, got, _ = openLog(t, fsys, Options{})
	defer l.Close()
	requireStateEqual(t, want, got)
	require.Equal(t, uint64(99), got.Followed)
	require.Equal(t, uint64(7), got.Segments[11].Origin)
}

// TestAdoptedMemoryBounded: the log remembers the newest AdoptedMemory
// adopted digests, across commits, a checkpoint and a reopen.
func TestAdoptedMemoryBounded(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{MinCheckpointBytes: 1 << 40})
	const batch = 4096
	var all []uint64
	for i := 0; len(all) < AdoptedMemory+batch+100; i++ {
		ds := make([]uint64, batch)
		for j := range ds {
			ds[j] = uint64(len(all) + j + 1)
		}
		all = append(all, ds...)
		_, err := l.Commit(Edit{Adopt: ds})
		require.NoError(t, err)
		if i == 2 {
			require.NoError(t, l.Checkpoint())
		}
	}
	want := all[len(all)-AdoptedMemory:]
	require.Equal(t, want, l.State().Adopted)
	require.NoError(t, l.Close())
	l, got, _ := openLog(t, fsys, Options{})
	require.Equal(t, want, got.Adopted)
	require.NoError(t, l.Checkpoint())
	require.NoError(t, l.Close())
	l, got, _ = openLog(t, fsys, Options{})
	defer l.Close()
	require.Equal(t, want, got.Adopted)
}

// TestGoldenV1Refused: a version 1 file (no replicas) is refused with
// ErrUnsupportedVersion, never read as damaged or misread, and left alone.
func TestGoldenV1Refused(t *testing.T) {
	v1, err := os.ReadFile(goldenV1Path)
	require.NoError(t, err)
	fsys := vfs.NewMem()
	path := filepath.Join(testDir, genName(goldenGen))
	writeRaw(t, fsys, path, v1)
	_, _, _, err = Open(fsys, testDir, Options{})
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.False(t, errors.Is(err, corruption.ErrCorrupt))
	require.Contains(t, err.Error(), "version 1")
	b, err := fsys.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, v1, b, "a refused file must not be modified")
}

func sortedIDs(s State) []uint64 {
	var out []uint64
	for id := uint64(0); len(out) < len(s.Segments); id++ {
		if _, ok := s.Segments[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

func writeRaw(t testing.TB, fsys vfs.FS, path string, data []byte) {
	t.Helper()
	require.NoError(t, fsys.MkdirAll(filepath.Dir(path)))
	f, err := fsys.Create(path)
	require.NoError(t, err)
	if len(data) > 0 {
		_, err = f.WriteAt(data, 0)
		require.NoError(t, err)
	}
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, fsys.SyncDir(filepath.Dir(path)))
}

// writeSeedCorpus writes the fuzz seed corpus: the golden file, damaged
// variants of it, and its individual record payloads.
func writeSeedCorpus(t *testing.T, golden []byte) {
	t.Helper()
	write := func(target, name string, data []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("FuzzOpen", "golden", golden)
	write("FuzzOpen", "torn", golden[:len(golden)-5])
	flipped := append([]byte(nil), golden...)
	flipped[len(flipped)/2] ^= 1
	write("FuzzOpen", "flipped", flipped)
	write("FuzzOpen", "empty", nil)

	fsys := vfs.NewMem()
	path := filepath.Join(testDir, genName(goldenGen))
	writeRaw(t, fsys, path, golden)
	for i, off := range frameOffsets(t, fsys, path) {
		f, err := fsys.Open(path)
		require.NoError(t, err)
		hdr := make([]byte, frameHeaderSize)
		_, err = f.ReadAt(hdr, off)
		require.NoError(t, err)
		n := int64(hdr[8]) | int64(hdr[9])<<8 | int64(hdr[10])<<16 | int64(hdr[11])<<24
		p := make([]byte, n)
		_, err = f.ReadAt(p, off+frameHeaderSize)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		write("FuzzDecodeRecord", fmt.Sprintf("record-%02d-kind-%d", i, p[0]), p)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendHeader(nil, 1))
	f.Add(appendCheckpoint(nil, &snapshot{seq: 1, liveID: 2, nextID: 3, nextOrder: 4, followed: 6, adopted: []uint64{7, 8}}, 5))
	s := seg(3)
	f.Add(appendSegments(nil, []*SegmentMeta{&s}))
	f.Add(editPayload(7, Edit{Add: []SegmentMeta{seg(1)}, Remove: []uint64{2}, SetLive: true, LiveID: 4}))
	f.Add(editPayload(8, Edit{SetFollowed: true, Followed: 12, Adopt: []uint64{1, 2}, ForgetAdopted: true}))
	f.Add(appendActivate(nil, 9))
	f.Add(appendReplica(nil, 154, [][]byte{appendActivate(nil, 9), editPayload(10, Edit{Remove: []uint64{2}})}))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := decodeRecord(p, Version)
		if err != nil {
			return
		}
		// Whatever decodes must survive an encode/decode round trip.
		var again []byte
		switch r.kind {
		case kindHeader:
			if r.version != Version {
				return
			}
			again = appendHeader(nil, r.gen)
		case kindCheckpoint:
			again = appendCheckpoint(nil, &snapshot{seq: r.seq, liveID: r.liveID, nextID: r.nextID, nextOrder: r.nextOrder, followed: r.followed, adopted: r.adopt}, r.count)
		case kindSegments:
			ptrs := make([]*SegmentMeta, len(r.segs))
			for i := range r.segs {
				ptrs[i] = &r.segs[i]
			}
			again = appendSegments(nil, ptrs)
		case kindEdit:
			e := Edit{Add: r.segs, Remove: r.remove, SetLive: r.setLive, LiveID: r.liveID, SetFollowed: r.setFollowed, Followed: r.followed, Adopt: r.adopt, ForgetAdopted: r.forget}
			again = appendEdit(nil, r.seq, &e, r.nextID, r.nextOrder)
		case kindActivate:
			again = appendActivate(nil, r.seq)
		case kindReplica:
			again = appendReplica(nil, int64(r.groupStart), r.payloads)
		}
		r2, err := decodeRecord(again, Version)
		require.NoError(t, err)
		require.Equal(t, r, r2)
	})
}

func FuzzOpen(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := vfs.NewMem()
		writeRaw(t, fsys, filepath.Join(testDir, genName(goldenGen)), data)
		l, st, _, err := Open(fsys, testDir, Options{})
		if err != nil {
			var ce *corruption.Error
			if !errors.As(err, &ce) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error is neither corruption nor version: %v", err)
			}
			return
		}
		// Whatever opened must accept a commit and reopen to the same
		// state plus that commit.
		seq, err := l.Commit(Edit{})
		require.NoError(t, err)
		require.Equal(t, st.Seq+1, seq)
		want := l.State()
		require.NoError(t, l.Close())
		l2, got, _, err := Open(fsys, testDir, Options{})
		require.NoError(t, err)
		requireStateEqual(t, want, got)
		require.NoError(t, l2.Close())
	})
}
