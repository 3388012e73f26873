package manifestlog

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestRestateGivesNewOrder: an edit that adds a present id with Order 0
// restates it under a fresh order from the log's counter, keeping the id
// (segstore.ReplaceAll keeps a local file this way while it removes the
// rest in the same edit). The restated metadata survives a reopen and a
// checkpoint, and Changes reports the id as added by that edit and not
// removed.
func TestRestateGivesNewOrder(t *testing.T) {
	mem := vfs.NewMem()
	l, _, _ := openLog(t, mem, Options{MinCheckpointBytes: 1 << 40})
	a, b, c := seg(1), seg(2), seg(3)
	a.Order, b.Order, c.Order = 0, 0, 0
	_, err := l.Commit(Edit{Add: []SegmentMeta{a, b, c}})
	require.NoError(t, err)
	st := l.State()
	require.Less(t, st.Segments[1].Order, st.Segments[3].Order)
	seq := l.Seq()

	// The new set, oldest first: 3 (kept), then 4 (new), then 1 (kept);
	// 2 goes.
	three, four, one := st.Segments[3], seg(4), st.Segments[1]
	three.Order, four.Order, one.Order = 0, 0, 0
	cm, err := l.CommitEdit(Edit{Add: []SegmentMeta{three, four, one}, Remove: []uint64{2}, SetLive: true, LiveID: 9})
	require.NoError(t, err)
	require.Len(t, cm.Add, 3)
	require.Less(t, cm.Add[0].Order, cm.Add[1].Order)
	require.Less(t, cm.Add[1].Order, cm.Add[2].Order)
	require.Greater(t, cm.Add[0].Order, st.Segments[3].Order, "fresh orders, above every order in use")
	for _, m := range cm.Add {
		require.Equal(t, cm.Seq, m.AddedSeq)
	}
	want := l.State()
	require.Len(t, want.Segments, 3)
	require.Equal(t, cm.Add[2], want.Segments[1])

	added, removed, complete := l.Changes(seq)
	require.True(t, complete)
	require.Equal(t, []uint64{2}, removed)
	var ids []uint64
	for _, m := range added {
		ids = append(ids, m.ID)
	}
	require.ElementsMatch(t, []uint64{1, 3, 4}, ids)

	require.NoError(t, l.Close())
	l, st2, _ := openLog(t, mem, Options{MinCheckpointBytes: 1 << 40})
	requireStateEqual(t, want, st2, "after reopen")
	require.NoError(t, l.Checkpoint())
	require.NoError(t, l.Close())
	l, st3, _ := openLog(t, mem, Options{})
	requireStateEqual(t, want, st3, "after a checkpoint")
	require.NoError(t, l.Close())
}

// TestRemovalOfRestatedSegmentIsAChange: a segment present at seq S,
// restated after S and then removed, was seen by a peer that stands at S:
// Changes(S) must list its removal (the restatement's AddedSeq is after S,
// but the id existed at S). Before the fix it was left out, and a follower
// kept a segment its leader had dropped. Also after a reopen, which replays
// the restatement onto the checkpoint's metadata.
func TestRemovalOfRestatedSegmentIsAChange(t *testing.T) {
	mem := vfs.NewMem()
	l, _, _ := openLog(t, mem, Options{MinCheckpointBytes: 1 << 40})
	a, b := seg(1), seg(2)
	_, err := l.Commit(Edit{Add: []SegmentMeta{a, b}})
	require.NoError(t, err)
	require.NoError(t, l.Checkpoint())
	since := l.Seq()
	a.Order = 77
	_, err = l.Commit(Edit{Add: []SegmentMeta{a}}) // restated
	require.NoError(t, err)
	check := func(l *Log, what string) {
		_, removed, complete := l.Changes(since)
		require.True(t, complete, what)
		require.Equal(t, []uint64{1}, removed, what)
	}
	// A segment added after since, restated and removed, was never seen.
	c := seg(3)
	_, err = l.Commit(Edit{Add: []SegmentMeta{c}})
	require.NoError(t, err)
	c.Order = 99
	_, err = l.Commit(Edit{Add: []SegmentMeta{c}})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l, _, _ = openLog(t, mem, Options{MinCheckpointBytes: 1 << 40})
	_, err = l.Commit(Edit{Remove: []uint64{1, 3}})
	require.NoError(t, err)
	check(l, "live")
	require.NoError(t, l.Close())
	l, _, _ = openLog(t, mem, Options{MinCheckpointBytes: 1 << 40})
	defer l.Close()
	check(l, "after a reopen")
}
