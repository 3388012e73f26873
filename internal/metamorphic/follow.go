package metamorphic

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

const followerDir = "/follower"

// mirror is what the follower must show: the leader's ManifestSeq it
// mirrors, the leader's segments at that seq (by the leader's id) and the
// state they read, nil when the model does not know it (the leader's live
// file held writes whose split from its sealed data is unknown).
type mirror struct {
	seq  uint64
	segs map[uint64]segstore.SegmentInfo
	st   kv
}

// keptChanges is a ChangesSince answer a FollowSkip kept unapplied, with
// the state the leader's sealed segments read when it was taken.
type keptChanges struct {
	ch   segstore.Changes
	want mirror
}

// follower is a third store, on a vfs.Mem of its own, that mirrors the
// store under test (the leader) through Follow.
type follower struct {
	mem  *vfs.Mem
	s    *segstore.Store
	m    mirror
	kept *keptChanges

	// A power loss armed for the Follow in progress, taken by the sync
	// hook (which background work may call on its own goroutines).
	mu    sync.Mutex
	armed bool
	mode  vfs.CrashMode
	k     int
	seen  int
	rand  uint64
	img   *vfs.Mem
}

func (r *runner) followerHook(mem *vfs.Mem) func(vfs.SyncEvent) {
	fl := &r.fl
	return func(vfs.SyncEvent) {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		if !fl.armed {
			return
		}
		fl.seen++
		if fl.seen < fl.k {
			return
		}
		fl.armed = false
		fl.img = mem.CrashClone(fl.mode, newRand(fl.rand, 3))
	}
}

// disarmFollower ends an armed follower power loss and returns its image,
// nil if it did not fire.
func (r *runner) disarmFollower() *vfs.Mem {
	fl := &r.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	img := fl.img
	fl.armed, fl.img = false, nil
	return img
}

func (r *runner) openFollower() error {
	r.fl.mem.SetSyncHook(r.followerHook(r.fl.mem))
	s, err := segstore.Open(followerDir, r.c.Options(r.fl.mem))
	if err != nil {
		return err
	}
	r.fl.s = s
	return nil
}

// leaderLost reports whether the store under test lost power during the
// current op: an image was taken, to be opened after the op. Changes the
// leader reported after that instant belong to a history the image does
// not have (the power loss came first); a follower must not see them.
func (r *runner) leaderLost() bool {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.imgTaken
}

// leaderSealed is the state of the leader's sealed segments by the model,
// nil when the split of its state is unknown.
func (r *runner) leaderSealed() kv {
	if !r.m.liveKnown {
		return nil
	}
	return r.m.sealed
}

// openLeader is Follow's open: the leader's Export of the segment.
func (r *runner) openLeader(in segstore.SegmentInfo) (io.ReadCloser, error) {
	r.stats.FollowFetched++
	var buf bytes.Buffer
	if _, err := r.s.Export(r.ctx, in.ID, &buf); err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
}

// applyChanges is the mirror ch leads to from m (the listing only; the
// state is the caller's).
func applyChanges(m mirror, ch segstore.Changes) mirror {
	out := mirror{seq: ch.Seq, segs: map[uint64]segstore.SegmentInfo{}}
	if ch.Complete {
		maps.Copy(out.segs, m.segs)
		for _, id := range ch.Removed {
			delete(out.segs, id)
		}
	}
	for _, in := range ch.Added {
		out.segs[in.ID] = in
	}
	return out
}

func (r *runner) followOp(op Op) *Failure {
	if r.fl.s == nil {
		r.fl.mem = vfs.NewMem()
		if err := r.openFollower(); err != nil {
			return r.fail(ClassOpError, "Open of the follower: %v", err)
		}
		r.fl.m = mirror{st: kv{}, segs: map[uint64]segstore.SegmentInfo{}}
	}
	if got := r.fl.s.FollowedSeq(); got != r.fl.m.seq {
		return r.fail(ClassFollow, "follower FollowedSeq %d, want %d", got, r.fl.m.seq)
	}
	if op.Sealed {
		if err := r.s.Seal(); err != nil {
			return r.fail(ClassOpError, "Seal: %v", err)
		}
		r.m.seal()
		r.end()
	}
	switch op.Follow {
	case FollowDiverge:
		if f := r.diverge(op); f != nil {
			return f
		}
	case FollowSkip:
		ch := r.s.ChangesSince(r.fl.s.FollowedSeq())
		if r.leaderLost() {
			r.stats.FollowSkipped++
			return nil
		}
		want := applyChanges(r.fl.m, ch)
		want.st = r.leaderSealed()
		r.fl.kept = &keptChanges{ch: ch, want: want}
		return nil
	case FollowStale:
		if f := r.applyKept(op); f != nil {
			return f
		}
	}
	return r.followNow(op)
}

// followPatience bounds how long follow keeps retrying while the leader's
// merges retire segments under it. It is a time, not a count: how many
// steps a burst of merges takes, and how many retries fit in it, depends
// on how busy the machine is (100 quick retries all lost to one burst on
// a loaded machine). A merge policy that never settled would still fail.
const followPatience = 60 * time.Second

// follow runs one sync: ChangesSince(FollowedSeq), then Follow, again
// while a leader merge retires a segment in between (ErrNoSegment), with
// a short pause after the first few retries so the merges can finish. It
// returns the Changes applied, or skipped when the leader lost power
// before ChangesSince answered (nothing was applied).
func (r *runner) follow() (ch segstore.Changes, skipped bool, f *Failure) {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		ch = r.s.ChangesSince(r.fl.s.FollowedSeq())
		if r.leaderLost() {
			r.stats.FollowSkipped++
			return ch, true, nil
		}
		err := r.fl.s.Follow(r.ctx, ch, r.openLeader)
		if err == nil {
			r.stats.Follows++
			return ch, false, nil
		}
		if !errors.Is(err, segstore.ErrNoSegment) || time.Since(start) > followPatience {
			return ch, false, r.fail(ClassOpError, "follower Follow(ChangesSince(%d) = seq %d, %d added, %d removed, complete %v) after %d attempts in %v: %v",
				ch.Since, ch.Seq, len(ch.Added), len(ch.Removed), ch.Complete, attempt+1, time.Since(start).Round(time.Millisecond), err)
		}
		r.stats.FollowRetries++
		if attempt >= 10 {
			time.Sleep(time.Millisecond)
		}
	}
}

// followNow syncs the follower with the leader and checks it: exactly the
// model's state of the leader's sealed segments when the model knows it.
// FollowCrash takes a power loss of the follower during the Follow (or
// after it), reopens it and requires the mirror before or after, whole,
// then syncs again.
func (r *runner) followNow(op Op) *Failure {
	want := r.leaderSealed()
	if r.sab == sabotageFollowOld && r.fl.m.st != nil && want != nil && !maps.Equal(r.fl.m.st, want) {
		r.sab = sabotageNone
		want = r.fl.m.st
	}
	old := r.fl.m
	crash := op.Follow == FollowCrash
	if crash {
		r.fl.mu.Lock()
		r.fl.armed, r.fl.mode, r.fl.k, r.fl.seen, r.fl.rand, r.fl.img = true, op.Mode, op.K, 0, op.Rand, nil
		r.fl.mu.Unlock()
	}
	ch, skipped, f := r.follow()
	img := r.disarmFollower()
	if f != nil {
		return f
	}
	if skipped {
		return nil
	}
	next := applyChanges(old, ch)
	next.st = want
	if ch.Seq == old.seq && old.seq != 0 {
		next = old // nothing to do: the same state
		if next.st == nil {
			next.st = want
		}
	}
	if crash {
		mid := img != nil
		if !mid {
			img = r.fl.mem.CrashClone(op.Mode, newRand(op.Rand, 3))
		}
		if f := r.followerCrash(img, op.Mode, mid, old, next); f != nil {
			return f
		}
		// Sync again from where the follower came back to.
		if ch, skipped, f = r.follow(); f != nil || skipped {
			return f
		}
		next = applyChanges(r.fl.m, ch)
		next.st = want
		if ch.Seq == r.fl.m.seq && ch.Seq != 0 {
			next = r.fl.m
			if next.st == nil {
				next.st = want
			}
		}
	}
	r.fl.m = next
	return r.checkFollower(ClassFollow, fmt.Sprintf("follower after Follow to leader seq %d", ch.Seq), op.Rand)
}

// checkFollower compares the follower with its mirror: FollowedSeq, the
// listing (the leader's ids, orders, digests and sizes), and, when the
// model knows it, everything it reads (a scan, a backward walk, a Get of
// every key and some absent ones, and bounded iterators moved both ways).
func (r *runner) checkFollower(class, when string, rnd uint64) *Failure {
	fs, m := r.fl.s, r.fl.m
	if got := fs.FollowedSeq(); got != m.seq {
		return r.fail(class, "%s: FollowedSeq %d, want %d", when, got, m.seq)
	}
	segs := fs.Segments()
	seen := map[uint64]bool{}
	for _, sg := range segs {
		in, ok := m.segs[sg.Origin]
		switch {
		case sg.Origin == 0:
			return r.fail(class, "%s: segment %d is the follower's own (Origin 0)", when, sg.ID)
		case !ok || seen[sg.Origin]:
			return r.fail(class, "%s: segment %d mirrors leader segment %d, which the leader's changes do not hold (or twice)", when, sg.ID, sg.Origin)
		case in.Order != sg.Order || in.Digest != sg.Digest || in.Size != sg.Size:
			return r.fail(class, "%s: segment %d mirrors leader segment %d with order %d, digest %x, size %d; the leader's is order %d, digest %x, size %d",
				when, sg.ID, sg.Origin, sg.Order, sg.Digest, sg.Size, in.Order, in.Digest, in.Size)
		}
		seen[sg.Origin] = true
	}
	if len(seen) != len(m.segs) {
		return r.fail(class, "%s: the follower lists %d segments, the leader's changes %d", when, len(seen), len(m.segs))
	}
	if m.st == nil {
		return nil
	}
	r.stats.FollowsExact++
	if f := r.storeCompare(fs, class, m.st, when); f != nil {
		return f
	}
	return r.boundedIters(fs, class, m.st, when, rnd)
}

// boundedIters opens a few iterators with bounds drawn from rnd on s and
// moves each through every movement, compared with want.
func (r *runner) boundedIters(s *segstore.Store, class string, want kv, when string, rnd uint64) *Failure {
	g := &gen{c: r.c, r: newRand(rnd, 5)}
	for i := 0; i < 3; i++ {
		lo, hi := g.bound(), g.bound()
		if lo != nil && hi != nil && string(lo) > string(hi) {
			lo, hi = hi, lo
		}
		var prefix []byte
		if g.r.IntN(4) == 0 {
			prefix = []byte([...]string{"k", "k00", "k001", "k01"}[g.r.IntN(4)])
		}
		it, err := s.NewIterator(&segstore.IterOptions{LowerBound: lo, UpperBound: hi, Prefix: prefix})
		if err != nil {
			return r.fail(ClassOpError, "%s: NewIterator: %v", when, err)
		}
		sl := &iterSlot{it: it, src: -1, m: newIterModel(want, lo, hi, prefix)}
		moves := []Op{{Move: MoveFirst}}
		for j := 0; j <= len(sl.m.keys); j++ {
			moves = append(moves, Op{Move: MoveNext})
		}
		moves = append(moves, Op{Move: MoveLast})
		for j := 0; j <= len(sl.m.keys); j++ {
			moves = append(moves, Op{Move: MovePrev})
		}
		for j := 0; j < 4; j++ {
			moves = append(moves, Op{Move: MoveSeek, Key: g.key()}, Op{Move: MoveNext}, Op{Move: MoveSeekLT, Key: g.key()}, Op{Move: MovePrev})
		}
		for _, mv := range moves {
			mv.Kind = OpIterMove
			if f := r.iterMove(class, sl, mv); f != nil {
				it.Close()
				f.Msg = fmt.Sprintf("%s: iterator (lower %s, upper %s, prefix %s): %s", when, q(lo), q(hi), q(prefix), f.Msg)
				return f
			}
		}
		if err := it.Close(); err != nil {
			return r.fail(ClassOpError, "%s: iterator Close: %v", when, err)
		}
	}
	return nil
}

// followerCrash abandons the follower for img, a power loss taken during a
// Follow from old to next (or after it), reopens it and checks that it is
// one of the two mirrors, whole.
func (r *runner) followerCrash(img *vfs.Mem, mode vfs.CrashMode, mid bool, old, next mirror) *Failure {
	r.fl.mem.SetSyncHook(nil)
	if err := r.fl.s.Close(); err != nil {
		return r.fail(ClassClose, "Close of the follower a crash image was taken from: %v", err)
	}
	r.fl.s = nil
	r.fl.mem = img
	if err := r.openFollower(); err != nil {
		return r.fail(ClassFollowCrash, "Open of the follower after a power loss (%v) during a Follow: %v", mode, err)
	}
	r.stats.FollowCrashes[mode]++
	if mid {
		r.stats.FollowCrashMid++
	}
	got := r.fl.s.FollowedSeq()
	switch {
	case got == next.seq:
		r.fl.m = next
	case got == old.seq:
		r.fl.m = old
		r.stats.FollowCrashOld++
	default:
		return r.fail(ClassFollowCrash, "after a power loss (%v) during a Follow from leader seq %d to %d the follower mirrors seq %d", mode, old.seq, next.seq, got)
	}
	when := fmt.Sprintf("follower after a power loss (%v, %s) during a Follow from leader seq %d to %d", mode, map[bool]string{true: "mid-Follow", false: "after it"}[mid], old.seq, next.seq)
	if f := r.checkFollower(ClassFollowCrash, when, r.c.Seed); f != nil {
		return f
	}
	if err := r.fl.s.Check(); err != nil {
		return r.fail(ClassFollowCrash, "%s: Check: %v", when, err)
	}
	return nil
}

// diverge writes to the follower (and seals, K odd): a Follow must then
// refuse with ErrDiverged and change nothing. ReplaceAll(nil) empties the
// follower and resets FollowedSeq to 0, from which followNow then syncs it
// from scratch.
func (r *runner) diverge(op Op) *Failure {
	fs := r.fl.s
	before := fs.FollowedSeq()
	if err := fs.Put(op.Key, op.Val); err != nil {
		return r.fail(ClassOpError, "follower Put: %v", err)
	}
	var local kv
	if r.fl.m.st != nil {
		local = maps.Clone(r.fl.m.st)
		local[string(op.Key)] = string(op.Val)
	}
	if op.K%2 == 1 {
		if err := fs.Seal(); err != nil {
			return r.fail(ClassOpError, "follower Seal: %v", err)
		}
	}
	ch := r.s.ChangesSince(before)
	err := fs.Follow(r.ctx, ch, r.openLeader)
	if !errors.Is(err, segstore.ErrDiverged) {
		return r.fail(ClassFollowRule, "Follow of a follower holding a write of its own (sealed %v): %v, want ErrDiverged", op.K%2 == 1, err)
	}
	r.stats.Diverged++
	if got := fs.FollowedSeq(); got != before {
		return r.fail(ClassFollowRule, "a Follow refused with ErrDiverged moved FollowedSeq from %d to %d", before, got)
	}
	if local != nil {
		if f := r.storeCompare(fs, ClassFollowRule, local, "follower after a Follow refused with ErrDiverged"); f != nil {
			return f
		}
	} else {
		v, err := fs.Get(op.Key)
		if f := r.checkGetClass(ClassFollowRule, "follower after a Follow refused with ErrDiverged: Get", kv{string(op.Key): string(op.Val)}, op.Key, v, err); f != nil {
			return f
		}
	}
	out, err := fs.ReplaceAll(r.ctx, nil)
	if err != nil {
		return r.fail(ClassOpError, "follower ReplaceAll(nil): %v", err)
	}
	if len(out) != 0 || len(fs.Segments()) != 0 {
		return r.fail(ClassReplace, "follower ReplaceAll(nil) left %d segments (listed %d)", len(fs.Segments()), len(out))
	}
	if got := fs.FollowedSeq(); got != 0 {
		return r.fail(ClassReplace, "follower FollowedSeq %d after ReplaceAll(nil), want 0", got)
	}
	r.fl.m = mirror{st: kv{}, segs: map[uint64]segstore.SegmentInfo{}}
	return r.storeCompare(fs, ClassReplace, kv{}, "follower after ReplaceAll(nil)")
}

// applyKept applies the Changes a FollowSkip kept: refused with
// ErrFollowGap (nothing changed) unless they start where the follower
// stands, are a full listing, or describe the state it mirrors; else the
// follower mirrors the leader as it was when they were taken.
func (r *runner) applyKept(op Op) *Failure {
	k := r.fl.kept
	if k == nil {
		return nil
	}
	r.fl.kept = nil
	fs := r.fl.s
	cur := r.fl.m
	noop := k.ch.Seq == cur.seq && cur.seq != 0
	gap := k.ch.Complete && k.ch.Since != cur.seq && !noop
	err := fs.Follow(r.ctx, k.ch, r.openLeader)
	switch {
	case gap:
		if !errors.Is(err, segstore.ErrFollowGap) {
			return r.fail(ClassFollowRule, "Follow of kept changes since %d (to seq %d) on a follower at %d: %v, want ErrFollowGap", k.ch.Since, k.ch.Seq, cur.seq, err)
		}
		r.stats.Gaps++
		return r.checkFollower(ClassFollowRule, "follower after a Follow refused with ErrFollowGap", op.Rand)
	case errors.Is(err, segstore.ErrNoSegment):
		// The leader retired a segment of the kept state since: nothing
		// changed.
		r.stats.FollowRetries++
		return r.checkFollower(ClassFollowRule, "follower after a Follow of kept changes failed with ErrNoSegment", op.Rand)
	case err != nil:
		return r.fail(ClassOpError, "Follow of kept changes since %d (to seq %d, complete %v) on a follower at %d: %v", k.ch.Since, k.ch.Seq, k.ch.Complete, cur.seq, err)
	}
	r.stats.Follows++
	if noop {
		if cur.st == nil {
			r.fl.m.st = k.want.st
		}
	} else {
		r.stats.StaleApplied++
		r.fl.m = applyChanges(cur, k.ch)
		r.fl.m.st = k.want.st
	}
	return r.checkFollower(ClassFollow, fmt.Sprintf("follower after a Follow of kept changes to leader seq %d", k.ch.Seq), op.Rand)
}

// replaceOp writes Batch to the peer unsealed, takes a sealed snapshot of
// the peer (which seals it), exports every segment it lists and replaces
// the whole state of the store under test with them.
func (r *runner) replaceOp(op Op) *Failure {
	if len(op.Batch) > 0 {
		b := r.peer.NewBatch()
		if err := fillBatch(b, op.Batch); err != nil {
			return r.fail(ClassOpError, "peer batch: %v", err)
		}
		if err := r.peer.Apply(b); err != nil {
			return r.fail(ClassOpError, "peer Apply: %v", err)
		}
		replay(r.peerState, op.Batch)
	}
	sn, err := r.peer.NewSealedSnapshot()
	if err != nil {
		return r.fail(ClassOpError, "peer NewSealedSnapshot: %v", err)
	}
	defer sn.Close()
	infos := sn.Segments()
	rs := make([]segstore.ReplaceSegment, 0, len(infos))
	for _, in := range infos {
		var buf bytes.Buffer
		n, err := sn.Export(r.ctx, in.ID, &buf)
		if err != nil {
			return r.fail(ClassOpError, "peer snapshot Export(%d): %v", in.ID, err)
		}
		if n != in.Size || xxhash.Sum64(buf.Bytes()) != in.Digest {
			return r.fail(ClassExport, "peer snapshot segment %d: exported %d bytes of digest %x, listed as %d bytes of digest %x",
				in.ID, n, xxhash.Sum64(buf.Bytes()), in.Size, in.Digest)
		}
		rs = append(rs, segstore.ReplaceSegment{Digest: in.Digest, Size: in.Size, Data: bytes.NewReader(buf.Bytes())})
	}
	if err := sn.Close(); err != nil {
		return r.fail(ClassOpError, "peer snapshot Close: %v", err)
	}
	want := maps.Clone(r.peerState)
	r.begin()
	out, err := r.s.ReplaceAll(r.ctx, rs)
	if err != nil {
		return r.fail(ClassOpError, "ReplaceAll of %d segments: %v", len(rs), err)
	}
	r.m.replace(want)
	r.end()
	r.stats.Replaces++
	r.stats.ReplaceSegs += len(out)
	if len(out) > len(rs) {
		return r.fail(ClassReplace, "ReplaceAll of %d segments lists %d", len(rs), len(out))
	}
	for i, in := range out {
		if in.Origin != 0 || (i > 0 && in.Order <= out[i-1].Order) {
			return r.fail(ClassReplace, "ReplaceAll lists segment %d with origin %d, order %d (after order %d)", in.ID, in.Origin, in.Order, out[max(i-1, 0)].Order)
		}
	}
	if got := r.s.FollowedSeq(); got != 0 {
		return r.fail(ClassReplace, "FollowedSeq %d after ReplaceAll, want 0", got)
	}
	return nil
}
