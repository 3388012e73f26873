package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/vfs"
)

// leaderOpen returns Follow's open func reading segments from leader by
// export. It counts the segments fetched.
func leaderOpen(leader *Store, fetched *int) func(SegmentInfo) (io.ReadCloser, error) {
	return func(in SegmentInfo) (io.ReadCloser, error) {
		var buf bytes.Buffer
		if _, err := leader.Export(context.Background(), in.ID, &buf); err != nil {
			return nil, err
		}
		if fetched != nil {
			*fetched++
		}
		return io.NopCloser(&buf), nil
	}
}

// syncFollower runs the pull protocol once: ChangesSince(FollowedSeq) on
// the leader, Follow on the follower. A segment that a leader merge retired
// between the two calls fails the export: ask again. The retries are
// bounded by time, not by count: on a loaded machine the leader's
// background merges can win many races in a row, but they settle.
func syncFollower(t testing.TB, leader, follower *Store) Changes {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ch := leader.ChangesSince(follower.FollowedSeq())
		err := follower.Follow(context.Background(), ch, leaderOpen(leader, nil))
		if err == nil {
			require.Equal(t, ch.Seq, follower.FollowedSeq())
			return ch
		}
		if !errors.Is(err, ErrNoSegment) || time.Now().After(deadline) {
			require.NoError(t, err)
		}
	}
}

func unmergedOpts(fsys vfs.FS) *Options {
	return &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
}

// TestFollowDroppedTombstone: a merge that includes the oldest segment drops
// a tombstone; the follower must drop the segment holding the old value
// too, not keep it beneath the merge output (issue 28, 1A).
func TestFollowDroppedTombstone(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	follower := mustOpen(t, "/f", unmergedOpts(vfs.NewMem()))
	defer follower.Close()

	require.NoError(t, leader.Put([]byte("k"), []byte("v1")))
	require.NoError(t, leader.Seal())
	syncFollower(t, leader, follower)
	require.NoError(t, leader.Delete([]byte("k")))
	require.NoError(t, leader.Put([]byte("j"), []byte("x")))
	require.NoError(t, leader.Seal())
	require.NoError(t, leader.Compact(context.Background()))
	require.Len(t, leader.Segments(), 1)
	syncFollower(t, leader, follower)

	_, err := leader.Get([]byte("k"))
	require.ErrorIs(t, err, ErrNotFound)
	_, err = follower.Get([]byte("k"))
	require.ErrorIs(t, err, ErrNotFound, "the follower kept the value the leader's merge deleted")
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower))
	require.Len(t, follower.Segments(), 1)
}

// TestFollowPartialMerge: a merge of the two oldest segments is older than
// the segment after them; the follower must keep that order (issue 28, 1B).
func TestFollowPartialMerge(t *testing.T) {
	lopts := &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true, MaxStepBytes: 4096, KeepWriteOrder: true}}
	leader := mustOpen(t, "/l", lopts)
	defer leader.Close()
	follower := mustOpen(t, "/f", unmergedOpts(vfs.NewMem()))
	defer follower.Close()

	require.NoError(t, leader.Put([]byte("k"), []byte("v1")))
	require.NoError(t, leader.Seal())
	require.NoError(t, leader.Put([]byte("j"), []byte("x")))
	require.NoError(t, leader.Seal())
	syncFollower(t, leader, follower)
	require.NoError(t, leader.Put([]byte("k"), []byte("v2")))
	require.NoError(t, leader.Put([]byte("big"), bytes.Repeat([]byte("b"), 64<<10)))
	require.NoError(t, leader.Seal())
	syncFollower(t, leader, follower)
	require.NoError(t, leader.Compact(context.Background()))
	require.Len(t, leader.Segments(), 2, "only the two small old segments fit one step")
	syncFollower(t, leader, follower)

	v, err := follower.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v2", string(v), "the merge of old segments shadowed newer data on the follower")
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower))
}

// TestFollowRules: re-running a Follow is harmless, changes from another
// seq are refused, a follower with writes of its own is refused and keeps
// them, and the follower's merges leave mirrored segments alone.
func TestFollowRules(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	fmem := vfs.NewMem()
	follower := mustOpen(t, "/f", &Options{FS: fmem, SegmentSize: 64 << 10})

	for i := range 3 {
		require.NoError(t, leader.Put(fmt.Appendf(nil, "k%d", i), []byte("v")))
		require.NoError(t, leader.Seal())
	}
	ch := syncFollower(t, leader, follower)
	seq := follower.ManifestSeq()
	fetched := 0
	require.NoError(t, follower.Follow(context.Background(), ch, leaderOpen(leader, &fetched)), "a re-run")
	require.Zero(t, fetched)
	require.Equal(t, seq, follower.ManifestSeq(), "a re-run commits nothing")

	// Changes asked from an older seq than the follower stands at.
	require.NoError(t, leader.Put([]byte("k9"), []byte("v")))
	require.NoError(t, leader.Seal())
	stale := leader.ChangesSince(ch.Since)
	require.ErrorIs(t, follower.Follow(context.Background(), stale, leaderOpen(leader, nil)), ErrFollowGap)
	// A full listing is always accepted, and fetches only what is missing.
	full := leader.ChangesSince(leader.ManifestSeq() + 100)
	require.False(t, full.Complete)
	fetched = 0
	require.NoError(t, follower.Follow(context.Background(), full, leaderOpen(leader, &fetched)))
	require.Equal(t, 1, fetched)
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower))

	// The follower's own merges do not touch mirrored segments.
	require.NoError(t, follower.Compact(context.Background()))
	require.Len(t, follower.Segments(), 4)

	// Bad input.
	require.ErrorIs(t, follower.Follow(context.Background(), ch, nil), ErrInvalidOption)
	bad := leader.ChangesSince(follower.FollowedSeq())
	bad.Added = append(bad.Added, SegmentInfo{ID: 0, Order: 3})
	require.ErrorIs(t, follower.Follow(context.Background(), bad, leaderOpen(leader, nil)), ErrInvalidOption)

	// A stream that is not the segment claimed.
	require.NoError(t, leader.Put([]byte("k10"), []byte("v")))
	require.NoError(t, leader.Seal())
	next := leader.ChangesSince(follower.FollowedSeq())
	wrong := func(in SegmentInfo) (io.ReadCloser, error) {
		var buf bytes.Buffer
		_, err := leader.Export(context.Background(), leader.Segments()[0].ID, &buf)
		return io.NopCloser(&buf), err
	}
	err := follower.Follow(context.Background(), next, wrong)
	var ie *ImportError
	require.ErrorAs(t, err, &ie)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = follower.Get([]byte("k10"))
	require.ErrorIs(t, err, ErrNotFound, "nothing of a refused Follow is visible")

	// Writes of its own: refused, and kept.
	require.NoError(t, follower.Put([]byte("mine"), []byte("1")))
	require.ErrorIs(t, follower.Follow(context.Background(), next, leaderOpen(leader, nil)), ErrDiverged)
	require.NoError(t, follower.Seal())
	require.ErrorIs(t, follower.Follow(context.Background(), next, leaderOpen(leader, nil)), ErrDiverged)
	v, err := follower.Get([]byte("mine"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
	checkAndClose(t, follower)

	// After a reopen the follower still knows what it mirrors.
	follower = mustOpen(t, "/f", &Options{FS: fmem, SegmentSize: 64 << 10})
	defer follower.Close()
	require.Equal(t, full.Seq, follower.FollowedSeq())
	require.ErrorIs(t, follower.Follow(context.Background(), next, leaderOpen(leader, nil)), ErrDiverged)
	// ReplaceAll(nil) empties it; it can follow from scratch.
	_, err = follower.ReplaceAll(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, follower.Follow(context.Background(), leader.ChangesSince(leader.ManifestSeq()+1), leaderOpen(leader, nil)))
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower))
}

// leaderFollowerWorkload drives a leader through random writes, deletes,
// range deletes (dropping whole segments), seals, merges of every shape
// (background, Compact, partial with a small MaxStepBytes), imports beneath
// unsealed writes, manifest checkpoints and ReplaceAll, and calls sync at
// random points with the leader freshly sealed. sync returns the leader's
// contents at that point. With lmem set, the leader also crashes (a power
// cut image in a random mode) and is reopened from the image with lopts.
func leaderFollowerWorkload(t *testing.T, rng *rand.Rand, lp **Store, lmem *vfs.Mem, lopts *Options, steps int, sync func(want model)) {
	t.Helper()
	leader := *lp
	defer func() { *lp = leader }()
	peer := mustOpen(t, "/peer", unmergedOpts(vfs.NewMem()))
	defer peer.Close()
	const keySpace = 60
	for step := range steps {
		switch r := rng.IntN(100); {
		case r < 55:
			require.NoError(t, applyOps(leader, randomOps(rng, 1+rng.IntN(4), keySpace)))
		case r < 62:
			lo, hi := rng.IntN(keySpace), rng.IntN(keySpace)
			if lo > hi {
				lo, hi = hi, lo
			}
			require.NoError(t, leader.DeleteRange(fmt.Appendf(nil, "key-%03d", lo), fmt.Appendf(nil, "key-%03d", hi+1)))
		case r < 75:
			require.NoError(t, leader.Seal())
		case r < 80:
			require.NoError(t, leader.Compact(context.Background()))
		case r < 85:
			// An import beneath the leader's unsealed writes.
			require.NoError(t, applyOps(peer, randomOps(rng, 1+rng.IntN(6), keySpace)))
			require.NoError(t, peer.Seal())
			segs := peer.Segments()
			var buf bytes.Buffer
			_, err := peer.Export(context.Background(), segs[len(segs)-1].ID, &buf)
			require.NoError(t, err)
			_, err = leader.Import(context.Background(), &buf)
			require.NoError(t, err)
		case r < 88:
			require.NoError(t, leader.mlog.Checkpoint())
		case r < 90 && lmem != nil:
			img := lmem.CrashClone(testutil.CrashModes()[rng.IntN(len(testutil.CrashModes()))], rng)
			require.NoError(t, leader.Close())
			o := *lopts
			o.FS = img
			lmem = img
			var err error
			leader, err = Open("/l", &o)
			require.NoError(t, err)
			*lp = leader
		case r < 91:
			sn, err := peer.NewSealedSnapshot()
			require.NoError(t, err)
			var segs []ReplaceSegment
			for _, in := range sn.Segments() {
				var buf bytes.Buffer
				_, err := sn.Export(context.Background(), in.ID, &buf)
				require.NoError(t, err)
				segs = append(segs, ReplaceSegment{Digest: in.Digest, Size: in.Size, Data: &buf})
			}
			_, err = leader.ReplaceAll(context.Background(), segs)
			require.NoError(t, err)
			require.NoError(t, sn.Close())
		default:
			require.NoError(t, leader.Seal())
			sync(model(dumpStore(t, leader)))
		}
		_ = step
	}
	require.NoError(t, leader.Seal())
	sync(model(dumpStore(t, leader)))
}

// TestFollowModel: after every Follow the follower reads exactly what the
// leader read at that seq, whatever happened in between and whichever
// syncs were skipped, across crashes of the leader; under several leader
// configurations and sync modes, background merges on both sides.
func TestFollowModel(t *testing.T) {
	configs := []MergeOptions{
		{Disable: true},
		{},
		{MaxStepBytes: 4096, KeepWriteOrder: true},
		{MaxStepBytes: 8192, MinRun: 2},
	}
	for ci, mo := range configs {
		t.Run(fmt.Sprint(ci), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 28))
			lmem := vfs.NewMem()
			lopts := &Options{FS: lmem, SegmentSize: 4 << 10, Merge: mo, Sync: SyncMode(ci % 2)}
			leader := mustOpen(t, "/l", lopts)
			defer func() { leader.Close() }()
			follower := mustOpen(t, "/f", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10})
			defer follower.Close()
			syncs := 0
			leaderFollowerWorkload(t, rng, &leader, lmem, lopts, 400, func(want model) {
				if rng.IntN(3) == 0 {
					return // a skipped sync
				}
				syncFollower(t, leader, follower)
				require.NoError(t, fullDiff(follower, want, keyNames(60)), "sync %d", syncs)
				syncs++
			})
			require.Greater(t, syncs, 5)
			require.NoError(t, follower.Check())
		})
	}
}

// TestFollowCrashEverySyncPoint: a power-loss image of the follower is taken
// before and after every barrier of its Follows, in every crash mode. Each
// image opens to a mirror the follower acknowledged (the one before the
// Follow in progress or the one after it), with FollowedSeq saying which;
// and a Follow from there ends exact.
func TestFollowCrashEverySyncPoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 28))
	leader := mustOpen(t, "/l", &Options{FS: vfs.NewMem(), SegmentSize: 4 << 10, Merge: MergeOptions{MaxStepBytes: 8192}})
	defer leader.Close()
	fmem := vfs.NewMem()
	fopts := func(fsys vfs.FS) *Options { return &Options{FS: fsys, SegmentSize: 4 << 10} }
	follower := mustOpen(t, "/f", fopts(fmem))
	rec := testutil.NewCrashRecorder(fmem, rand.New(rand.NewPCG(6, 28)))
	fmem.SetSyncHook(rec.Hook)
	// history[k]: the leader's contents at the k-th acknowledged Follow,
	// by its seq.
	history := []model{{}}
	seqs := []uint64{0}
	leaderFollowerWorkload(t, rng, &leader, nil, nil, 250, func(want model) {
		rec.Started.Add(1)
		ch := syncFollower(t, leader, follower)
		history, seqs = append(history, want), append(seqs, ch.Seq)
		rec.Acked.Add(1)
	})
	fmem.SetSyncHook(nil)
	require.NoError(t, follower.Close())
	points := rec.Points()
	require.Greater(t, len(points), 20)
	for _, p := range points {
		s, err := openGated("/f", fopts(p.FS))
		require.NoError(t, err, p.Label)
		k := -1
		for i := p.Lo; i <= p.Hi && i < len(seqs); i++ {
			if seqs[i] == s.FollowedSeq() {
				k = i
			}
		}
		require.GreaterOrEqual(t, k, 0, "%s: followed seq %d outside the acknowledged window [%d, %d]", p.Label, s.FollowedSeq(), p.Lo, p.Hi)
		require.NoError(t, fullDiff(s.Store, history[k], keyNames(60)), "%s (%v): image at followed seq %d", p.Label, p.Mode, s.FollowedSeq())
		orph, err := orphans(p.FS, s.Store)
		require.NoError(t, err)
		require.Empty(t, orph, p.Label)
		require.NoError(t, s.closeAll())
	}
	// One image resumed: it follows to the leader's present.
	s := mustOpen(t, "/f", fopts(points[len(points)/2].FS))
	defer s.Close()
	syncFollower(t, leader, s)
	require.Equal(t, dumpStore(t, leader), dumpStore(t, s))
}

// TestFollowCost: a Follow fetches only the segments added since the last
// one and commits them with one manifest commit and one directory sync,
// however many segments the leader holds; a Follow with nothing new fetches
// nothing and syncs no directory.
func TestFollowCost(t *testing.T) {
	leader := mustOpen(t, "/l", unmergedOpts(vfs.NewMem()))
	defer leader.Close()
	cfs := vfs.NewCounting(vfs.NewMem())
	follower := mustOpen(t, "/f", &Options{FS: cfs, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	defer follower.Close()
	require.Eventually(t, func() bool { return follower.Metrics().SparesMade >= 1 }, timeout, tick)
	rotations := func() uint64 {
		var st manifestlog.Stats
		require.Eventually(t, func() bool { st = follower.mlog.Stats(); return !st.Rotating }, timeout, tick)
		return st.Rotations + st.RotationFailures
	}
	key := 0
	for _, n := range []int{1, 10, 100, 300} {
		for range n {
			require.NoError(t, leader.Put(fmt.Appendf(nil, "key-%05d", key), []byte("v")))
			require.NoError(t, leader.Seal())
			key++
		}
		cfs.Reset()
		rotBefore := rotations()
		seq := follower.ManifestSeq()
		fetched := 0
		ch := leader.ChangesSince(follower.FollowedSeq())
		if ch.Complete {
			require.Len(t, ch.Added, n)
		} // else the leader's manifest was checkpointed: a full listing

		require.NoError(t, follower.Follow(context.Background(), ch, leaderOpen(leader, &fetched)))
		c := cfs.Counts()
		require.Equal(t, n, fetched, "only the %d new segments are fetched", n)
		require.Equal(t, seq+1, follower.ManifestSeq(), "one manifest commit")
		require.EqualValues(t, 1, c.DirSyncs-int64(rotations()-rotBefore), "one directory sync for %d segments", n)
	}
	require.Len(t, follower.Segments(), key)
	cfs.Reset()
	fetched := 0
	require.NoError(t, follower.Follow(context.Background(), leader.ChangesSince(follower.FollowedSeq()), leaderOpen(leader, &fetched)))
	require.Zero(t, fetched)
	require.Zero(t, cfs.Counts().DirSyncs)
	require.Equal(t, dumpStore(t, leader), dumpStore(t, follower))
}
