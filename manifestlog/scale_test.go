package manifestlog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestScalingBytesPerCommit counts (never times) the manifest bytes written
// per commit, checkpoint rewrites included, at 100 and at 100,000 live
// segments. Each figure is averaged over whole rotation cycles in a steady
// state (each commit adds one segment and removes the oldest), from just after a
// rotation to just after a later one, so that it includes exactly the
// checkpoints that its commits paid for. Rotations are waited for after each
// commit, which makes the byte counts deterministic.
func TestScalingBytesPerCommit(t *testing.T) {
	cfs := vfs.NewCounting(vfs.NewMem())
	l, _, _ := openLog(t, cfs, Options{})
	defer l.Close()

	manifestBytes := func() int64 {
		var n int64
		for p, b := range cfs.Counts().BytesWritten {
			if strings.Contains(p, filePrefix) {
				n += b
			}
		}
		return n
	}
	var (
		next    uint64
		live    []uint64 // FIFO of live ids
		head    int
		commits int
	)
	commit := func(e Edit) {
		if _, err := l.Commit(e); err != nil {
			t.Fatal(err)
		}
		commits++
		l.wg.Wait() // let a rotation this commit triggered finish
	}
	add := func() {
		next++
		commit(Edit{Add: []SegmentMeta{seg(next)}, NextID: next + 1, NextOrder: next})
		live = append(live, next)
	}
	removeOldest := func() {
		commit(Edit{Remove: []uint64{live[head]}})
		head++
		if head > 1<<16 {
			live, head = append([]uint64(nil), live[head:]...), 0
		}
	}
	nlive := func() int { return len(live) - head }
	type point struct {
		live, commits int
		bytes         int64
	}
	var growth []point
	grow := func(target int) {
		for nlive() < target {
			add()
			if commits%10 == 0 {
				removeOldest()
			}
			if n := nlive(); n == 1000 || n == 10_000 || n == 100_000 {
				if len(growth) == 0 || growth[len(growth)-1].live != n {
					growth = append(growth, point{n, commits, manifestBytes()})
				}
			}
		}
	}
	// A churn commit replaces the oldest segment with a new one (what a
	// seal plus a retention step, or a one-for-one merge, commits).
	churn := func() {
		next++
		commit(Edit{Add: []SegmentMeta{seg(next)}, Remove: []uint64{live[head]}, NextID: next + 1, NextOrder: next})
		live = append(live, next)
		head++
		if head > 1<<16 {
			live, head = append([]uint64(nil), live[head:]...), 0
		}
	}
	window := func(cycles int) (perCommit float64, n int, ckpt int64) {
		require.NoError(t, l.Checkpoint())
		st := l.Stats()
		r0, b0, c0 := st.Rotations, manifestBytes(), commits
		for l.Stats().Rotations < r0+uint64(cycles) {
			churn()
		}
		return float64(manifestBytes()-b0) / float64(commits-c0), commits - c0, l.Stats().CheckpointBytes
	}

	grow(100)
	small, nSmall, ckSmall := window(4)
	t.Logf("at %6d live segments: %.1f manifest bytes per commit over %d commits (4 rotation cycles, checkpoint %d bytes)", nlive(), small, nSmall, ckSmall)

	grow(100_000)
	big, nBig, ckBig := window(1)
	t.Logf("at %6d live segments: %.1f manifest bytes per commit over %d commits (1 rotation cycle, checkpoint %d bytes)", nlive(), big, nBig, ckBig)
	require.LessOrEqual(t, big, 2*small, "bytes per commit must not grow with the number of segments")

	// Total bytes grow linearly with commits: the average over the whole
	// growth is bounded by a constant near the per-commit figure, where a
	// rewrite-per-commit manifest would be ~N/2 segments (megabytes) per commit.
	for _, p := range growth {
		t.Logf("growth: %6d live after %6d commits: %9d manifest bytes, %.1f per commit", p.live, p.commits, p.bytes, float64(p.bytes)/float64(p.commits))
	}
	require.Len(t, growth, 3)
	first, last := growth[0], growth[len(growth)-1]
	perFirst := float64(first.bytes) / float64(first.commits)
	perLast := float64(last.bytes) / float64(last.commits)
	require.LessOrEqual(t, perLast, 2.5*perFirst, "total manifest bytes must grow linearly")
	st := l.Stats()
	t.Logf("total: %d commits, %d rotations, %d syncs, %d manifest bytes", st.Commits, st.Rotations, st.Syncs, manifestBytes())
}
