package manifestlog

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

func TestFreshCommitReopen(t *testing.T) {
	fsys := vfs.NewMem()
	l, st, rep := openLog(t, fsys, Options{})
	require.True(t, rep.Created)
	require.Equal(t, uint64(0), st.Seq)
	require.Empty(t, st.Segments)

	m := newModel()
	var w workload
	for i := 0; i < 200; i++ {
		e := w.edit()
		seq, err := l.Commit(e)
		require.NoError(t, err)
		m.apply(e)
		require.Equal(t, m.st.Seq, seq)
		require.Equal(t, seq, l.Seq())
	}
	requireStateEqual(t, m.clone(), l.State())
	require.NoError(t, l.Close())
	_, err := l.Commit(Edit{})
	require.ErrorIs(t, err, ErrClosed)

	l2, st2, rep2 := openLog(t, fsys, Options{})
	defer l2.Close()
	require.False(t, rep2.Created)
	require.Empty(t, rep2.Actions)
	requireStateEqual(t, m.clone(), st2)
	// Counters are seeded from disk: the next commit continues the sequence.
	seq, err := l2.Commit(Edit{Add: []SegmentMeta{seg(w.next + 1)}})
	require.NoError(t, err)
	require.Equal(t, m.st.Seq+1, seq)
	require.Greater(t, l2.Stats().BytesSinceCheckpoint, int64(0))
}

func TestCommitValidation(t *testing.T) {
	l, _, _ := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	_, err := l.Commit(Edit{Add: []SegmentMeta{seg(1)}})
	require.NoError(t, err)
	bad := []Edit{
		{Remove: []uint64{2}},
		{Add: []SegmentMeta{seg(3), seg(3)}},
		{Add: []SegmentMeta{seg(1)}, Remove: []uint64{1}},
		{Remove: []uint64{1, 1}},
		{Add: []SegmentMeta{{ID: 0}}},
		{Add: []SegmentMeta{{ID: 4, FileKind: segment.KindLog, DataLength: -1}}},
		{Add: []SegmentMeta{{ID: 5}}},              // file kind 0
		{Add: []SegmentMeta{{ID: 6, FileKind: 3}}}, // no such file kind
	}
	for i, e := range bad {
		_, err := l.Commit(e)
		require.ErrorIs(t, err, ErrInvalidEdit, "edit %d", i)
	}
	require.Equal(t, uint64(1), l.Seq(), "refused edits write nothing")
	// Re-adding a present id replaces its metadata (last wins).
	s := seg(1)
	s.Records = 999
	seq, err := l.Commit(Edit{Add: []SegmentMeta{s}})
	require.NoError(t, err)
	got := l.State().Segments[1]
	require.Equal(t, uint64(999), got.Records)
	require.Equal(t, seq, got.AddedSeq)
}

func TestGroupCommitConcurrent(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{MinCheckpointBytes: 4 << 10})
	const writers, per = 16, 150
	type done struct {
		seq uint64
		e   Edit
	}
	var mu sync.Mutex
	var all []done
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				id := uint64(w*per+i) + 1
				e := Edit{Add: []SegmentMeta{seg(id)}, NextOrder: id}
				if i > 0 && i%3 == 0 {
					e.Remove = []uint64{id - 1}
				}
				seq, err := l.Commit(e)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				all = append(all, done{seq, e})
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	require.Len(t, all, writers*per)
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	m := newModel()
	for i, d := range all {
		require.Equal(t, uint64(i+1), d.seq, "sequence numbers are dense and unique")
		m.apply(d.e)
	}
	requireStateEqual(t, m.clone(), l.State())
	st := l.Stats()
	t.Logf("commits=%d syncs=%d rotations=%d", st.Commits, st.Syncs, st.Rotations)
	require.NoError(t, l.Close())
	_, got, _ := openLog(t, fsys, Options{})
	requireStateEqual(t, m.clone(), got)
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestChanges(t *testing.T) {
	l, _, _ := openLog(t, vfs.NewMem(), Options{})
	defer l.Close()
	commit := func(e Edit) uint64 {
		seq, err := l.Commit(e)
		require.NoError(t, err)
		return seq
	}
	s1 := commit(Edit{Add: []SegmentMeta{seg(1), seg(2)}})
	s2 := commit(Edit{Add: []SegmentMeta{seg(3)}})
	s3 := commit(Edit{Remove: []uint64{1}, Add: []SegmentMeta{seg(4)}})
	commit(Edit{Remove: []uint64{4}}) // added and removed after s2

	add, rem, ok := l.Changes(l.Seq())
	require.True(t, ok)
	require.Empty(t, add)
	require.Empty(t, rem)

	add, rem, ok = l.Changes(s1)
	require.True(t, ok)
	require.Equal(t, []uint64{3}, ids(add))
	require.Equal(t, []uint64{1}, rem)

	add, rem, ok = l.Changes(s2)
	require.True(t, ok)
	require.Empty(t, add, "4 was added and removed after s2")
	require.Equal(t, []uint64{1}, rem)

	add, rem, ok = l.Changes(s3)
	require.True(t, ok)
	require.Empty(t, add)
	require.Equal(t, []uint64{4}, rem)

	add, _, ok = l.Changes(0)
	require.True(t, ok)
	require.Equal(t, []uint64{2, 3}, ids(add))

	_, _, ok = l.Changes(l.Seq() + 5)
	require.False(t, ok, "a seq from the future is not ours")

	require.NoError(t, l.Checkpoint())
	_, _, ok = l.Changes(s3)
	require.False(t, ok, "history before the checkpoint is gone")
	s5 := commit(Edit{Add: []SegmentMeta{seg(5)}})
	add, _, ok = l.Changes(s5 - 1)
	require.True(t, ok)
	require.Equal(t, []uint64{5}, ids(add))
	require.Equal(t, s5, add[0].AddedSeq)
}

func ids(ms []SegmentMeta) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// TestChangesReplayed: the change lists are rebuilt at Open from the log tail.
func TestChangesReplayed(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{})
	for id := uint64(1); id <= 10; id++ {
		_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
		require.NoError(t, err)
	}
	require.NoError(t, l.Checkpoint())
	_, err := l.Commit(Edit{Remove: []uint64{3}, Add: []SegmentMeta{seg(11)}})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l2, _, _ := openLog(t, fsys, Options{})
	defer l2.Close()
	add, rem, ok := l2.Changes(10)
	require.True(t, ok)
	require.Equal(t, []uint64{11}, ids(add))
	require.Equal(t, []uint64{3}, rem)
	_, _, ok = l2.Changes(9)
	require.False(t, ok)
}

func TestBackgroundRotation(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{MinCheckpointBytes: 2 << 10})
	m := newModel()
	var w workload
	for i := 0; i < 3000; i++ {
		e := w.edit()
		_, err := l.Commit(e)
		require.NoError(t, err)
		m.apply(e)
	}
	// How many rotations the background goroutine gets through while the
	// commits run depends on scheduling (a loaded machine saw 3 where an
	// idle one sees many more): the test asks that rotation happened in
	// the background, not how often.
	require.Eventually(t, func() bool { return l.Stats().Rotations >= 1 }, 30*time.Second, time.Millisecond)
	require.NoError(t, l.Close())
	st := l.Stats()
	require.Zero(t, st.RotationFailures)
	require.Len(t, manifestFiles(t, fsys), 1, "old generations are removed")
	_, got, rep := openLog(t, fsys, Options{})
	require.Empty(t, rep.Actions)
	requireStateEqual(t, m.clone(), got)
}

// TestEquivalence: the same history loads to the same state whether it was
// checkpointed (often) or never.
func TestEquivalence(t *testing.T) {
	plain, ckpt := vfs.NewMem(), vfs.NewMem()
	never := Options{MinCheckpointBytes: 1 << 40}
	lp, _, _ := openLog(t, plain, never)
	lc, _, _ := openLog(t, ckpt, never)
	m := newModel()
	var w workload
	for i := 0; i < 600; i++ {
		e := w.edit()
		_, err := lp.Commit(e)
		require.NoError(t, err)
		_, err = lc.Commit(e)
		require.NoError(t, err)
		m.apply(e)
		if i%37 == 0 {
			require.NoError(t, lc.Checkpoint())
		}
	}
	require.NoError(t, lp.Close())
	require.NoError(t, lc.Close())
	require.Equal(t, uint64(0), lp.Stats().Rotations)
	require.Greater(t, lc.Stats().Rotations, uint64(10))
	_, sp, _ := openLog(t, plain, never)
	_, sc, _ := openLog(t, ckpt, never)
	requireStateEqual(t, sp, sc)
	requireStateEqual(t, m.clone(), sp)
}

func TestFlippedByteIsCorruption(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{})
	for id := uint64(1); id <= 20; id++ {
		_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
		require.NoError(t, err)
	}
	path := l.Stats()
	_ = path
	require.NoError(t, l.Close())
	files := manifestFiles(t, fsys)
	require.Len(t, files, 1)
	offs := frameOffsets(t, fsys, files[0])
	// frames: header, checkpoint, activate + replica, then 20 x (edit + replica)
	require.Len(t, offs, 44)
	target := offs[8] // the third edit, followed by valid ones
	testutil.FlipByte(t, fsys, files[0], target+frameHeaderSize+2, 0x40)

	_, _, _, err := Open(fsys, testDir, Options{})
	ce := testutil.RequireCorrupt(t, err)
	require.Equal(t, files[0], ce.Path)
	require.Equal(t, target, ce.Offset)
}

func TestUnknownVersionRefused(t *testing.T) {
	fsys := vfs.NewMem()
	writeFile(t, fsys, 1, headerWithVersion(Version+1, 1), appendCheckpoint(nil, &snapshot{}, 0), appendActivate(nil, 0))
	_, _, _, err := Open(fsys, testDir, Options{})
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.False(t, errors.Is(err, corruption.ErrCorrupt))
	require.Contains(t, err.Error(), fmt.Sprintf("version %d", Version+1))
}

func TestSequenceAndReplayCorruption(t *testing.T) {
	hdr := appendHeader(nil, 1)
	ck := appendCheckpoint(nil, &snapshot{}, 0)
	act := appendActivate(nil, 0)
	e1 := editPayload(1, Edit{Add: []SegmentMeta{seg(1)}})
	badKind := seg(2)
	badKind.FileKind = 3 // no such file kind: guessing a name for it could lose the file
	cases := map[string][][]byte{
		"unknown kind":   {hdr, ck, act, e1, editPayload(2, Edit{Add: []SegmentMeta{badKind}})},
		"gap":            {hdr, ck, act, e1, editPayload(3, Edit{Add: []SegmentMeta{seg(2)}})},
		"repeat":         {hdr, ck, act, e1, editPayload(1, Edit{Add: []SegmentMeta{seg(2)}})},
		"unknown remove": {hdr, ck, act, e1, editPayload(2, Edit{Remove: []uint64{7}})},
		"bad activate":   {hdr, ck, appendActivate(nil, 4), e1},
		"wrong gen":      {appendHeader(nil, 9), ck, act, e1},
		"no header":      {ck, act, e1},
		"second ckpt":    {hdr, ck, act, e1, ck},
	}
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) {
			fsys := vfs.NewMem()
			path := writeFile(t, fsys, 1, frames...)
			offs := frameOffsets(t, fsys, path)
			_, _, _, err := Open(fsys, testDir, Options{})
			ce := testutil.RequireCorrupt(t, err)
			require.Equal(t, path, ce.Path)
			require.Contains(t, offs, ce.Offset)
			t.Log(err)
		})
	}
}

func TestSkipEditCoveredByCheckpoint(t *testing.T) {
	fsys := vfs.NewMem()
	s1 := seg(1)
	s1.AddedSeq = 1
	writeFile(t, fsys, 1,
		appendHeader(nil, 1),
		appendCheckpoint(nil, &snapshot{seq: 1, nextID: 2}, 1),
		appendSegments(nil, []*SegmentMeta{&s1}),
		editPayload(1, Edit{Add: []SegmentMeta{seg(1)}, NextID: 2}), // already in the checkpoint
		appendActivate(nil, 1),
		editPayload(2, Edit{Add: []SegmentMeta{seg(2)}, NextID: 3}),
	)
	l, st, _ := openLog(t, fsys, Options{})
	defer l.Close()
	require.Equal(t, uint64(2), st.Seq)
	require.Len(t, st.Segments, 2)
}

func TestTornTailTruncated(t *testing.T) {
	fsys := vfs.NewMem()
	l, _, _ := openLog(t, fsys, Options{PreallocateBytes: -1})
	for id := uint64(1); id <= 5; id++ {
		_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
		require.NoError(t, err)
	}
	want := l.State()
	require.NoError(t, l.Close())
	path := manifestFiles(t, fsys)[0]
	f, err := fsys.OpenReadWrite(path)
	require.NoError(t, err)
	size, err := f.Size()
	require.NoError(t, err)
	// Half of a frame, as a crash in the middle of an append leaves it.
	frame := appendFrameForTest(editPayload(6, Edit{Add: []SegmentMeta{seg(6)}}), uint64(size))
	_, err = f.WriteAt(frame[:len(frame)/2], size)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	l2, st, rep := openLog(t, fsys, Options{})
	requireStateEqual(t, want, st)
	require.Equal(t, path, rep.TruncatedPath)
	require.Equal(t, size, rep.TruncatedAt)
	require.NotEmpty(t, rep.Actions)
	// Appends continue cleanly after the truncation.
	_, err = l2.Commit(Edit{Add: []SegmentMeta{seg(7)}})
	require.NoError(t, err)
	require.NoError(t, l2.Close())
	_, st, rep = openLog(t, fsys, Options{})
	require.Empty(t, rep.Actions)
	require.Len(t, st.Segments, 6)
}

func TestIncompleteGenerations(t *testing.T) {
	t.Run("newer unactivated removed", func(t *testing.T) {
		fsys := vfs.NewMem()
		l, _, _ := openLog(t, fsys, Options{})
		_, err := l.Commit(Edit{Add: []SegmentMeta{seg(1)}})
		require.NoError(t, err)
		want := l.State()
		require.NoError(t, l.Close())
		broken := writeFile(t, fsys, 5, appendHeader(nil, 5), appendCheckpoint(nil, &snapshot{}, 0))
		l2, st, rep := openLog(t, fsys, Options{})
		requireStateEqual(t, want, st)
		require.Equal(t, []string{broken}, rep.RemovedBroken)
		require.NoError(t, l2.Checkpoint())
		require.Equal(t, uint64(6), l2.Stats().Generation, "generation numbers never reuse one seen")
		require.NoError(t, l2.Close())
	})
	t.Run("first generation incomplete is re-created", func(t *testing.T) {
		fsys := vfs.NewMem()
		writeFile(t, fsys, 1, appendHeader(nil, 1))
		l, st, rep := openLog(t, fsys, Options{})
		defer l.Close()
		require.True(t, rep.Created)
		require.Zero(t, st.Seq)
	})
	t.Run("first generation incomplete beside data is refused", func(t *testing.T) {
		// The log's user has data files (Options.HasData): generation 1
		// was complete before they existed, so this is damage, and
		// re-creating it would disown them. Nothing is written.
		fsys := vfs.NewMem()
		p := writeFile(t, fsys, 1, appendHeader(nil, 1))
		before, err := fsys.Stat(p)
		require.NoError(t, err)
		_, _, _, err = Open(fsys, testDir, Options{HasData: true})
		require.ErrorIs(t, err, corruption.ErrCorrupt)
		_, _, _, err = OpenReadOnly(fsys, testDir, Options{HasData: true})
		require.ErrorIs(t, err, corruption.ErrCorrupt)
		size, err := fsys.Stat(p)
		require.NoError(t, err)
		require.Equal(t, before, size, "left as it was")
	})
	t.Run("only a later generation incomplete is refused", func(t *testing.T) {
		fsys := vfs.NewMem()
		writeFile(t, fsys, 2, appendHeader(nil, 2))
		_, _, _, err := Open(fsys, testDir, Options{})
		require.ErrorIs(t, err, corruption.ErrCorrupt)
	})
	t.Run("older generation removed", func(t *testing.T) {
		fsys := vfs.NewMem()
		old := writeFile(t, fsys, 1, appendHeader(nil, 1), appendCheckpoint(nil, &snapshot{}, 0), appendActivate(nil, 0))
		writeFile(t, fsys, 2, appendHeader(nil, 2), appendCheckpoint(nil, &snapshot{seq: 3}, 0), appendActivate(nil, 3))
		l, st, rep := openLog(t, fsys, Options{})
		defer l.Close()
		require.Equal(t, uint64(3), st.Seq)
		require.Equal(t, []string{old}, rep.RemovedOld)
	})
}

// TestCopyForward commits while a rotation is writing its checkpoint (from
// the sync hook of the new generation, so deterministically): the commits
// are not blocked by the checkpoint write, land in the old generation, are
// copied into the new one before it is activated, and survive a reopen.
func TestCopyForward(t *testing.T) {
	mem := vfs.NewMem()
	l, _, _ := openLog(t, mem, Options{MinCheckpointBytes: 1 << 40})
	m := newModel()
	commit := func(e Edit) uint64 {
		seq, err := l.Commit(e)
		require.NoError(t, err)
		m.apply(e)
		return seq
	}
	for id := uint64(1); id <= 20; id++ {
		commit(Edit{Add: []SegmentMeta{seg(id)}})
	}
	snap := l.Seq()
	fired := false
	during := []uint64{}
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		if fired || !ev.Before || ev.Kind != vfs.FileSync || !strings.HasSuffix(ev.Name, genName(2)) {
			return
		}
		fired = true
		// The checkpoint of generation 2 is written, not yet synced or
		// activated; commits go on in generation 1.
		during = append(during, commit(Edit{Add: []SegmentMeta{seg(21)}, Remove: []uint64{1}}))
		during = append(during, commit(Edit{Remove: []uint64{2, 3}, SetLive: true, LiveID: 30}))
		during = append(during, commit(Edit{Add: []SegmentMeta{seg(22)}}))
		require.Equal(t, uint64(1), l.Stats().Generation)
		require.Contains(t, l.State().Segments, uint64(21), "State sees commits made during the rotation")
		require.NotContains(t, l.State().Segments, uint64(1))
	})
	require.NoError(t, l.Checkpoint())
	mem.SetSyncHook(nil)
	require.True(t, fired)
	st := l.Stats()
	require.Equal(t, uint64(2), st.Generation)
	require.Equal(t, uint64(3), st.CopiedForward)
	requireStateEqual(t, m.clone(), l.State())

	// The checkpoint covers snap; the copied edits are changes after it.
	add, rem, ok := l.Changes(snap)
	require.True(t, ok)
	require.Equal(t, []uint64{21, 22}, ids(add))
	require.Equal(t, []uint64{1, 2, 3}, rem)
	_, _, ok = l.Changes(snap - 1)
	require.False(t, ok)

	commit(Edit{Add: []SegmentMeta{seg(23)}})
	require.NoError(t, l.Close())
	require.Len(t, manifestFiles(t, mem), 1)
	l2, got, rep := openLog(t, mem, Options{})
	defer l2.Close()
	require.Empty(t, rep.Actions)
	require.Equal(t, snap, rep.CheckpointSeq)
	require.Equal(t, 4, rep.Replayed)
	requireStateEqual(t, m.clone(), got)
	add, _, ok = l2.Changes(snap)
	require.True(t, ok)
	require.Equal(t, []uint64{21, 22, 23}, ids(add))
}

// TestGroupCommitSharesSync holds the first commit's fdatasync until seven
// more commits are queued, then checks that those seven were written by one
// leader in one write and made durable by one more sync.
func TestGroupCommitSharesSync(t *testing.T) {
	mem := vfs.NewMem()
	cfs := vfs.NewCounting(mem)
	l, _, _ := openLog(t, cfs, Options{})
	defer l.Close()
	queued := l.gc.Queued
	var once sync.Once
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		if ev.Before && ev.Kind == vfs.FileSync {
			once.Do(func() {
				for queued() < 7 {
					runtime.Gosched()
				}
			})
		}
	})
	before := cfs.Counts()
	var wg sync.WaitGroup
	for i := 1; i <= 8; i++ {
		wg.Add(1)
		go func(id uint64) {
			defer wg.Done()
			_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
			assertNoError(t, err)
		}(uint64(i))
		if i == 1 {
			// Let the first commit become the leader and reach its sync.
			for {
				if l.gc.Held() && l.gc.Queued() == 0 {
					break
				}
				runtime.Gosched()
			}
		}
	}
	wg.Wait()
	mem.SetSyncHook(nil)
	after := cfs.Counts()
	require.Equal(t, int64(2), after.Syncs-before.Syncs, "8 commits, 2 fdatasyncs")
	require.Equal(t, int64(2), after.Writes-before.Writes, "8 commits, 2 writes")
	require.Equal(t, uint64(8), l.Seq())
	require.Len(t, l.State().Segments, 8)
}

// TestLogOwnsIDsAndOrders: ids come from the log, never twice, across a
// reopen too, including ids reserved but never committed; orders are
// assigned at commit, in sequence order, and kept when given.
func TestLogOwnsIDsAndOrders(t *testing.T) {
	mem := vfs.NewMem()
	l, _, _ := openLog(t, mem, Options{})
	a, b := l.NewID(), l.NewID()
	require.Equal(t, a+1, b)
	c1, err := l.CommitEdit(Edit{Add: []SegmentMeta{{ID: a, FileKind: segment.KindSeg, DataLength: 1}, {ID: b, FileKind: segment.KindSeg, DataLength: 1}}})
	require.NoError(t, err)
	require.Equal(t, uint64(1), c1.Add[0].Order)
	require.Equal(t, uint64(2), c1.Add[1].Order)
	require.Equal(t, c1.Seq, c1.Add[0].AddedSeq)
	c := l.NewID()
	// A merge output keeps the order it was given.
	c2, err := l.CommitEdit(Edit{Add: []SegmentMeta{{ID: c, FileKind: segment.KindSeg, DataLength: 1, Order: 2}}, Remove: []uint64{a, b}})
	require.NoError(t, err)
	require.Equal(t, uint64(2), c2.Add[0].Order)
	reserved := l.NewID() // never committed
	require.NoError(t, l.Close())

	l2, st, _ := openLog(t, mem, Options{})
	defer l2.Close()
	// The last commit recorded the counter past c, not past reserved: a
	// store seeds the rest from the files it finds (ReserveIDsBelow).
	require.Greater(t, st.NextID, c)
	l2.ReserveIDsBelow(reserved + 1)
	require.Greater(t, l2.NewID(), reserved)
	l2.ReserveIDsBelow(1) // never lowers
	next := l2.NewID()
	require.Greater(t, next, reserved+1)
	c3, err := l2.CommitEdit(Edit{Add: []SegmentMeta{{ID: next, FileKind: segment.KindSeg, DataLength: 1}}})
	require.NoError(t, err)
	require.Equal(t, uint64(3), c3.Add[0].Order, "orders continue from the durable counter")
}
