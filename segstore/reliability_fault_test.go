package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// I/O errors: a fixed workload runs on vfs.Faulty around vfs.Mem with one
// fault armed: the n-th operation of one kind (file sync, directory sync,
// write, rename, remove, create, truncate, preallocate) fails, once or from
// then on, and for syncs also in the Linux fsync mode (the failed fsync drops
// the file's dirty pages and the next fsync on it reports success). n runs
// over every operation of that kind the workload performs. Each trial checks:
//
//   - an operation that returned nil is acknowledged: the model takes it;
//   - a write whose own live-file write or sync failed reports ErrFailed;
//   - after an operation reports ErrFailed, the store refuses every write
//     with ErrFailed and reads still answer from acknowledged history;
//   - a failed operation that did not fail the store had no effect;
//   - a reopen on the underlying Mem, with no crash and after a crash in
//     every mode, shows every acknowledged write (plus, at most, the one
//     operation in flight when the store failed), leaves no orphan file and
//     passes Check.

// faultArm is one armed fault and what it hit.
type faultArm struct {
	mu     sync.Mutex
	paused bool // the test's own checks are reading: not the workload
	seen   int
	n      int
	hits   []string // paths of the operations that failed
	fired  bool
}

// fault returns the vfs.Fault that fails the n-th matching operation (and,
// if persistent, every later one), recording the paths it fails. The Nth
// logic lives here, in Match, so that the failing paths are known.
func (a *faultArm) fault(o vfs.Op, persistent, short bool) vfs.Fault {
	return vfs.Fault{Op: o, Nth: 1, Persistent: true, Short: short, Match: func(p string) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.paused {
			return false
		}
		a.seen++
		if a.seen == a.n || (persistent && a.seen > a.n) {
			a.hits = append(a.hits, p)
			a.fired = true
			return true
		}
		return false
	}}
}

// checking runs fn, the test's own comparison with the model, with the
// fault paused: a read fault is meant for the store's reads, and the
// oracle must see what the store holds.
func (a *faultArm) checking(fn func() error) error {
	a.mu.Lock()
	a.paused = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.paused = false
		a.mu.Unlock()
	}()
	return fn()
}

func (a *faultArm) hitCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.hits)
}

func (a *faultArm) hitsSince(i int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.hits[i:]...)
}

func rlFaultOptions(fsys vfs.FS) *Options {
	// Background merges are off so that the operation order is nearly the
	// same in every trial (spares are still made in the background);
	// Compact merges in the foreground.
	return &Options{FS: fsys, SegmentSize: 4 << 10, Merge: MergeOptions{Disable: true}}
}

// faultPeerStreams exports n distinct single-delta segments from a peer.
func faultPeerStreams(t *testing.T, n int) ([][]byte, []model) {
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer peer.Close()
	rng := rand.New(rand.NewPCG(5, 5))
	var streams [][]byte
	var deltas []model
	for i := range n {
		d := model{}
		for j := range 6 {
			k := fmt.Sprintf("key-%03d", rng.IntN(40))
			if j == 0 {
				k = fmt.Sprintf("imp-%02d", i)
			}
			v := fmt.Sprintf("peer-%d-%d", i, j)
			require.NoError(t, peer.Put([]byte(k), []byte(v)))
			d[k] = v
		}
		streams = append(streams, exportNewest(t, peer))
		deltas = append(deltas, d)
	}
	return streams, deltas
}

// faultVariant is how an armed fault fails: once or from then on, with the
// Linux fsync behaviour (syncs), or as a short read (reads).
type faultVariant struct{ persistent, linux, short bool }

func (v faultVariant) String() string {
	return fmt.Sprintf("persistent=%v linux=%v short=%v", v.persistent, v.linux, v.short)
}

// faultOutcome is what a fault trial saw.
type faultOutcome struct {
	injected int64
	failed   bool // the store entered the failed state
	checks   int  // reopen checks passed
	opsSeen  int  // operations of the armed kind the workload performed (checks excluded)
}

// runFaultTrial runs the workload with arm's fault (nil: none) and checks it.
// It returns the outcome and the first violation found.
func runFaultTrial(t *testing.T, streams [][]byte, deltas []model, o vfs.Op, n int, v faultVariant) (faultOutcome, *vfs.Faulty, error) {
	persistent, linux := v.persistent, v.linux
	var out faultOutcome
	const keySpace = 40
	keys := append(keyNames(keySpace), "imp-00", "imp-01", "imp-02", "imp-03", "probe")
	ctx := t.Context()
	mem := vfs.NewMem()
	fty := vfs.NewFaulty(mem)
	fty.SetLinuxFsync(linux)
	s, err := Open("/db", rlFaultOptions(fty))
	if err != nil {
		return out, fty, fmt.Errorf("open before arming: %w", err)
	}
	arm := &faultArm{n: n}
	if n > 0 {
		if err := fty.Inject(arm.fault(o, persistent, v.short)); err != nil {
			return out, fty, err
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	m := model{}      // acknowledged state
	var pending model // the operation in flight when the store failed
	nextStream := 0
	closed := false
	var settleModel func(st *Store, what string) error
	// failedNow reports whether the store has entered the failed state.
	failedNow := func() bool { return s.failed() != nil && !s.closed.Load() }

	// settle decides an uncertain operation after a reopen: the store shows
	// either m or pending.
	settle := func(st *Store, what string) error {
		return arm.checking(func() error { return settleModel(st, what) })
	}
	settleModel = func(st *Store, what string) error {
		if pending != nil && fullDiff(st, pending, keys) == nil {
			m, pending = pending, nil
			return nil
		}
		pending = nil
		if err := fullDiff(st, m, keys); err != nil {
			return fmt.Errorf("%s: acknowledged history lost: %w", what, err)
		}
		return nil
	}
	// readsOK checks reads after a failure: acknowledged history (or that
	// plus the failed operation) still reads back.
	readsOK := func() error {
		return arm.checking(func() error {
			if pending != nil && fullDiff(s, pending, keys) == nil {
				return nil
			}
			return fullDiff(s, m, keys)
		})
	}

	for step := 0; step < 70; step++ {
		wasFailed := failedNow()
		before := arm.hitCount()
		r := rng.IntN(100)
		var next model
		var err error
		isWrite := false
		switch {
		case r < 60:
			ops := randomOps(rng, 1+rng.IntN(2)*rng.IntN(4), keySpace)
			next = m.clone()
			next.apply(ops)
			live := rlTailPath(s)
			err = applyOps(s, ops)
			isWrite = true
			// A fault on this write's own live-file write or sync must be
			// reported: the write is not acknowledged.
			if err == nil && (o == vfs.OpWrite || o == vfs.OpFileSync) && !wasFailed {
				for _, p := range arm.hitsSince(before) {
					if p == live {
						return out, fty, fmt.Errorf("step %d: %v of the live file %s failed, yet the write was acknowledged", step, o, p)
					}
				}
			}
		case r < 72:
			err = s.Seal()
		case r < 77:
			err = s.Compact(ctx)
		case r < 84:
			if nextStream >= len(streams) {
				continue
			}
			if err = s.Seal(); err != nil {
				break
			}
			next = m.clone()
			for k, v := range deltas[nextStream] {
				next[k] = v
			}
			_, err = s.Import(ctx, bytes.NewReader(streams[nextStream]))
			nextStream++
			isWrite = true
		case r < 89:
			err = s.mlog.Checkpoint()
		case r < 93:
			err = s.Sync()
		default:
			// Reopen through the faulty file system.
			cerr := s.Close()
			_ = cerr // a close after a fault may report it
			st, oerr := Open("/db", rlFaultOptions(fty))
			if oerr != nil {
				closed = true
				step = 1 << 30 // the trial ends with the reopen checks below
				break
			}
			s = st
			if err := settle(s, fmt.Sprintf("step %d: reopen through the faulty fs", step)); err != nil {
				return out, fty, err
			}
			continue
		}
		if closed {
			break
		}
		switch {
		case err == nil && isWrite:
			m = next
		case err != nil && isWrite && !wasFailed && failedNow():
			pending = next // failed the store: may or may not be durable
		case err != nil && isWrite:
			// Refused or failed without failing the store: no effect.
			if e := arm.checking(func() error {
				if e := fullDiff(s, m, keys); e != nil && (pending == nil || fullDiff(s, pending, keys) != nil) {
					return e
				}
				return nil
			}); e != nil {
				return out, fty, fmt.Errorf("step %d: a failed write (%v) had an effect: %w", step, err, e)
			}
		}
		if err != nil && errors.Is(err, ErrFailed) && !failedNow() {
			return out, fty, fmt.Errorf("step %d: %v reported ErrFailed but the store still accepts writes", step, err)
		}
		if failedNow() {
			out.failed = true
			// Fail-stop: every write is refused, reads keep working.
			if err := s.Put([]byte("probe"), []byte("x")); !errors.Is(err, ErrFailed) {
				return out, fty, fmt.Errorf("step %d: put after failure: %v, want ErrFailed", step, err)
			}
			b := s.NewBatch()
			b.Delete([]byte("key-000"))
			if err := s.Apply(b); !errors.Is(err, ErrFailed) {
				return out, fty, fmt.Errorf("step %d: apply after failure: %v, want ErrFailed", step, err)
			}
			if err := s.Seal(); !errors.Is(err, ErrFailed) {
				return out, fty, fmt.Errorf("step %d: seal after failure: %v, want ErrFailed", step, err)
			}
			if _, err := s.Import(ctx, bytes.NewReader(streams[0])); !errors.Is(err, ErrFailed) {
				return out, fty, fmt.Errorf("step %d: import after failure: %v, want ErrFailed", step, err)
			}
			if err := readsOK(); err != nil {
				return out, fty, fmt.Errorf("step %d: reads after failure: %w", step, err)
			}
			break
		}
	}

	// Power loss now, in every mode; then a clean close.
	var imgs []*vfs.Mem
	if !closed {
		for _, mode := range testutil.CrashModes() {
			imgs = append(imgs, mem.CrashClone(mode, rng))
		}
		s.Close()
	} else {
		for _, mode := range testutil.CrashModes() {
			imgs = append(imgs, mem.CrashClone(mode, rng))
		}
	}
	out.injected = fty.Stats().Total()
	arm.mu.Lock()
	out.opsSeen = arm.seen
	arm.mu.Unlock()
	pend0 := pending
	check := func(fsys *vfs.Mem, what string) error {
		m0 := m
		defer func() { m, pending = m0, pend0 }()
		gs, err := openGated("/db", rlFaultOptions(fsys))
		if err != nil {
			return fmt.Errorf("%s: open: %w", what, err)
		}
		defer gs.closeAll()
		if orph, err := orphans(fsys, gs.Store); err != nil || len(orph) > 0 {
			return fmt.Errorf("%s: orphan files %v (err %v)", what, orph, err)
		}
		if err := settle(gs.Store, what); err != nil {
			return err
		}
		if err := gs.Check(); err != nil {
			return fmt.Errorf("%s: check: %w", what, err)
		}
		gs.release()
		if err := gs.Put([]byte("probe"), []byte("after")); err != nil {
			return fmt.Errorf("%s: put after reopen: %w", what, err)
		}
		out.checks++
		return nil
	}
	for i, img := range imgs {
		if err := check(img, fmt.Sprintf("reopen after crash (%v)", testutil.CrashModes()[i])); err != nil {
			return out, fty, err
		}
	}
	if err := check(mem, "reopen without crash"); err != nil {
		return out, fty, err
	}
	return out, fty, nil
}

// rlTailPath is the path of the current live file.
func rlTailPath(s *Store) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.tail.path
}

func TestReliabilityIOErrors(t *testing.T) {
	streams, deltas := faultPeerStreams(t, 4)
	// A fault-free run counts the operations of each kind.
	base, fty, err := runFaultTrial(t, streams, deltas, vfs.OpWrite, 0, faultVariant{})
	require.NoError(t, err)
	require.False(t, base.failed)
	seen := fty.Stats().Seen
	kinds := []vfs.Op{vfs.OpFileSync, vfs.OpDirSync, vfs.OpWrite, vfs.OpRename, vfs.OpRemove, vfs.OpCreate, vfs.OpTruncate, vfs.OpPreallocate, vfs.OpRead, vfs.OpOpen}
	const maxPerVariant = 24
	var trials, failedStores, checks int
	var injected, dropped int64
	byKind := map[string]int64{}
	wrong := 0
	for _, o := range kinds {
		// Count the workload's own operations of this kind (the model
		// checks' reads excluded) with a fault that never fires.
		count, _, err := runFaultTrial(t, streams, deltas, o, math.MaxInt, faultVariant{})
		require.NoError(t, err)
		total := count.opsSeen
		variants := []faultVariant{{}, {persistent: true}}
		switch o {
		case vfs.OpFileSync:
			variants = append(variants, faultVariant{linux: true}, faultVariant{persistent: true, linux: true})
		case vfs.OpRead:
			variants = append(variants, faultVariant{short: true}, faultVariant{persistent: true, short: true})
		}
		for _, v := range variants {
			stride := max(1, (total+maxPerVariant-1)/maxPerVariant)
			for n := 1; n <= total; n += stride {
				out, fty, err := runFaultTrial(t, streams, deltas, o, n, v)
				trials++
				injected += out.injected
				dropped += fty.Stats().Dropped
				checks += out.checks
				byKind[fmt.Sprintf("%v %v", o, v)] += out.injected
				if out.failed {
					failedStores++
				}
				if err != nil {
					wrong++
					if wrong <= 10 {
						t.Errorf("fault %v #%d %v (stats %+v): %v", o, n, v, fty.Stats(), err)
					}
				}
			}
		}
	}
	t.Logf("operations per fault-free run: %v (the engine never renames)", fmtOps(seen))
	t.Logf("fault trials: %d, faults injected: %d (Linux-mode fsyncs that dropped dirty pages: %d), stores failed-stop: %d, reopen checks: %d",
		trials, injected, dropped, failedStores, checks)
	t.Logf("faults injected by kind: %v", byKind)
	t.Logf("wrong answers: %d", wrong)
	require.Zero(t, wrong)
}

func fmtOps(m map[vfs.Op]int64) string {
	var parts []string
	for o := vfs.Op(0); o <= vfs.OpOpen; o++ {
		if o == vfs.OpAnySync {
			continue
		}
		parts = append(parts, fmt.Sprintf("%v=%d", o, m[o]))
	}
	return strings.Join(parts, " ")
}

// TestReliabilityENOSPC runs out of space at many points of a workload:
// writes fail cleanly (an error matching ENOSPC, then ErrFailed), reads
// keep working, and once space returns a reopen continues and accepts
// writes.
func TestReliabilityENOSPC(t *testing.T) {
	const keySpace = 40
	keys := keyNames(keySpace)
	var trials, enospc, refusedWrites int
	for limit := int64(0); limit < 40000; limit += 613 {
		mem := vfs.NewMem()
		fty := vfs.NewFaulty(mem)
		o := rlFaultOptions(fty)
		s := mustOpen(t, "/db", o)
		rng := rand.New(rand.NewPCG(uint64(limit), 3))
		m := model{}
		var pending model
		fty.SetSpaceLimit(limit)
		var sawErr error
		for i := 0; i < 400 && sawErr == nil; i++ {
			if rng.IntN(15) == 0 {
				// A seal that runs out of space making the next live file
				// reports it; the store may go on writing into the current
				// live file, whose space was reserved.
				if err := s.Seal(); err != nil {
					require.True(t, errors.Is(err, syscall.ENOSPC), "limit %d: seal: %v should match ENOSPC", limit, err)
					if s.failed() != nil {
						sawErr = err
					}
				}
				continue
			}
			ops := randomOps(rng, 1+rng.IntN(3), keySpace)
			next := m.clone()
			next.apply(ops)
			if err := applyOps(s, ops); err != nil {
				sawErr = err
				pending = next
				break
			}
			m = next
		}
		require.Error(t, sawErr, "limit %d: space never ran out", limit)
		require.True(t, errors.Is(sawErr, syscall.ENOSPC), "limit %d: %v should match ENOSPC", limit, sawErr)
		enospc++
		trials++
		// Writes are refused from now on (the store does not retry into a
		// full disk); reads keep working.
		err := s.Put([]byte("key-001"), []byte("x"))
		require.ErrorIs(t, err, ErrFailed, "limit %d", limit)
		refusedWrites++
		if pending == nil || fullDiff(s, pending, keys) != nil {
			require.NoError(t, fullDiff(s, m, keys), "limit %d: reads after ENOSPC", limit)
		}
		s.Close()
		// Space returns: a reopen continues and accepts writes.
		fty.SetSpaceLimit(-1)
		s = mustOpen(t, "/db", o)
		if pending == nil || fullDiff(s, pending, keys) != nil {
			require.NoError(t, fullDiff(s, m, keys), "limit %d: reopen after space returned", limit)
		} else {
			m = pending
		}
		require.NoError(t, s.Check())
		require.NoError(t, s.Put([]byte("key-002"), []byte("after")))
		m["key-002"] = "after"
		require.NoError(t, s.Seal())
		require.NoError(t, s.Close())
		s = mustOpen(t, "/db", o)
		require.NoError(t, fullDiff(s, m, keys))
		require.NoError(t, s.Check())
		require.NoError(t, s.Close())
	}
	t.Logf("ENOSPC trials: %d, ENOSPC errors reported: %d, writes refused after: %d, wrong answers: 0", trials, enospc, refusedWrites)
}
