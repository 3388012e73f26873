package metamorphic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// The invariant a failure broke.
const (
	ClassOpError     = "op-error"     // a valid operation returned an error
	ClassRead        = "read"         // Get, a snapshot's Get, an iterator or a scan disagreed with the model
	ClassCrashState  = "crash-state"  // after a power loss the store is no prefix of history in the allowed range
	ClassCrashOpen   = "crash-open"   // Open refused the image of a power loss
	ClassReopen      = "reopen"       // after a clean Close and Open the store is not the state before
	ClassImportCount = "import-count" // Import adopted another number of segments than the model
	ClassExport      = "export"       // an exported stream does not match its SegmentInfo
	ClassCheck       = "check"        // Store.Check failed
	ClassClose       = "close"        // Close of a healthy store failed
	ClassReadOnly    = "read-only"    // a read-only Open showed another state than the writable Open after it
	ClassClosed      = "closed"       // a snapshot or iterator left open across Close did not answer ErrClosed
	ClassSeq         = "manifest-seq" // ManifestSeq went backwards without a crash
	ClassSegments    = "segments"     // Segments() lists duplicate ids or orders out of order
	ClassFollow      = "follow"       // after a Follow the follower does not read the leader's sealed state, or FollowedSeq is wrong
	ClassFollowCrash = "follow-crash" // after a power loss during a Follow the follower is neither the mirror before nor the one after
	ClassFollowRule  = "follow-rule"  // Follow did not answer ErrDiverged or ErrFollowGap where it must, or changed something when it did
	ClassReplace     = "replace-all"  // ReplaceAll returned a wrong listing, or left FollowedSeq set
)

// Failure is the first broken invariant of a run.
type Failure struct {
	Op    int    `json:"op"` // index of the op in the trace
	Class string `json:"class"`
	Msg   string `json:"msg"`
}

func (f *Failure) Error() string {
	return fmt.Sprintf("op %d: %s: %s", f.Op, f.Class, f.Msg)
}

// Stats counts what a run did.
type Stats struct {
	Ops           [numKinds]int
	Crashes       [6]int // power losses opened and checked, by vfs.CrashMode
	ArmedFired    int    // armed crashes that fired at a barrier
	ArmedExpired  int    // armed crashes whose window passed with no barrier
	CrashInFlight int    // power losses taken while a change was in flight
	CrashBack     int    // power losses that came back to a state before the newest acknowledged one
	Reads         int    // read results compared (Get, snapshot Get, iterator positions, scan keys)
	ImportedSegs  int    // segments adopted by imports
	ImplicitSeals int    // seals the executor added before an import whose layering was unknown
	Peer          int    // peer segments made

	Follows        int    // Follow calls that succeeded
	FollowsExact   int    // ... after which the follower was compared with the model in full
	FollowFetched  int    // segments the follower fetched (Import count of its Metrics)
	FollowRetries  int    // Follows retried after ErrNoSegment (a leader merge retired a segment)
	FollowSkipped  int    // Follows left out because the store under test lost power before ChangesSince
	FollowCrashes  [6]int // follower power losses checked, by vfs.CrashMode
	FollowCrashMid int    // ... of them taken during the Follow (not after it)
	FollowCrashOld int    // ... of them that came back to the mirror before the Follow
	Diverged       int    // Follows refused with ErrDiverged
	Gaps           int    // kept Changes refused with ErrFollowGap
	StaleApplied   int    // kept Changes applied (an older state of the leader)
	Replaces       int    // ReplaceAll calls that succeeded
	ReplaceSegs    int    // segments they installed
}

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	for i := range s.Ops {
		s.Ops[i] += o.Ops[i]
	}
	for i := range s.Crashes {
		s.Crashes[i] += o.Crashes[i]
	}
	s.ArmedFired += o.ArmedFired
	s.ArmedExpired += o.ArmedExpired
	s.CrashInFlight += o.CrashInFlight
	s.CrashBack += o.CrashBack
	s.Reads += o.Reads
	s.ImportedSegs += o.ImportedSegs
	s.ImplicitSeals += o.ImplicitSeals
	s.Peer += o.Peer
	s.Follows += o.Follows
	s.FollowsExact += o.FollowsExact
	s.FollowFetched += o.FollowFetched
	s.FollowRetries += o.FollowRetries
	s.FollowSkipped += o.FollowSkipped
	for i := range s.FollowCrashes {
		s.FollowCrashes[i] += o.FollowCrashes[i]
	}
	s.FollowCrashMid += o.FollowCrashMid
	s.FollowCrashOld += o.FollowCrashOld
	s.Diverged += o.Diverged
	s.Gaps += o.Gaps
	s.StaleApplied += o.StaleApplied
	s.Replaces += o.Replaces
	s.ReplaceSegs += o.ReplaceSegs
}

// TotalOps is the number of ops executed.
func (s Stats) TotalOps() int {
	n := 0
	for _, c := range s.Ops {
		n += c
	}
	return n
}

// TotalCrashes is the number of power losses checked.
func (s Stats) TotalCrashes() int {
	n := 0
	for _, c := range s.Crashes {
		n += c
	}
	return n
}

const (
	storeDir  = "/db"
	peerDir   = "/peer"
	armWindow = 30 // ops an armed crash waits for its barrier
)

// progress is what a crash image can hold: every state from durable to
// committed, and the next one if a change is in flight.
type progress struct {
	committed int
	durable   int
	inflight  bool
}

type peerSeg struct {
	ops    []BatchOp
	digest uint64
	data   []byte
}

type snapSlot struct {
	sn *segstore.Snapshot
	st kv
}

type iterSlot struct {
	it  *segstore.Iterator
	src int // snapshot slot, or -1
	m   *iterModel
}

// runner executes one trace against a store under test and a peer.
type runner struct {
	c   Config
	ctx context.Context

	mem *vfs.Mem
	s   *segstore.Store

	peerMem *vfs.Mem
	peer    *segstore.Store
	segs    map[int]*peerSeg

	m     *model
	snaps [snapSlots]*snapSlot
	iters [iterSlots]*iterSlot

	// The crash machinery, shared with the sync hook's goroutines.
	pmu      sync.Mutex
	prog     progress
	armed    bool
	armMode  vfs.CrashMode
	armK     int
	armRand  uint64
	armSeen  int
	armLeft  int
	img      *vfs.Mem
	imgAt    progress
	imgTaken bool
	armRO    bool

	lastSeq uint64

	// The follower of the store under test (follow.go), opened at the
	// first OpFollow, and the peer's whole state (for OpReplace).
	fl        follower
	peerState kv

	stats Stats
	opIdx int
	sab   sabotage
}

// Run executes ops under c and returns the first failure (nil if none)
// and what the run did.
func Run(c Config, ops []Op) (*Failure, Stats) {
	return runWith(c, ops, 0)
}

// Sabotage makes the model wrong on purpose, so that the harness's own
// tests can show that a wrong store would fail it.
type sabotage int

const (
	sabotageNone       sabotage = iota
	sabotageLosePut             // the model forgets the first Put
	sabotageAllDurable          // the model takes every write for durable
	sabotageFollowOld           // the model expects the follower to read the state of the Follow before
)

func runWith(c Config, ops []Op, sab sabotage) (*Failure, Stats) {
	r := &runner{c: c, ctx: context.Background(), segs: map[int]*peerSeg{}, m: newModel(c), sab: sab, peerState: kv{}}
	f := r.run(ops)
	r.shutdown()
	return f, r.stats
}

func (r *runner) fail(class, format string, args ...any) *Failure {
	return &Failure{Op: r.opIdx, Class: class, Msg: fmt.Sprintf(format, args...)}
}

func (r *runner) hook(mem *vfs.Mem) func(vfs.SyncEvent) {
	return func(vfs.SyncEvent) {
		r.pmu.Lock()
		defer r.pmu.Unlock()
		if !r.armed {
			return
		}
		r.armSeen++
		if r.armSeen < r.armK {
			return
		}
		r.armed = false
		// Under pmu: the executor cannot acknowledge another change until
		// the image is taken, so imgAt bounds what it may hold.
		r.img = mem.CrashClone(r.armMode, newRand(r.armRand, 3))
		r.imgAt = r.prog
		r.imgTaken = true
	}
}

func (r *runner) begin() {
	r.pmu.Lock()
	r.prog.inflight = true
	r.pmu.Unlock()
}

func (r *runner) end() {
	r.pmu.Lock()
	r.prog = progress{committed: r.m.last(), durable: r.m.durable}
	r.pmu.Unlock()
}

func (r *runner) open() error {
	r.mem.SetSyncHook(r.hook(r.mem))
	s, err := segstore.Open(storeDir, r.c.Options(r.mem))
	if err != nil {
		return err
	}
	r.s = s
	return nil
}

func (r *runner) run(ops []Op) *Failure {
	r.mem = vfs.NewMem()
	r.opIdx = -1
	if err := r.open(); err != nil {
		return r.fail(ClassOpError, "Open: %v", err)
	}
	r.peerMem = vfs.NewMem()
	peer, err := segstore.Open(peerDir, PeerOptions(r.peerMem))
	if err != nil {
		return r.fail(ClassOpError, "Open of the peer: %v", err)
	}
	r.peer = peer
	r.end()
	for i, op := range ops {
		r.opIdx = i
		r.stats.Ops[op.Kind]++
		if f := r.step(op); f != nil {
			return f
		}
		if f := r.afterStep(); f != nil {
			return f
		}
	}
	r.opIdx = len(ops)
	// The end: every acknowledged state must read back, after a reopen too.
	if f := r.fullCompare(r.m.cur().st, "at the end"); f != nil {
		return f
	}
	if f := r.reopen(); f != nil {
		return f
	}
	// A follower, if the trace made one, catches up once more, exactly.
	if r.fl.s != nil {
		return r.followOp(Op{Kind: OpFollow, Sealed: true, Rand: r.c.Seed})
	}
	return nil
}

// afterStep turns a crash image taken during the step into a crash.
func (r *runner) afterStep() *Failure {
	r.pmu.Lock()
	taken, img, at := r.imgTaken, r.img, r.imgAt
	r.imgTaken, r.img = false, nil
	if r.armed {
		r.armLeft--
		if r.armLeft <= 0 {
			r.armed = false
			r.stats.ArmedExpired++
		}
	}
	r.pmu.Unlock()
	if taken {
		r.stats.ArmedFired++
		if f := r.crash(img, at, r.armMode, r.armRO); f != nil {
			return f
		}
	}
	if seq := r.s.ManifestSeq(); seq < r.lastSeq {
		return r.fail(ClassSeq, "ManifestSeq %d after %d", seq, r.lastSeq)
	} else {
		r.lastSeq = seq
	}
	// No image taken so far can go back before the durable state
	// published now; later ones start from it.
	r.pmu.Lock()
	d := r.prog.durable
	r.pmu.Unlock()
	r.m.trim(d)
	return nil
}

func (r *runner) shutdown() {
	r.closeReaders()
	if r.s != nil {
		r.mem.SetSyncHook(nil)
		_ = r.s.Close()
		r.s = nil
	}
	if r.peer != nil {
		_ = r.peer.Close()
		r.peer = nil
	}
	if r.fl.s != nil {
		r.fl.mem.SetSyncHook(nil)
		_ = r.fl.s.Close()
		r.fl.s = nil
	}
}

func (r *runner) closeReaders() {
	for i, it := range r.iters {
		if it != nil {
			_ = it.it.Close()
			r.iters[i] = nil
		}
	}
	for i, sn := range r.snaps {
		if sn != nil {
			_ = sn.sn.Close()
			r.snaps[i] = nil
		}
	}
}

func (r *runner) writeOp(ops []BatchOp, do func() error) *Failure {
	seals := r.s.Metrics().Seals
	r.begin()
	if err := do(); err != nil {
		return r.fail(ClassOpError, "%v", err)
	}
	r.m.write(ops)
	if r.m.liveKnown && r.s.Metrics().Seals != seals {
		// Not an automatic seal (liveKnown says the live file is far from
		// SegmentSize): a range drop sealed the live file with this write.
		r.m.sealedNow()
	}
	if r.sab == sabotageAllDurable {
		r.m.setDurable()
	}
	r.end()
	return nil
}

func (r *runner) step(op Op) *Failure {
	s := r.s
	switch op.Kind {
	case OpPut:
		if r.sab == sabotageLosePut {
			r.sab = sabotageNone
			return r.writeOp(nil, func() error { return s.Put(op.Key, op.Val) })
		}
		return r.writeOp([]BatchOp{{Kind: OpPut, Key: op.Key, Val: op.Val}}, func() error { return s.Put(op.Key, op.Val) })
	case OpDelete:
		return r.writeOp([]BatchOp{{Kind: OpDelete, Key: op.Key}}, func() error { return s.Delete(op.Key) })
	case OpDeleteRange:
		return r.writeOp([]BatchOp{{Kind: OpDeleteRange, Key: op.Key, End: op.End}}, func() error { return s.DeleteRange(op.Key, op.End) })
	case OpApply:
		return r.writeOp(op.Batch, func() error {
			b := s.NewBatch()
			if err := fillBatch(b, op.Batch); err != nil {
				return err
			}
			return s.Apply(b)
		})
	case OpGet:
		v, err := s.Get(op.Key)
		return r.checkGet("Get", r.m.cur().st, op.Key, v, err)
	case OpSnapOpen:
		if old := r.snaps[op.Slot]; old != nil {
			r.closeSnap(op.Slot)
		}
		var sn *segstore.Snapshot
		var err error
		if op.Sealed {
			sn, err = s.NewSealedSnapshot()
			if err == nil {
				r.m.seal()
				r.end()
			}
		} else {
			sn, err = s.NewSnapshot()
		}
		if err != nil {
			return r.fail(ClassOpError, "%v", err)
		}
		r.snaps[op.Slot] = &snapSlot{sn: sn, st: r.m.cur().st}
	case OpSnapGet:
		sl := r.snaps[op.Slot]
		if sl == nil {
			return nil
		}
		v, err := sl.sn.Get(op.Key)
		return r.checkGet(fmt.Sprintf("snap%d.Get", op.Slot), sl.st, op.Key, v, err)
	case OpSnapClose:
		if r.snaps[op.Slot] == nil {
			return nil
		}
		if err := r.closeSnap(op.Slot); err != nil {
			return r.fail(ClassOpError, "snapshot Close: %v", err)
		}
	case OpIterOpen:
		if old := r.iters[op.Slot]; old != nil {
			_ = old.it.Close()
			r.iters[op.Slot] = nil
		}
		opts := &segstore.IterOptions{LowerBound: op.Lower, UpperBound: op.Upper, Prefix: op.Prefix}
		var it *segstore.Iterator
		var err error
		st := r.m.cur().st
		if op.Snap >= 0 {
			sl := r.snaps[op.Snap]
			if sl == nil {
				return nil
			}
			it, err = sl.sn.NewIterator(opts)
			st = sl.st
		} else {
			it, err = s.NewIterator(opts)
		}
		if err != nil {
			return r.fail(ClassOpError, "NewIterator: %v", err)
		}
		r.iters[op.Slot] = &iterSlot{it: it, src: op.Snap, m: newIterModel(st, op.Lower, op.Upper, op.Prefix)}
	case OpIterMove:
		sl := r.iters[op.Slot]
		if sl == nil {
			return nil
		}
		return r.iterMove(ClassRead, sl, op)
	case OpIterClose:
		sl := r.iters[op.Slot]
		if sl == nil {
			return nil
		}
		r.iters[op.Slot] = nil
		if err := sl.it.Close(); err != nil {
			return r.fail(ClassOpError, "iterator Close: %v", err)
		}
	case OpScan:
		return r.scan(op.key(), op.end())
	case OpSeal:
		if err := s.Seal(); err != nil {
			return r.fail(ClassOpError, "Seal: %v", err)
		}
		r.m.seal()
		r.end()
	case OpSync:
		if err := s.Sync(); err != nil {
			return r.fail(ClassOpError, "Sync: %v", err)
		}
		r.m.setDurable()
		r.end()
	case OpCompact:
		if err := s.Compact(r.ctx); err != nil {
			return r.fail(ClassOpError, "Compact: %v", err)
		}
	case OpCheck:
		if err := s.Check(); err != nil {
			return r.fail(ClassCheck, "%v", err)
		}
		rep, err := s.Verify(r.ctx)
		if err != nil || len(rep.Damaged) > 0 {
			return r.fail(ClassCheck, "Verify: %v, damaged %v", err, rep.Damaged)
		}
		return r.checkSegments()
	case OpReopen:
		return r.reopenOp(op)
	case OpCrash:
		r.pmu.Lock()
		at := r.prog
		img := r.mem.CrashClone(op.Mode, newRand(op.Rand, 3))
		r.pmu.Unlock()
		return r.crash(img, at, op.Mode, op.ReadOnly)
	case OpCrashArm:
		r.pmu.Lock()
		if !r.armed {
			r.armed, r.armMode, r.armK, r.armRand, r.armSeen, r.armLeft, r.armRO = true, op.Mode, op.K, op.Rand, 0, armWindow, op.ReadOnly
		}
		r.pmu.Unlock()
	case OpPeerSegment:
		return r.peerSegment(op)
	case OpImport:
		return r.importOp(op)
	case OpExport:
		return r.export(op)
	case OpFollow:
		return r.followOp(op)
	case OpReplace:
		return r.replaceOp(op)
	default:
		return r.fail(ClassOpError, "unknown op kind %d", op.Kind)
	}
	return nil
}

func fillBatch(b *segstore.Batch, ops []BatchOp) error {
	for _, o := range ops {
		var err error
		switch o.Kind {
		case OpPut:
			err = b.Put(o.Key, o.Val)
		case OpDelete:
			err = b.Delete(o.Key)
		case OpDeleteRange:
			err = b.DeleteRange(o.Key, o.End)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) closeSnap(slot int) error {
	for i, it := range r.iters {
		if it != nil && it.src == slot {
			_ = it.it.Close()
			r.iters[i] = nil
		}
	}
	err := r.snaps[slot].sn.Close()
	r.snaps[slot] = nil
	return err
}

func (r *runner) checkGet(what string, st kv, key, v []byte, err error) *Failure {
	return r.checkGetClass(ClassRead, what, st, key, v, err)
}

func (r *runner) checkGetClass(class, what string, st kv, key, v []byte, err error) *Failure {
	r.stats.Reads++
	want, ok := st[string(key)]
	switch {
	case !ok && errors.Is(err, segstore.ErrNotFound):
		return nil
	case err != nil && !errors.Is(err, segstore.ErrNotFound):
		return r.fail(ClassOpError, "%s(%q): %v", what, key, err)
	case !ok:
		return r.fail(class, "%s(%q) = %s, want not found", what, key, qv(v))
	case err != nil:
		return r.fail(class, "%s(%q): not found, want %s", what, key, qv([]byte(want)))
	case string(v) != want:
		return r.fail(class, "%s(%q) = %s, want %s", what, key, qv(v), qv([]byte(want)))
	}
	return nil
}

func (r *runner) iterMove(class string, sl *iterSlot, op Op) *Failure {
	it := sl.it
	var ok bool
	switch op.Move {
	case MoveFirst:
		ok = it.First()
	case MoveLast:
		ok = it.Last()
	case MoveSeek:
		ok = it.Seek(op.key())
	case MoveSeekLT:
		ok = it.SeekLT(op.key())
	case MoveNext:
		ok = it.Next()
	case MovePrev:
		ok = it.Prev()
	}
	m := sl.m
	m.move(op.Move, op.key())
	r.stats.Reads++
	if err := it.Err(); err != nil {
		return r.fail(ClassOpError, "iterator: %v", err)
	}
	if ok != m.valid || ok != it.Valid() {
		want := "exhausted"
		if m.valid {
			want = fmt.Sprintf("at %q", m.keys[m.pos])
		}
		got := "exhausted"
		if ok {
			got = fmt.Sprintf("at %q", it.Key())
		}
		return r.fail(class, "iterator %s: %s (Valid %v), want %s", op.Move, got, it.Valid(), want)
	}
	if !ok {
		return nil
	}
	k := m.keys[m.pos]
	if string(it.Key()) != k {
		return r.fail(class, "iterator %s: at %q, want %q", op.Move, it.Key(), k)
	}
	v, err := it.Value()
	if err != nil {
		return r.fail(ClassOpError, "iterator Value at %q: %v", k, err)
	}
	if string(v) != m.st[k] {
		return r.fail(class, "iterator value at %q = %s, want %s", k, qv(v), qv([]byte(m.st[k])))
	}
	return nil
}

func (r *runner) scan(lo, hi []byte) *Failure {
	var err error
	got := kv{}
	var order []string
	for k, v := range r.s.Range(lo, hi, &err) {
		got[string(k)] = string(v)
		order = append(order, string(k))
	}
	if err != nil {
		return r.fail(ClassOpError, "Range: %v", err)
	}
	want := kv{}
	for k, v := range r.m.cur().st {
		if inBounds(k, lo, hi, nil) {
			want[k] = v
		}
	}
	r.stats.Reads += len(want) + 1
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			return r.fail(ClassRead, "Range(%s, %s) out of order: %q then %q", q(lo), q(hi), order[i-1], order[i])
		}
	}
	if !maps.Equal(got, want) {
		return r.fail(ClassRead, "Range(%s, %s):%s", q(lo), q(hi), diff(got, want))
	}
	return nil
}

// readAll returns the store's state by a forward scan, checking that the
// keys come in order.
func readAll(s *segstore.Store) (kv, error) {
	var err error
	got := kv{}
	prev := ""
	first := true
	for k, v := range s.All(&err) {
		if !first && string(k) <= prev {
			return nil, fmt.Errorf("scan out of order: %q then %q", prev, k)
		}
		first = false
		prev = string(k)
		got[prev] = string(v)
	}
	return got, err
}

// fullCompare reads the whole store (a scan, a backward walk and a Get of
// every key) and compares with want.
func (r *runner) fullCompare(want kv, when string) *Failure {
	return r.storeCompare(r.s, ClassRead, want, when)
}

func (r *runner) pointCompare(want kv, when string) *Failure {
	return r.storePointCompare(r.s, ClassRead, want, when)
}

// storeCompare is fullCompare of store s, failing with class.
func (r *runner) storeCompare(s *segstore.Store, class string, want kv, when string) *Failure {
	got, err := readAll(s)
	if err != nil {
		return r.fail(ClassOpError, "%s: scan: %v", when, err)
	}
	if !maps.Equal(got, want) {
		return r.fail(class, "%s: scan:%s", when, diff(got, want))
	}
	return r.storePointCompare(s, class, want, when)
}

func (r *runner) storePointCompare(s *segstore.Store, class string, want kv, when string) *Failure {
	keys := sortedKeys(want)
	for i := 0; i < r.c.Keys; i += 3 {
		keys = append(keys, fmt.Sprintf("k%04d", i)) // absent ones too
	}
	for _, k := range keys {
		v, err := s.Get([]byte(k))
		if f := r.checkGetClass(class, "Get "+when, want, []byte(k), v, err); f != nil {
			return f
		}
	}
	// Backward.
	it, err := s.NewIterator(nil)
	if err != nil {
		return r.fail(ClassOpError, "%s: NewIterator: %v", when, err)
	}
	defer it.Close()
	sorted := sortedKeys(want)
	i := len(sorted) - 1
	for ok := it.Last(); ok; ok = it.Prev() {
		if i < 0 || string(it.Key()) != sorted[i] {
			exp := "the start"
			if i >= 0 {
				exp = fmt.Sprintf("%q", sorted[i])
			}
			return r.fail(class, "%s: backward walk at %q, want %s", when, it.Key(), exp)
		}
		i--
	}
	if err := it.Err(); err != nil {
		return r.fail(ClassOpError, "%s: backward walk: %v", when, err)
	}
	if i >= 0 {
		return r.fail(class, "%s: backward walk ended before %q", when, sorted[i])
	}
	return nil
}

func (r *runner) reopen() *Failure { return r.reopenOp(Op{Kind: OpReopen}) }

func (r *runner) reopenOp(op Op) *Failure {
	if !op.Leave {
		r.closeReaders()
	}
	if err := r.s.Close(); err != nil {
		return r.fail(ClassClose, "Close: %v", err)
	}
	r.s = nil
	if f := r.checkClosedReaders(); f != nil {
		return f
	}
	r.m.afterReopen()
	r.end()
	if op.ReadOnly {
		got, err := r.readOnly()
		if err != nil {
			return r.fail(ClassReopen, "read-only Open after a clean Close: %v", err)
		}
		if !maps.Equal(got, r.m.cur().st) {
			return r.fail(ClassReadOnly, "read-only Open after a clean Close:%s", diff(got, r.m.cur().st))
		}
	}
	if err := r.open(); err != nil {
		return r.fail(ClassReopen, "Open after a clean Close: %v", err)
	}
	return r.fullCompare(r.m.cur().st, "after a clean reopen")
}

// readOnly opens the store read-only, reads it whole and closes it.
func (r *runner) readOnly() (kv, error) {
	opts := r.c.Options(r.mem)
	opts.ReadOnly = true
	s, err := segstore.Open(storeDir, opts)
	if err != nil {
		return nil, err
	}
	got, err := readAll(s)
	if err == nil {
		if werr := s.Put([]byte("x"), nil); !errors.Is(werr, segstore.ErrReadOnly) {
			err = fmt.Errorf("read-only store: Put returned %v, want ErrReadOnly", werr)
		}
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return got, err
}

// checkClosedReaders checks that the snapshots and iterators left open
// across Close answer ErrClosed, and closes them.
func (r *runner) checkClosedReaders() *Failure {
	defer r.closeReaders()
	for i, sl := range r.iters {
		if sl == nil {
			continue
		}
		if sl.it.First() || !errors.Is(sl.it.Err(), segstore.ErrClosed) {
			return r.fail(ClassClosed, "iter%d after Store.Close: First %v, Err %v, want ErrClosed", i, sl.it.Valid(), sl.it.Err())
		}
	}
	for i, sl := range r.snaps {
		if sl == nil {
			continue
		}
		if _, err := sl.sn.Get([]byte("k0000")); !errors.Is(err, segstore.ErrClosed) {
			return r.fail(ClassClosed, "snap%d.Get after Store.Close: %v, want ErrClosed", i, err)
		}
	}
	return nil
}

// checkSegments checks the listing: distinct ids, ascending orders.
func (r *runner) checkSegments() *Failure {
	segs := r.s.Segments()
	ids := map[uint64]bool{}
	for i, sg := range segs {
		if ids[sg.ID] {
			return r.fail(ClassSegments, "segment id %d listed twice", sg.ID)
		}
		ids[sg.ID] = true
		if i > 0 && sg.Order <= segs[i-1].Order {
			return r.fail(ClassSegments, "segment %d (order %d) listed after segment %d (order %d)", sg.ID, sg.Order, segs[i-1].ID, segs[i-1].Order)
		}
	}
	return nil
}

// crash abandons the store for img, a power loss taken when at was the
// progress, reopens and checks that the store is one state of history in
// at's range.
func (r *runner) crash(img *vfs.Mem, at progress, mode vfs.CrashMode, ro bool) *Failure {
	r.closeReaders()
	r.pmu.Lock()
	r.armed, r.imgTaken, r.img = false, false, nil // this crash supersedes an armed one
	r.pmu.Unlock()
	r.mem.SetSyncHook(nil)
	// The old store is healthy (an image is a copy): it must close.
	if err := r.s.Close(); err != nil {
		return r.fail(ClassClose, "Close of the store a crash image was taken from: %v", err)
	}
	r.s = nil
	r.lastSeq = 0
	r.mem = img
	var roState kv
	if ro {
		var err error
		if roState, err = r.readOnly(); err != nil {
			return r.fail(ClassCrashOpen, "read-only Open after a power loss (%v): %v", mode, err)
		}
	}
	if err := r.open(); err != nil {
		return r.fail(ClassCrashOpen, "Open after a power loss (%v): %v", mode, err)
	}
	r.stats.Crashes[mode]++
	if at.inflight {
		r.stats.CrashInFlight++
	}
	got, err := readAll(r.s)
	if err != nil {
		return r.fail(ClassOpError, "scan after a power loss (%v): %v", mode, err)
	}
	if ro && !maps.Equal(roState, got) {
		return r.fail(ClassReadOnly, "after a power loss (%v) the read-only Open showed another state than the writable Open after it:%s", mode, diff(roState, got))
	}
	hi := at.committed
	if at.inflight {
		hi++
	}
	lo := max(at.durable, r.m.base)
	match := -1
	for i := min(hi, r.m.last()); i >= lo; i-- {
		e, _ := r.m.at(i)
		if maps.Equal(e.st, got) {
			match = i
			break
		}
	}
	if match < 0 {
		var b bytes.Buffer
		fmt.Fprintf(&b, "after a power loss (%v) taken with states %d..%d possible (durable %d, acknowledged %d, in flight %v), the store matches none of them",
			mode, lo, hi, at.durable, at.committed, at.inflight)
		if e, ok := r.m.at(min(hi, r.m.last())); ok {
			fmt.Fprintf(&b, "; against the newest:%s", diff(got, e.st))
		}
		if e, ok := r.m.at(lo); ok && lo != hi {
			fmt.Fprintf(&b, "; against the oldest:%s", diff(got, e.st))
		}
		return r.fail(ClassCrashState, "%s", b.String())
	}
	if match < at.committed {
		r.stats.CrashBack++
	}
	r.m.rollback(match, lo, hi)
	r.end()
	if f := r.pointCompare(r.m.cur().st, fmt.Sprintf("after a power loss (%v)", mode)); f != nil {
		return f
	}
	if err := r.s.Check(); err != nil {
		return r.fail(ClassCheck, "after a power loss (%v): %v", mode, err)
	}
	return nil
}

func (r *runner) peerSegment(op Op) *Failure {
	before := r.peer.Segments()
	b := r.peer.NewBatch()
	if err := fillBatch(b, op.Batch); err != nil {
		return r.fail(ClassOpError, "peer batch: %v", err)
	}
	if err := r.peer.Apply(b); err != nil {
		return r.fail(ClassOpError, "peer Apply: %v", err)
	}
	replay(r.peerState, op.Batch)
	if err := r.peer.Seal(); err != nil {
		return r.fail(ClassOpError, "peer Seal: %v", err)
	}
	after := r.peer.Segments()
	if len(after) == 0 {
		return nil
	}
	newest := after[len(after)-1]
	for _, s := range before {
		if s.ID == newest.ID {
			return nil // nothing sealed
		}
	}
	var buf bytes.Buffer
	n, err := r.peer.Export(r.ctx, newest.ID, &buf)
	if err != nil {
		return r.fail(ClassOpError, "peer Export: %v", err)
	}
	if n != newest.Size || xxhash.Sum64(buf.Bytes()) != newest.Digest {
		return r.fail(ClassExport, "peer segment %d: exported %d bytes of digest %x, listed as %d bytes of digest %x",
			newest.ID, n, xxhash.Sum64(buf.Bytes()), newest.Size, newest.Digest)
	}
	r.segs[op.Slot] = &peerSeg{ops: op.Batch, digest: newest.Digest, data: buf.Bytes()}
	r.stats.Peer++
	return nil
}

func (r *runner) importOp(op Op) *Failure {
	var segs []*peerSeg
	var streams []io.Reader
	for _, id := range op.Peer {
		if s := r.segs[id]; s != nil {
			segs = append(segs, s)
			streams = append(streams, bytes.NewReader(s.data))
		}
	}
	if len(segs) == 0 {
		return nil
	}
	if !r.m.liveKnown {
		// Which writes an automatic seal (or a crash's recovery) sealed is
		// unknown, and with it what the import shadows: seal first.
		if err := r.s.Seal(); err != nil {
			return r.fail(ClassOpError, "Seal before Import: %v", err)
		}
		r.m.seal()
		r.end()
		r.stats.ImplicitSeals++
	}
	present := map[uint64]bool{}
	for _, sg := range r.s.Segments() {
		present[sg.Digest] = true
	}
	r.begin()
	infos, err := r.s.Import(r.ctx, streams...)
	if err != nil {
		return r.fail(ClassOpError, "Import: %v", err)
	}
	added := map[uint64]bool{}
	for _, in := range infos {
		added[in.Digest] = true
	}
	want, merr := r.m.importSegs(segs, added, present)
	r.end()
	r.stats.ImportedSegs += len(infos)
	if merr != nil {
		return r.fail(ClassImportCount, "%v", merr)
	}
	if len(infos) != want {
		return r.fail(ClassImportCount, "Import of %d streams adopted %d segments, want %d (a stream already adopted must change nothing)",
			len(segs), len(infos), want)
	}
	return nil
}

func (r *runner) export(op Op) *Failure {
	segs := r.s.Segments()
	if len(segs) == 0 {
		return nil
	}
	info := segs[op.K%len(segs)]
	var buf bytes.Buffer
	n, err := r.s.Export(r.ctx, info.ID, &buf)
	if errors.Is(err, segstore.ErrNoSegment) {
		return nil // a merge retired it meanwhile
	}
	if err != nil {
		return r.fail(ClassOpError, "Export(%d): %v", info.ID, err)
	}
	if n != info.Size || int64(buf.Len()) != n || xxhash.Sum64(buf.Bytes()) != info.Digest {
		return r.fail(ClassExport, "segment %d: exported %d bytes (returned %d) of digest %x, listed as %d bytes of digest %x",
			info.ID, buf.Len(), n, xxhash.Sum64(buf.Bytes()), info.Size, info.Digest)
	}
	return nil
}
