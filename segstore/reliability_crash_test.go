package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// The whole-engine crash test: one randomized workload that puts, deletes,
// applies batches, seals, compacts, lets the background merge (MinRun 2),
// imports segments exported from a second store (and refuses damaged ones),
// exports, checkpoints the manifest, reopens cleanly and reopens after a
// crash. Every barrier the store issues (file sync or directory sync, from
// any goroutine) is a crash point: an image of what a power loss at that
// instant leaves, in one of the vfs crash modes, round-robin. Each image is
// opened and compared with the model of acknowledged history.

func rlCrashOptions(fsys vfs.FS) *Options {
	return &Options{FS: fsys, SegmentSize: 4 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}}
}

// rlWorkloadStats counts what a workload did.
type rlWorkloadStats struct {
	writes, seals, compacts, imports, badImports, exports, checkpoints, reopens, crashReopens int
}

func TestReliabilityCrashEverySyncPoint(t *testing.T) {
	seeds := testutil.CrashSeeds(t, 3)
	const steps = 170
	var points, wrong int
	var st rlWorkloadStats
	perMode := map[vfs.CrashMode]int{}
	for seed := 0; seed < seeds; seed++ {
		p, w := runReliabilityCrash(t, uint64(seed), steps, &st, perMode)
		points += p
		wrong += w
	}
	t.Logf("crash points covered: %d (seeds %d, steps %d); by mode: %v", points, seeds, steps, perMode)
	t.Logf("workload: %d writes, %d seals, %d compacts, %d imports (+%d refused), %d exports, %d checkpoints, %d reopens, %d crash-reopens",
		st.writes, st.seals, st.compacts, st.imports, st.badImports, st.exports, st.checkpoints, st.reopens, st.crashReopens)
	t.Logf("wrong answers: %d", wrong)
	require.Zero(t, wrong)
	require.GreaterOrEqual(t, points, 250*seeds)
}

// runReliabilityCrash runs one seed's workload and checks its crash points;
// it returns the points checked and how many were wrong.
func runReliabilityCrash(t *testing.T, seed uint64, steps int, st *rlWorkloadStats, perMode map[vfs.CrashMode]int) (int, int) {
	t.Helper()
	const keySpace = 48
	keys := keyNames(keySpace)
	rng := rand.New(rand.NewPCG(seed, 0x5e9))
	ctx := t.Context()
	mem := vfs.NewMem()
	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, 77)))
	history := []model{{}} // history[i]: the state after i acknowledged operations
	cur := func() model { return history[len(history)-1] }
	// begin publishes the state after the next operation before it can
	// become durable; end acknowledges it.
	begin := func(next model) {
		history = append(history, next)
		rec.Started.Add(1)
	}
	end := func() { rec.Acked.Add(1) }

	// The peer whose exported segments are imported: its own file system,
	// no merges, so that each export holds exactly one delta.
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	defer peer.Close()
	markers := 0
	peerSegment := func() ([]byte, []op) {
		ops := randomOps(rng, rng.IntN(6), keySpace)
		markers++
		ops = append(ops, op{key: fmt.Sprintf("imp-%03d-%04d", seed, markers), value: fmt.Sprintf("from peer %d", markers)})
		for _, o := range ops {
			require.NoError(t, applyOps(peer, []op{o}))
		}
		return exportNewest(t, peer), ops
	}

	s := mustOpen(t, "/db", rlCrashOptions(mem))
	mem.SetSyncHook(rec.Hook)
	for i := 0; i < steps; i++ {
		switch r := rng.IntN(100); {
		case r < 52:
			ops := randomOps(rng, 1+rng.IntN(2)*rng.IntN(5), keySpace)
			next := cur().clone()
			next.apply(ops)
			begin(next)
			require.NoError(t, applyOps(s, ops))
			end()
			st.writes++
		case r < 60:
			require.NoError(t, s.Seal())
			st.seals++
		case r < 65:
			require.NoError(t, s.Compact(ctx))
			st.compacts++
		case r < 73:
			// Seal first so that the live file is empty: imported segments
			// go below the live file, so with an empty one the import is
			// simply the newest data.
			n := 1 + rng.IntN(2)
			var streams [][]byte
			next := cur().clone()
			for range n {
				b, ops := peerSegment()
				streams = append(streams, b)
				next.apply(ops)
			}
			require.NoError(t, s.Seal())
			if rng.IntN(5) == 0 {
				// A damaged stream in the batch: nothing is adopted.
				bad := bytes.Clone(streams[len(streams)-1])
				if rng.IntN(2) == 0 {
					bad[16+rng.IntN(len(bad)-16)] ^= byte(1 << rng.IntN(8))
				} else {
					// Cut inside the last frame (the marker put), never at a
					// frame boundary: a prefix of whole frames is a valid segment.
					bad = bad[:len(bad)-1-rng.IntN(20)]
				}
				streams[len(streams)-1] = bad
				_, err := s.Import(ctx, readers(streams)...)
				var ie *ImportError
				require.True(t, errors.As(err, &ie), "damaged import: %v", err)
				require.Equal(t, len(streams)-1, ie.Stream)
				// Background merges may change the segment list meanwhile;
				// the content must not change (the batch's marker keys
				// would show).
				require.NoError(t, fullDiff(s, cur(), keys), "a refused import must change nothing")
				st.badImports++
				break
			}
			begin(next)
			_, err := s.Import(ctx, readers(streams)...)
			require.NoError(t, err)
			end()
			st.imports++
		case r < 78:
			segs := s.Segments()
			if len(segs) == 0 {
				break
			}
			si := segs[rng.IntN(len(segs))]
			var buf bytes.Buffer
			n, err := s.Export(ctx, si.ID, &buf)
			if errors.Is(err, ErrNoSegment) {
				break // merged away meanwhile
			}
			require.NoError(t, err)
			require.Equal(t, si.Size, n)
			require.Equal(t, si.Digest, digestOf(buf.Bytes()))
			st.exports++
		case r < 84:
			require.NoError(t, s.mlog.Checkpoint())
			st.checkpoints++
		case r < 90:
			require.NoError(t, fullDiff(s, cur(), keys))
		case r < 95:
			require.NoError(t, s.Close())
			s = mustOpen(t, "/db", rlCrashOptions(mem))
			st.reopens++
		case r < 97:
			// Power loss now: continue on the image. Nothing is in flight,
			// so the image must show exactly the acknowledged history.
			img, mode := rec.Crash(rng)
			mem.SetSyncHook(nil)
			s.Close() // on the old file system, which is gone
			mem = img
			mem.SetSyncHook(rec.Hook)
			rec.SetMem(mem)
			s = mustOpen(t, "/db", rlCrashOptions(mem))
			require.NoError(t, fullDiff(s, cur(), keys), "after a crash (%v) with nothing in flight", mode)
			st.crashReopens++
		default:
			require.NoError(t, s.Sync())
		}
	}
	require.NoError(t, fullDiff(s, cur(), keys))
	mem.SetSyncHook(nil)
	require.NoError(t, s.Close())

	points := rec.Points()
	wrong := 0
	for _, p := range points {
		perMode[p.Mode]++
		if err := checkCrashPoint(p, history, keys); err != nil {
			wrong++
			if wrong <= 10 {
				t.Errorf("seed %d crash point %s mode %v (acked %d, started %d): %v", seed, p.Label, p.Mode, p.Lo, p.Hi, err)
			}
		}
	}
	return len(points), wrong
}

// checkCrashPoint opens a crash image and checks it against history.
func checkCrashPoint(p testutil.CrashPoint, history []model, keys []string) error {
	o := rlCrashOptions(p.FS)
	gs, err := openGated("/db", o)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer gs.closeAll()
	if orph, err := orphans(p.FS, gs.Store); err != nil || len(orph) > 0 {
		return fmt.Errorf("after open: orphan files %v (err %v), report %+v", orph, err, gs.RecoveryReport())
	}
	matched := -1
	for k := p.Lo; k <= p.Hi && k < len(history); k++ {
		if fullDiff(gs.Store, history[k], keys) == nil {
			matched = k
			break
		}
	}
	if matched < 0 {
		return fmt.Errorf("state is no acknowledged prefix: vs %d ops: %v; vs %d ops: %v",
			p.Lo, fullDiff(gs.Store, history[p.Lo], keys), p.Hi, fullDiff(gs.Store, history[min(p.Hi, len(history)-1)], keys))
	}
	if err := gs.Check(); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	gs.release()
	// The recovered store accepts writes and keeps them across a reopen.
	if err := gs.Put([]byte("after-crash"), []byte("ok")); err != nil {
		return fmt.Errorf("put after recovery: %w", err)
	}
	if err := gs.Close(); err != nil {
		return fmt.Errorf("close after recovery: %w", err)
	}
	s, err := Open("/db", o)
	if err != nil {
		return fmt.Errorf("second open: %w", err)
	}
	defer s.Close()
	want := history[matched].clone()
	want["after-crash"] = "ok"
	if err := fullDiff(s, want, keys); err != nil {
		return fmt.Errorf("after second open: %w", err)
	}
	return nil
}

// TestReliabilityCrashSealIntoOlderSpare is the regression test for a bug the
// corruption suite found: a background spare that raced a seal's inline
// spare got the lower id, and the next seal moved writers into it, so the
// new live file had a lower id than the file it continued. Recovery looks
// for continuations among ids above the manifest's live file, so a crash
// after the switch and before the seal's manifest commit deleted the new
// live file with its acknowledged writes.
func TestReliabilityCrashSealIntoOlderSpare(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	defer s.Close()
	waitSpare(t, s, 1)
	require.NoError(t, s.Put([]byte("a"), []byte("1")))

	// The hook holds the first sync of a new .log file (the background's
	// next spare, after it drew its id) and the first manifest sync, each
	// only while armed.
	var mu sync.Mutex
	var holdSpare, holdCommit chan struct{}
	known := map[string]bool{}
	spareHeld := make(chan string, 1)
	commitHeld := make(chan struct{}, 1)
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		if !ev.Before {
			return
		}
		mu.Lock()
		hs, hc := holdSpare, holdCommit
		isNew := strings.HasSuffix(ev.Name, ".log") && !known[ev.Name]
		if hs != nil && isNew {
			holdSpare = nil
		}
		if hc != nil && strings.Contains(ev.Name, "MANIFEST-") {
			holdCommit = nil
		} else {
			hc = nil
		}
		mu.Unlock()
		switch {
		case hs != nil && isNew:
			spareHeld <- ev.Name
			<-hs
		case hc != nil:
			commitHeld <- struct{}{}
			<-hc
		}
	})
	defer mem.SetSyncHook(nil)
	hs := make(chan struct{})
	mu.Lock()
	for _, n := range mem.FileNames() {
		known[n] = true
	}
	holdSpare = hs
	mu.Unlock()
	require.NoError(t, s.Seal()) // takes the ready spare; the background starts the next
	older := <-spareHeld
	require.NoError(t, s.Put([]byte("b"), []byte("2")))
	require.NoError(t, s.Seal()) // no spare ready: makes one inline, with a higher id
	newer := rlTailPath(s)
	require.Greater(t, newer, older, "the inline spare must have drawn the higher id")
	close(hs) // the held spare becomes the ready one
	require.Eventually(t, func() bool {
		s.spare.Lock()
		defer s.spare.Unlock()
		return s.spare.file != nil && s.spare.file.path == older
	}, timeout, tick)
	require.NoError(t, s.Put([]byte("c"), []byte("3")))

	// Seal again, holding its manifest commit; an acknowledged write lands
	// in the new live file meanwhile; power is lost before the commit is
	// durable.
	hc := make(chan struct{})
	mu.Lock()
	holdCommit = hc
	mu.Unlock()
	sealErr := make(chan error, 1)
	go func() { sealErr <- s.Seal() }()
	<-commitHeld
	require.NoError(t, s.Put([]byte("d"), []byte("4")))
	live := rlTailPath(s)
	img := mem.CrashClone(vfs.CrashDropUnsynced, nil)
	close(hc)
	require.NoError(t, <-sealErr)
	t.Logf("live files: %s, then %s (inline spare), then %s", older, newer, live)

	st, err := Open("/db", &Options{FS: img, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, fullDiff(st, model{"a": "1", "b": "2", "c": "3", "d": "4"}, nil),
		"recovery report %+v", st.RecoveryReport())
	require.NoError(t, st.Check())
}
