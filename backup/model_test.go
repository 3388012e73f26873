package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/segstore"
)

// This file checks the promise docs/BACKUP.md and the design brief make
// ("Between stores"): a backup at any recorded commit restores a state the
// store actually held. Every manifest commit must name a set of segments
// that, read alone, is such a state, since that set is all a backup sees.
//
// The tests keep a history: the store's whole read state after every
// operation, with the ManifestSeq around it and whether the live file was
// empty. A restore of a recorded seq S is then checked against it:
//
//   - precisely, when some observation saw S as the current seq with an
//     empty live file: the sealed segments of commit S then held the whole
//     state the store showed, and the restore must equal it (commits that
//     are not observed, background merges, do not change what the sealed
//     segments read as);
//   - otherwise, against the states of the window in which commit S fell:
//     from the last observation before it whose live file was empty (its
//     sealed segments then held exactly that state) to the first
//     observation at or after S. A state from outside the window, or one
//     that is nowhere in the history, is a wrong restore.
//
// Issue 28 item 3 found two ways the engine breaks this, both because a
// commit changes the sealed segment list while writes that the change
// relies on, or that shadow it, are still only in the live file:
//
//   - a range drop (SyncAlways: DeleteRange drops the sealed segments its
//     tombstone covers at once) commits the removal while the tombstone is
//     still in the live file: the segments left read as a state the store
//     never held (TestIssue28RangeDropRestore);
//   - an Import commits the imported segments beneath unsealed writes that
//     shadow them: the segments alone read the imported values the store
//     never showed (TestIssue28ImportBeneathLiveRestore).
//
// Both reproductions, and TestBackupModel whenever its workload hits either
// trigger, fail on an engine that does not keep the invariant (checked
// against main as of 246837a, before the fix: every default run of
// TestBackupModel failed, each wrong restore in the window of a trigger).
// Since the engine keeps it (a range drop seals the tombstone in the
// commit that drops; an import seals the live file in its commit, above
// the imported segments) they pass: they are the regression tests of that
// fix, and TestBackupModel is the net for any other commit that breaks it
// (a wrong restore with no trigger in its window is reported as NOT
// EXPLAINED).

// histEntry is one observation of the source store, after an operation.
type histEntry struct {
	op           string            // the operation just done
	seqLo, seqHi uint64            // ManifestSeq before and after reading the state
	liveEmpty    bool              // the live file held no record (see liveTracker)
	state        map[string]string // every key and value the store showed
}

// liveTracker knows whether the live file holds records, from what the
// test did: a write adds some, and a seal (Seal, or one an operation makes
// itself, as a range drop or an import may: the store's Seals counter
// moves) leaves the live file empty. Nothing else seals: the tests keep
// live files far below SegmentSize and the 1 MiB a Close seals at, and
// give the backup loop no SealEvery. (Metrics.LiveBytes cannot tell: an
// empty live file's header is not of one size.)
type liveTracker struct {
	empty                    bool
	sealsBefore, dropsBefore int64
	wasEmpty                 bool
}

// before is called before an operation on s.
func (lt *liveTracker) before(s *segstore.Store) {
	m := s.Metrics()
	lt.sealsBefore, lt.dropsBefore, lt.wasEmpty = m.Seals, m.RangeDropped, lt.empty
}

// after is called after it; wrote says whether it wrote records. It
// returns what the operation did that matters here, to add to its name in
// the history: whether it sealed the live file, and whether it dropped
// segments under a range tombstone.
func (lt *liveTracker) after(s *segstore.Store, wrote bool) string {
	m := s.Metrics()
	var notes string
	if d := m.RangeDropped - lt.dropsBefore; d > 0 {
		notes += fmt.Sprintf(" (dropped %d segments)", d)
	}
	switch {
	case m.Seals > lt.sealsBefore:
		lt.empty = true // the seal came after the op's own writes
		notes += " (sealed the live file)"
	case wrote:
		lt.empty = false
	}
	if !wrote && !lt.wasEmpty && m.Seals == lt.sealsBefore {
		notes += " (live file not empty)"
	}
	return notes
}

// knownTrigger says whether the operation named op (with the notes after
// added) is one of issue 28 item 3's two triggers: a range drop committed
// without sealing the tombstone, or an import beneath unsealed writes
// without sealing them.
func knownTrigger(op string) bool {
	if strings.Contains(op, "(sealed the live file)") {
		return false
	}
	return strings.Contains(op, " segments)") && strings.Contains(op, "(dropped ") ||
		strings.HasPrefix(op, "import ") && strings.Contains(op, "(live file not empty)")
}

// readAll returns every key and value the store shows now.
func readAll(s *segstore.Store) (map[string]string, error) {
	out := map[string]string{}
	var err error
	for k, v := range s.All(&err) {
		out[string(k)] = string(v)
	}
	return out, err
}

// observe records the store's state after op. Only background merges (and
// interval syncs) can run while it reads, and they change no content, so
// the state holds over the whole [seqLo, seqHi] span.
func observe(s *segstore.Store, op string, liveEmpty bool) (histEntry, error) {
	e := histEntry{op: op, seqLo: s.ManifestSeq(), liveEmpty: liveEmpty}
	st, err := readAll(s)
	if err != nil {
		return e, fmt.Errorf("read after %s: %w", op, err)
	}
	e.state, e.seqHi = st, s.ManifestSeq()
	return e, nil
}

// expectation says what a restore of seq may hold: exactly want when the
// seq's state was observed, else one of the states of hist[lo..hi].
type expectation struct {
	exact  bool
	want   map[string]string
	at     int // the observation that gives want
	lo, hi int
}

// expect derives the expectation for a restore of seq from hist.
func expect(hist []histEntry, seq uint64) expectation {
	for i := len(hist) - 1; i >= 0; i-- {
		h := hist[i]
		if h.liveEmpty && h.seqLo <= seq && seq <= h.seqHi {
			return expectation{exact: true, want: h.state, at: i}
		}
	}
	ex := expectation{lo: 0, hi: len(hist) - 1}
	for i, h := range hist {
		if h.liveEmpty && h.seqHi < seq {
			ex.lo = i
		}
	}
	for i, h := range hist {
		if h.seqHi >= seq {
			ex.hi = i
			break
		}
	}
	return ex
}

// checkRestore compares got, the restore of seq, with the history; it
// returns a description of the mismatch, or "", and whether an operation
// of the window in which the commit fell is one of issue 28 item 3's
// triggers (knownTrigger), which would explain it.
func checkRestore(hist []histEntry, seq uint64, got map[string]string) (string, bool) {
	ex := expect(hist, seq)
	if ex.exact {
		if maps.Equal(got, ex.want) {
			return "", false
		}
		return fmt.Sprintf("restore of seq %d holds %s; the store held %s at that commit (observation %d, after %s, live file empty)%s",
			seq, fmtState(got), fmtState(ex.want), ex.at, hist[ex.at].op, whereElse(hist, got)), false
	}
	known := false
	for i := ex.lo; i <= ex.hi; i++ {
		if maps.Equal(got, hist[i].state) {
			return "", false
		}
		known = known || i > ex.lo && knownTrigger(hist[i].op)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "restore of seq %d holds %s, no state the store held around that commit; observations %d..%d:", seq, fmtState(got), ex.lo, ex.hi)
	for i := ex.lo; i <= ex.hi; i++ {
		h := hist[i]
		fmt.Fprintf(&b, "\n\t%d: after %s (seq %d..%d, live empty %v): %s", i, h.op, h.seqLo, h.seqHi, h.liveEmpty, fmtState(h.state))
	}
	b.WriteString(whereElse(hist, got))
	return b.String(), known
}

// whereElse says whether a state appears anywhere in the history.
func whereElse(hist []histEntry, got map[string]string) string {
	for i, h := range hist {
		if maps.Equal(got, h.state) {
			return fmt.Sprintf(" (it is the state after observation %d, %s, seq %d..%d)", i, h.op, h.seqLo, h.seqHi)
		}
	}
	return " (a state the store never held)"
}

func fmtState(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q:%q", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

// restoreState restores seq from b into a fresh directory and returns what
// the restored store holds.
func restoreState(t testing.TB, b bucket.Bucket, seq uint64) (map[string]string, RestoreResult) {
	t.Helper()
	got, res, err := tryRestore(t, b, seq)
	if err != nil {
		t.Fatalf("restore seq %d: %v", seq, err)
	}
	return got, res
}

// tryRestore is restoreState returning Restore's error.
func tryRestore(t testing.TB, b bucket.Bucket, seq uint64) (map[string]string, RestoreResult, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "r")
	res, err := Restore(context.Background(), b, dir, &RestoreOptions{Seq: seq})
	if err != nil {
		return nil, res, err
	}
	s, err := segstore.Open(dir, &segstore.Options{Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		t.Fatalf("open restore of seq %d: %v", seq, err)
	}
	defer s.Close()
	got, err := readAll(s)
	if err != nil {
		t.Fatalf("read restore of seq %d: %v", seq, err)
	}
	return got, res, nil
}

// recorder collects the seqs a loop records (its "edit" events), from
// whichever goroutine runs the loop.
type recorder struct {
	mu   sync.Mutex
	seqs []uint64
}

func (r *recorder) progress(ev Event) {
	if ev.Kind == "edit" {
		r.mu.Lock()
		r.seqs = append(r.seqs, ev.Seq)
		r.mu.Unlock()
	}
}

func (r *recorder) recorded() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs)
}

// reproStore is a source store on the OS file system, SyncAlways, merges
// off, with its history.
type reproStore struct {
	t    *testing.T
	s    *segstore.Store
	lt   liveTracker
	hist []histEntry
}

func newReproStore(t *testing.T) *reproStore {
	s, err := segstore.Open(t.TempDir(), &segstore.Options{Sync: segstore.SyncAlways, Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := &reproStore{t: t, s: s, lt: liveTracker{empty: true}}
	r.note("open", false, nil)
	return r
}

// do runs one operation (wrote: it writes records) and notes the state.
func (r *reproStore) do(op string, wrote bool, f func() error) {
	r.t.Helper()
	r.lt.before(r.s)
	r.note(op, wrote, f())
}

func (r *reproStore) note(op string, wrote bool, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", op, err)
	}
	op += r.lt.after(r.s, wrote)
	h, err := observe(r.s, op, r.lt.empty)
	if err != nil {
		r.t.Fatal(err)
	}
	r.hist = append(r.hist, h)
}

// backupAndCheck backs the store up with one Loop.Once and restores every
// recorded seq, reporting each wrong restore.
func (r *reproStore) backupAndCheck() {
	t := r.t
	b, err := bucket.NewLocal(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	if err := NewLoop(StoreSource(r.s), b, &Options{Progress: rec.progress}).Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	seqs := rec.recorded()
	if len(seqs) == 0 {
		t.Fatal("the backup recorded nothing")
	}
	for _, seq := range seqs {
		got, res := restoreState(t, b, seq)
		if res.Seq != seq {
			t.Errorf("restore of seq %d restored seq %d", seq, res.Seq)
		}
		if msg, known := checkRestore(r.hist, seq, got); msg != "" {
			t.Errorf("issue 28 item 3 (known trigger in the window: %v): %s", known, msg)
		}
	}
}

// TestIssue28RangeDropRestore is issue 28 item 3, first trigger (SyncAlways,
// merges off). It FAILS on an engine that commits the drop of a's segment
// while the tombstone (and c) are only in the live file: the backup then
// records the sealed list {b}, a state the store never held (its history
// is {}, {a}, {a,b}, {a,b,c}, {b,c}). It passes once the drop's commit
// seals the tombstone too (the restore is {b,c}).
func TestIssue28RangeDropRestore(t *testing.T) {
	r := newReproStore(t)
	s := r.s
	put := func(k string) func() error { return func() error { return s.Put([]byte(k), []byte("1")) } }
	r.do("put a", true, put("a"))
	r.do("seal", false, s.Seal)
	r.do("put b", true, put("b"))
	r.do("seal", false, s.Seal)
	r.do("put c", true, put("c"))
	before := s.Metrics().RangeDropped
	r.do("delete range [a, a\\x00)", true, func() error { return s.DeleteRange([]byte("a"), []byte("a\x00")) })
	if s.Metrics().RangeDropped == before {
		// The trigger needs the immediate drop (SyncAlways); without it
		// this test proves nothing.
		t.Fatal("DeleteRange dropped no segment: the reproduction no longer reproduces its trigger")
	}
	r.backupAndCheck()
}

// TestIssue28ImportBeneathLiveRestore is issue 28 item 3, second trigger.
// It FAILS on an engine whose Import commits the imported segment (k=0)
// beneath the unsealed k=1: the backup records the sealed list alone,
// which reads k=0, a value the store never showed. It passes once the
// import's commit seals the live file above the imported segments.
func TestIssue28ImportBeneathLiveRestore(t *testing.T) {
	peer, err := segstore.Open(t.TempDir(), &segstore.Options{Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if err := peer.Put([]byte("k"), []byte("0")); err != nil {
		t.Fatal(err)
	}
	if err := peer.Seal(); err != nil {
		t.Fatal(err)
	}
	segs := peer.Segments()
	var stream bytes.Buffer
	if _, err := peer.Export(context.Background(), segs[len(segs)-1].ID, &stream); err != nil {
		t.Fatal(err)
	}

	r := newReproStore(t)
	r.do("put k=1", true, func() error { return r.s.Put([]byte("k"), []byte("1")) })
	r.do("import [k=0]", false, func() error {
		_, err := r.s.Import(context.Background(), &stream)
		return err
	})
	if got := r.hist[len(r.hist)-1].state["k"]; got != "1" {
		t.Fatalf("after the import the store reads k=%q; the live file's k=1 must shadow the import", got)
	}
	r.backupAndCheck()
}

// ---- the randomized model test ----

// modelOp is one write, as the model applies it.
type modelOp struct {
	kind     byte // 'p' put, 'd' delete, 'r' range delete [key, end)
	key, val string
	end      string
}

func applyOps(m map[string]string, ops []modelOp) {
	for _, o := range ops {
		switch o.kind {
		case 'p':
			m[o.key] = o.val
		case 'd':
			delete(m, o.key)
		case 'r':
			for k := range m {
				if o.key <= k && k < o.end {
					delete(m, k)
				}
			}
		}
	}
}

// model is what the store must show: its sealed segments (imports go
// above them) and the writes still in the live file (above everything).
type model struct {
	sealed map[string]string
	live   []modelOp
}

func (m *model) full() map[string]string {
	out := maps.Clone(m.sealed)
	applyOps(out, m.live)
	return out
}

// modelConfig is one randomized option set.
type modelConfig struct {
	sync       segstore.SyncMode
	merges     bool
	disableMap bool
	running    bool // back up with a running Loop.Run, not Once calls
	ops        int
}

func (c modelConfig) String() string {
	return fmt.Sprintf("sync=%v merges=%v mmap=%v loop=%s ops=%d", c.sync, c.merges, !c.disableMap,
		map[bool]string{true: "Run", false: "Once"}[c.running], c.ops)
}

// modelRun is one seeded run: a source store, a peer whose segments it
// imports, a backup loop, the model and the history.
type modelRun struct {
	t      testing.TB
	rng    *rand.Rand
	cfg    modelConfig
	dir    string
	opts   *segstore.Options
	s      *segstore.Store
	peer   *segstore.Store
	b      bucket.Bucket
	rec    *recorder
	loop   *Loop
	cancel context.CancelFunc
	done   chan error
	m      model
	lt     liveTracker
	hist   []histEntry
	trace  []string
	nval   int
	// rotations counts manifest log rotations (checkpoints) of the source.
	rotations int
	rotMu     sync.Mutex
}

const modelKeys = 24

func (r *modelRun) key(i int) string { return fmt.Sprintf("k%02d", i) }

func (r *modelRun) randKey() string { return r.key(r.rng.IntN(modelKeys)) }

func (r *modelRun) val(prefix string) string {
	r.nval++
	return prefix + strconv.Itoa(r.nval)
}

// randRange returns a random [start, end) over the key space.
func (r *modelRun) randRange() (string, string) {
	i := r.rng.IntN(modelKeys)
	j := i + 1 + r.rng.IntN(4)
	if j >= modelKeys {
		return r.key(i), "l" // past every key
	}
	return r.key(i), r.key(j)
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), r.traceText())
}

func (r *modelRun) traceText() string {
	tr := r.trace
	if len(tr) > 200 {
		tr = append([]string{fmt.Sprintf("... (%d earlier operations)", len(r.trace)-200)}, tr[len(tr)-200:]...)
	}
	return "trace:\n\t" + strings.Join(tr, "\n\t")
}

func (r *modelRun) open() {
	s, err := segstore.Open(r.dir, r.opts)
	if err != nil {
		r.fail("open: %v", err)
	}
	r.s = s
}

// note checks the store against the model after op (wrote: it wrote
// records; r.lt.before was called before it) and appends the observation
// to the history.
func (r *modelRun) note(op string, wrote bool) {
	r.t.Helper()
	op += r.lt.after(r.s, wrote)
	h, err := observe(r.s, op, r.lt.empty)
	if err != nil {
		r.fail("%v", err)
	}
	r.trace = append(r.trace, fmt.Sprintf("%s -> seq %d..%d live empty %v", op, h.seqLo, h.seqHi, h.liveEmpty))
	if want := r.m.full(); !maps.Equal(h.state, want) {
		r.fail("after %s the store shows %s, the model %s", op, fmtState(h.state), fmtState(want))
	}
	if h.liveEmpty {
		// Everything is in sealed segments: an import goes above all of it.
		r.m.sealed, r.m.live = maps.Clone(h.state), nil
	}
	r.hist = append(r.hist, h)
}

func (r *modelRun) must(op string, err error) {
	r.t.Helper()
	if err != nil {
		r.fail("%s: %v", op, err)
	}
}

// startLoop starts backing the current store up: a Loop for Once calls,
// or a running Loop.Run.
func (r *modelRun) startLoop() {
	r.loop = NewLoop(StoreSource(r.s), r.b, &Options{Poll: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Progress: r.rec.progress})
	if !r.cfg.running {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	l := r.loop
	go func() { r.done <- l.Run(ctx) }()
}

// stopLoop stops a running loop (nothing for Once calls).
func (r *modelRun) stopLoop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	if err := <-r.done; !errors.Is(err, context.Canceled) {
		r.fail("backup loop stopped: %v", err)
	}
	r.cancel, r.done = nil, nil
}

// importPeer writes 1-3 segments on the peer and imports them into the
// source, beneath whatever the source's live file holds.
func (r *modelRun) importPeer() {
	n := 1 + r.rng.IntN(3)
	var streams []*bytes.Buffer
	var all []modelOp
	var desc []string
	for range n {
		var ops []modelOp
		for range 1 + r.rng.IntN(4) {
			var o modelOp
			switch x := r.rng.IntN(10); {
			case x < 7:
				o = modelOp{kind: 'p', key: r.randKey(), val: r.val("p")}
				r.must("peer put", r.peer.Put([]byte(o.key), []byte(o.val)))
			case x < 9:
				o = modelOp{kind: 'd', key: r.randKey()}
				r.must("peer delete", r.peer.Delete([]byte(o.key)))
			default:
				a, b := r.randRange()
				o = modelOp{kind: 'r', key: a, end: b}
				r.must("peer delete range", r.peer.DeleteRange([]byte(a), []byte(b)))
			}
			ops = append(ops, o)
		}
		r.must("peer seal", r.peer.Seal())
		segs := r.peer.Segments()
		var buf bytes.Buffer
		if _, err := r.peer.Export(context.Background(), segs[len(segs)-1].ID, &buf); err != nil {
			r.fail("peer export: %v", err)
		}
		streams = append(streams, &buf)
		all = append(all, ops...)
		desc = append(desc, fmtOps(ops))
	}
	readers := make([]io.Reader, len(streams))
	for i, s := range streams {
		readers[i] = s
	}
	r.lt.before(r.s)
	_, err := r.s.Import(context.Background(), readers...)
	op := "import " + strings.Join(desc, " ")
	r.must(op, err)
	applyOps(r.m.sealed, all)
	r.note(op, false)
}

// replaceAll replaces the source's whole state by some of its own sealed
// segments, shuffled (so kept segments take new places in the order, which
// the backup records as removed and added again), and perhaps one fresh
// segment of the peer's. The live file's writes are gone. The model takes
// the store's word for the result (the engine's own tests check
// ReplaceAll); the backup's restores are checked against it as ever.
func (r *modelRun) replaceAll() {
	// From a snapshot: a background merge may retire a segment before
	// ReplaceAll runs, which then reads the stream instead of keeping the
	// local file.
	sn, err := r.s.NewSnapshot()
	if err != nil {
		r.fail("snapshot: %v", err)
	}
	defer sn.Close()
	segs := sn.Segments()
	r.rng.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })
	segs = segs[:r.rng.IntN(len(segs)+1)]
	var rs []segstore.ReplaceSegment
	var desc []string
	for _, sg := range segs {
		var buf bytes.Buffer
		if _, err := sn.Export(context.Background(), sg.ID, &buf); err != nil {
			r.fail("export: %v", err)
		}
		rs = append(rs, segstore.ReplaceSegment{Digest: sg.Digest, Size: sg.Size, Data: &buf})
		desc = append(desc, fmt.Sprintf("segment %d", sg.ID))
	}
	if r.rng.IntN(2) == 0 {
		k, v := r.randKey(), r.val("p")
		r.must("peer put", r.peer.Put([]byte(k), []byte(v)))
		r.must("peer seal", r.peer.Seal())
		ps := r.peer.Segments()
		in := ps[len(ps)-1]
		var buf bytes.Buffer
		if _, err := r.peer.Export(context.Background(), in.ID, &buf); err != nil {
			r.fail("peer export: %v", err)
		}
		rs = append(rs, segstore.ReplaceSegment{Digest: in.Digest, Size: in.Size, Data: &buf})
		desc = append(desc, fmt.Sprintf("peer [%s=%s]", k, v))
	}
	r.lt.before(r.s)
	op := "replace all by [" + strings.Join(desc, ", ") + "]"
	if _, err := r.s.ReplaceAll(context.Background(), rs); err != nil {
		r.fail("%s: %v", op, err)
	}
	st, err := readAll(r.s)
	if err != nil {
		r.fail("read after %s: %v", op, err)
	}
	r.m.sealed, r.m.live = st, nil
	r.lt.empty = true // the commit names a new, empty live file
	r.note(op, false)
}

func fmtOps(ops []modelOp) string {
	var parts []string
	for _, o := range ops {
		switch o.kind {
		case 'p':
			parts = append(parts, o.key+"="+o.val)
		case 'd':
			parts = append(parts, "del "+o.key)
		case 'r':
			parts = append(parts, fmt.Sprintf("delrange [%s,%s)", o.key, o.end))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// step does one random operation.
func (r *modelRun) step() {
	s := r.s
	r.lt.before(s)
	switch x := r.rng.IntN(100); {
	case x < 30:
		k, v := r.randKey(), r.val("v")
		r.must("put", s.Put([]byte(k), []byte(v)))
		r.m.live = append(r.m.live, modelOp{kind: 'p', key: k, val: v})
		r.note("put "+k+"="+v, true)
	case x < 38:
		k := r.randKey()
		r.must("delete", s.Delete([]byte(k)))
		r.m.live = append(r.m.live, modelOp{kind: 'd', key: k})
		r.note("delete "+k, true)
	case x < 44:
		a, b := r.randRange()
		r.must("delete range", s.DeleteRange([]byte(a), []byte(b)))
		r.m.live = append(r.m.live, modelOp{kind: 'r', key: a, end: b})
		r.note(fmt.Sprintf("delete range [%s,%s)", a, b), true)
	case x < 50:
		// A range covering a whole sealed segment: under SyncAlways it
		// drops the segment at once.
		segs := s.Segments()
		if len(segs) == 0 {
			return
		}
		sg := segs[r.rng.IntN(len(segs))]
		a, b := string(sg.MinKey), string(sg.MaxKey)+"\x00"
		r.must("delete range", s.DeleteRange([]byte(a), []byte(b)))
		r.m.live = append(r.m.live, modelOp{kind: 'r', key: a, end: b})
		r.note(fmt.Sprintf("delete range [%s,%s\\x00) covering segment %d", a, sg.MaxKey, sg.ID), true)
	case x < 53:
		// A batch: puts and a range delete, atomically.
		bt := s.NewBatch()
		var ops []modelOp
		for range 1 + r.rng.IntN(3) {
			k, v := r.randKey(), r.val("b")
			r.must("batch put", bt.Put([]byte(k), []byte(v)))
			ops = append(ops, modelOp{kind: 'p', key: k, val: v})
		}
		a, b := r.randRange()
		r.must("batch delete range", bt.DeleteRange([]byte(a), []byte(b)))
		ops = append(ops, modelOp{kind: 'r', key: a, end: b})
		r.must("apply", s.Apply(bt))
		r.m.live = append(r.m.live, ops...)
		r.note("batch "+fmtOps(ops), true)
	case x < 65:
		r.must("seal", s.Seal())
		r.note("seal", false)
	case x < 68:
		r.must("compact", s.Compact(context.Background()))
		r.note("compact", false)
	case x < 74:
		r.importPeer()
	case x < 75:
		r.replaceAll()
	case x < 77:
		// Close and reopen: seqs go on from the manifest.
		r.stopLoop()
		r.must("close", s.Close())
		r.open()
		r.lt.before(r.s) // counters start again at Open
		r.note("reopen", false)
		r.startLoop()
	case x < 79:
		if r.cfg.running {
			return
		}
		// A new loop resumes from the bucket (a restarted process).
		r.startLoop()
		r.trace = append(r.trace, "new loop")
	default:
		if r.cfg.running {
			// The running loop records on its own; give it a moment.
			time.Sleep(time.Millisecond)
			return
		}
		if err := r.loop.Once(context.Background()); err != nil {
			r.fail("backup Once: %v", err)
		}
		r.trace = append(r.trace, fmt.Sprintf("backup Once -> recorded up to seq %d", r.loop.Stats().Seq))
	}
}

// run does the workload, then restores every recorded seq and checks each.
func (r *modelRun) run() {
	t := r.t
	r.dir = t.TempDir()
	r.opts = &segstore.Options{
		Sync:         r.cfg.sync,
		SyncInterval: 2 * time.Millisecond,
		SegmentSize:  1 << 20, // no automatic seal: the model knows every seal
		DisableMmap:  r.cfg.disableMap,
		Merge:        segstore.MergeOptions{Disable: !r.cfg.merges, MinRun: 2},
		Events: segstore.EventListener{ManifestRotated: func(segstore.ManifestRotationInfo) {
			r.rotMu.Lock()
			r.rotations++
			r.rotMu.Unlock()
		}},
	}
	start := time.Now()
	r.m = model{sealed: map[string]string{}}
	r.open()
	defer func() { r.s.Close() }()
	peer, err := segstore.Open(t.TempDir(), &segstore.Options{Sync: segstore.SyncManual, Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		t.Fatal(err)
	}
	r.peer = peer
	defer peer.Close()
	b, err := bucket.NewLocal(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.b, r.rec = b, &recorder{}
	r.lt = liveTracker{empty: true}
	r.lt.before(r.s)
	r.note("open", false)
	r.startLoop()
	for range r.cfg.ops {
		r.step()
	}
	r.stopLoop()
	// A last step records the final state (a new loop, as after a stop).
	r.loop = NewLoop(StoreSource(r.s), r.b, &Options{Progress: r.rec.progress})
	if err := r.loop.Once(context.Background()); err != nil {
		r.fail("final backup Once: %v", err)
	}

	workload := time.Since(start)
	start = time.Now()
	seqs := r.rec.recorded()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var wrong []string
	unexplained, exact := 0, 0
	restored := map[uint64]map[string]string{}
	for _, seq := range seqs {
		got, res := restoreState(t, r.b, seq)
		restored[seq] = got
		if res.Seq != seq {
			wrong = append(wrong, fmt.Sprintf("restore of seq %d restored seq %d", seq, res.Seq))
			unexplained++
			continue
		}
		if expect(r.hist, seq).exact {
			exact++
		}
		if msg, known := checkRestore(r.hist, seq, got); msg != "" {
			if !known {
				unexplained++
				msg = "NOT EXPLAINED by issue 28 item 3's triggers: " + msg
			}
			wrong = append(wrong, msg)
		}
	}
	// A few seqs the backup did not record (commits that changed no
	// segment, or that the loop did not see): the newest recorded state at
	// or before each, or ErrNotRecorded before the first.
	recordedSet := map[uint64]bool{}
	for _, seq := range seqs {
		recordedSet[seq] = true
	}
	// The seqs drawn stop at the latest recorded one: with merges on, a
	// merge may commit after the final Once, and a seq the backup never
	// reached is not recorded (checked below).
	var latest uint64
	if len(seqs) > 0 {
		latest = seqs[len(seqs)-1]
	}
	if _, _, err := tryRestore(t, r.b, latest+1); latest > 0 && !errors.Is(err, ErrNotRecorded) {
		wrong = append(wrong, fmt.Sprintf("restore of seq %d, after the latest recorded one: %v, want ErrNotRecorded", latest+1, err))
		unexplained++
	}
	for range 2 {
		if latest == 0 {
			break
		}
		seq := 1 + r.rng.Uint64N(latest)
		if recordedSet[seq] {
			continue
		}
		var prev uint64
		for _, q := range seqs {
			if q < seq {
				prev = q
			}
		}
		got, res, err := tryRestore(t, r.b, seq)
		switch {
		case prev == 0 && !errors.Is(err, ErrNotRecorded):
			wrong = append(wrong, fmt.Sprintf("restore of seq %d, before the first recorded one: %v, want ErrNotRecorded", seq, err))
			unexplained++
		case prev == 0:
		case err != nil:
			r.fail("restore seq %d: %v", seq, err)
		case res.Seq != prev || !maps.Equal(got, restored[prev]):
			wrong = append(wrong, fmt.Sprintf("restore of unrecorded seq %d restored seq %d holding %s, want seq %d holding %s",
				seq, res.Seq, fmtState(got), prev, fmtState(restored[prev])))
			unexplained++
		}
	}
	r.rotMu.Lock()
	rot := r.rotations
	r.rotMu.Unlock()
	t.Logf("%v: %d observations (%v), %d recorded seqs restored (%v; %d checked exactly, the rest by window), %d wrong (%d not explained by issue 28 item 3), %d manifest rotations",
		r.cfg, len(r.hist), workload.Round(time.Millisecond), len(seqs), time.Since(start).Round(time.Millisecond), exact, len(wrong), unexplained, rot)
	if len(wrong) > 0 {
		r.fail("%d of %d restores wrong, %d of them not explained by issue 28 item 3's triggers (a range drop committed before its tombstone is sealed, an import beneath unsealed writes):\n%s",
			len(wrong), len(seqs), unexplained, strings.Join(wrong, "\n"))
	}
}

// envInt reads a positive integer from the environment, or def.
func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestBackupModel runs seeded random workloads (puts, deletes, range
// deletes, some covering whole sealed segments, batches, seals, merges on
// and off, Compact, imports from a peer beneath unsealed writes, reopens,
// backup steps at random points or a running loop) under every sync mode,
// then restores every seq the backup recorded and compares each with the
// history of the store's states (see expect). On an engine with issue 28
// item 3 it fails in nearly every run; a wrong restore that no trigger
// explains is marked NOT EXPLAINED.
//
// SEGKV_BACKUP_MODEL_RUNS (default 4) and SEGKV_BACKUP_MODEL_OPS (default
// 80) make longer runs (a few thousand ops reach manifest log rotations,
// whose trigger the store does not expose); SEGKV_BACKUP_MODEL_SEED
// replays one run (its seed is printed on failure, and with -v): the
// operations and options repeat exactly, and with Once calls the backup
// too, while a running loop records whichever commits its polls see.
func TestBackupModel(t *testing.T) {
	runs := envInt(t, "SEGKV_BACKUP_MODEL_RUNS", 4)
	ops := envInt(t, "SEGKV_BACKUP_MODEL_OPS", 80)
	var seeds []uint64
	if v := os.Getenv("SEGKV_BACKUP_MODEL_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SEGKV_BACKUP_MODEL_SEED=%q: %v", v, err)
		}
		seeds = []uint64{seed}
	} else {
		base := uint64(time.Now().UnixNano())
		for i := range runs {
			seeds = append(seeds, base+uint64(i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5e9b))
			// Any four consecutive seeds cover each sync mode (SyncAlways
			// is where range drops are immediate) and each pairing of
			// merges and loop kind.
			cfg := modelConfig{
				sync:       []segstore.SyncMode{segstore.SyncAlways, segstore.SyncManual, segstore.SyncInterval}[seed%3],
				merges:     seed%2 == 0,
				running:    seed/2%2 == 0,
				disableMap: rng.IntN(2) == 0,
				ops:        ops,
			}
			t.Logf("seed %d (replay: SEGKV_BACKUP_MODEL_SEED=%d): %v", seed, seed, cfg)
			r := &modelRun{t: &seedT{TB: t, seed: seed}, rng: rng, cfg: cfg}
			r.run()
		})
	}
}

// seedT prefixes every failure with the seed that replays it.
type seedT struct {
	testing.TB
	seed uint64
}

func (s *seedT) Fatalf(format string, args ...any) {
	s.TB.Helper()
	s.TB.Fatalf("seed %d (replay: SEGKV_BACKUP_MODEL_SEED=%d): %s", s.seed, s.seed, fmt.Sprintf(format, args...))
}

func (s *seedT) Errorf(format string, args ...any) {
	s.TB.Helper()
	s.TB.Errorf("seed %d (replay: SEGKV_BACKUP_MODEL_SEED=%d): %s", s.seed, s.seed, fmt.Sprintf(format, args...))
}

// TestCheckRestore checks the checker on the history of issue 28 item 3's
// first reproduction: it must reject the state that never existed and one
// from outside the commit's window, and accept the real ones.
func TestCheckRestore(t *testing.T) {
	st := func(keys ...string) map[string]string {
		m := map[string]string{}
		for _, k := range keys {
			m[k] = "1"
		}
		return m
	}
	hist := []histEntry{
		{op: "open", seqLo: 1, seqHi: 1, liveEmpty: true, state: st()},
		{op: "put a", seqLo: 1, seqHi: 1, state: st("a")},
		{op: "seal (sealed the live file)", seqLo: 2, seqHi: 2, liveEmpty: true, state: st("a")},
		{op: "put b", seqLo: 2, seqHi: 2, state: st("a", "b")},
		{op: "seal (sealed the live file)", seqLo: 3, seqHi: 3, liveEmpty: true, state: st("a", "b")},
		{op: "put c", seqLo: 3, seqHi: 3, state: st("a", "b", "c")},
		{op: "delete range [a, a\\x00) (dropped 1 segments)", seqLo: 4, seqHi: 4, state: st("b", "c")},
	}
	for _, c := range []struct {
		seq   uint64
		got   map[string]string
		ok    bool
		known bool
	}{
		{1, st(), true, false},
		{2, st("a"), true, false},
		{2, st(), false, false},        // exact: seq 2 was seen with an empty live file
		{3, st("a"), false, false},     // the state before the commit
		{4, st("b"), false, true},      // never held; the range drop explains it
		{4, st("a"), false, true},      // held, but before the window
		{4, st("a", "b"), true, false}, // the window's states
		{4, st("a", "b", "c"), true, false},
		{4, st("b", "c"), true, false},
	} {
		msg, known := checkRestore(hist, c.seq, c.got)
		if (msg == "") != c.ok || known != c.known {
			t.Errorf("seq %d, restore %s: ok %v known %v (%s), want ok %v known %v", c.seq, fmtState(c.got), msg == "", known, msg, c.ok, c.known)
		}
	}
	// Without the seal's note an import is a trigger only over a live
	// file that held writes.
	if !knownTrigger("import [k=0] (live file not empty)") || knownTrigger("import [k=0] (sealed the live file)") || knownTrigger("import [k=0]") {
		t.Error("knownTrigger misjudges imports")
	}
}

// TestRestoreBeforeFirstRecorded: a store backed up for the first time
// after it already held data. A restore of a seq before the first
// recorded state is ErrNotRecorded (docs/BACKUP.md: "before the oldest
// kept state"), not the empty state the chain starts from: the store held
// {a} at that seq, and the backup recorded nothing of it.
func TestRestoreBeforeFirstRecorded(t *testing.T) {
	r := newReproStore(t)
	s := r.s
	r.do("put a", true, func() error { return s.Put([]byte("a"), []byte("1")) })
	r.do("seal", false, s.Seal)
	early := s.ManifestSeq()
	r.do("put b", true, func() error { return s.Put([]byte("b"), []byte("1")) })
	r.do("seal", false, s.Seal)
	b, err := bucket.NewLocal(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := NewLoop(StoreSource(s), b, nil).Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, res, err := tryRestore(t, b, early)
	if !errors.Is(err, ErrNotRecorded) {
		t.Fatalf("restore of seq %d, before the first recorded state (%d): restored seq %d holding %s (%v); the store held %s then",
			early, s.ManifestSeq(), res.Seq, fmtState(got), err, fmtState(r.hist[2].state))
	}
	// The first recorded state itself restores.
	if got, _ := restoreState(t, b, s.ManifestSeq()); !maps.Equal(got, r.hist[len(r.hist)-1].state) {
		t.Fatalf("restore of the recorded seq holds %s", fmtState(got))
	}
}
