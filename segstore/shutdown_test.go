package segstore

// Shutdown tests: Close racing every kind of public call. The contract they
// check: every Put, Delete or Apply that returned nil before or during Close
// is readable after a reopen; a call racing Close returns nil or ErrClosed
// (never another error, never a panic); a store closed cleanly always opens
// again; snapshots and iterators used after Close return ErrClosed; nothing
// leaks (goroutines, file descriptors, mappings).
//
// TestShutdownUnderLoad runs shutdownMemRounds (1500) rounds on the
// in-memory file system and 800 on the real one (a tenth under -short);
// SEGKV_SHUTDOWN_ROUNDS=N runs N in memory and N*800/1500 on disk.
// SEGKV_SHUTDOWN_SEED picks the base seed (default 1); a failure names the
// seed of its chain and the round in it.
//
// Three bugs this file found are fixed, and their tests here stay as
// regression tests: TestShutdownVerifyRacingClose (a Verify racing Close
// listed healthy segments as damaged), TestShutdownFreshOpenLeaksFirstLiveFile
// (a fresh Open leaked the first live file's handle) and
// TestShutdownIteratorEdgesAfterClose (unpositioned iterators said nothing
// after Close).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// trackFS counts the files, mappings and locks a store holds through it, so
// that a test can tell that a closed store left none behind, on any file
// system. It also counts files closed twice.
type trackFS struct {
	vfs.FS
	files        atomic.Int64
	maps         atomic.Int64
	locks        atomic.Int64
	doubleCloses atomic.Int64
	// onOpen, if set, runs before every Open (read-only) of a path.
	onOpen atomic.Pointer[func(name string)]
	open   sync.Map // *trackFile -> how it was opened, for the leak report
}

type trackFile struct {
	vfs.File
	fs     *trackFS
	closed atomic.Bool
}

func (f *trackFile) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.fs.files.Add(-1)
		f.fs.open.Delete(f)
	} else {
		f.fs.doubleCloses.Add(1)
	}
	return f.File.Close()
}

// trackMapFile is a trackFile whose inner file offers mappings.
type trackMapFile struct{ *trackFile }

func (f trackMapFile) Map(size int64) ([]byte, func() error, error) {
	return f.count(f.File.(vfs.Mapper).Map(size))
}

// trackSharedMapFile also offers the shared mappings live files use.
type trackSharedMapFile struct{ trackMapFile }

func (f trackSharedMapFile) MapShared(size int64) ([]byte, func() error, error) {
	return f.count(f.File.(vfs.SharedMapper).MapShared(size))
}

// count counts a mapping until its unmap runs.
func (f trackMapFile) count(data []byte, unmap func() error, err error) ([]byte, func() error, error) {
	if err != nil {
		return nil, nil, err
	}
	f.fs.maps.Add(1)
	var once atomic.Bool
	return data, func() error {
		if once.CompareAndSwap(false, true) {
			f.fs.maps.Add(-1)
		}
		return unmap()
	}, nil
}

func (t *trackFS) wrap(how string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	t.files.Add(1)
	tf := &trackFile{File: f, fs: t}
	t.open.Store(tf, how+" "+f.Name())
	if _, ok := f.(vfs.SharedMapper); ok {
		return trackSharedMapFile{trackMapFile{tf}}, nil
	}
	if _, ok := f.(vfs.Mapper); ok {
		return trackMapFile{tf}, nil
	}
	return tf, nil
}

func (t *trackFS) Create(name string) (vfs.File, error) {
	f, err := t.FS.Create(name)
	return t.wrap("create", f, err)
}

func (t *trackFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := t.FS.OpenReadWrite(name)
	return t.wrap("open-rw", f, err)
}

func (t *trackFS) Open(name string) (vfs.File, error) {
	if fn := t.onOpen.Load(); fn != nil {
		(*fn)(name)
	}
	f, err := t.FS.Open(name)
	return t.wrap("open", f, err)
}

type trackLock struct {
	io.Closer
	fs     *trackFS
	closed atomic.Bool
}

func (l *trackLock) Close() error {
	if l.closed.CompareAndSwap(false, true) {
		l.fs.locks.Add(-1)
	}
	return l.Closer.Close()
}

func (t *trackFS) Lock(name string) (io.Closer, error) {
	c, err := t.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	t.locks.Add(1)
	return &trackLock{Closer: c, fs: t}, nil
}

// held describes what is still open through the file system.
func (t *trackFS) held() error {
	f, m, l, d := t.files.Load(), t.maps.Load(), t.locks.Load(), t.doubleCloses.Load()
	if f != 0 || m != 0 || l != 0 || d != 0 {
		var names []string
		t.open.Range(func(_, v any) bool {
			names = append(names, v.(string))
			return true
		})
		slices.Sort(names)
		return fmt.Errorf("after Close: %d files %q, %d mappings, %d locks still held; %d files closed twice", f, names, m, l, d)
	}
	return nil
}

// shutdownMemRounds is the default number of rounds on the in-memory file
// system; SEGKV_SHUTDOWN_ROUNDS replaces it, and scales the other runs in
// proportion.
const shutdownMemRounds = 1500

// shutdownRounds returns how many rounds a run whose default is def runs:
// def, a tenth of it under -short, or def scaled by SEGKV_SHUTDOWN_ROUNDS.
func shutdownRounds(t *testing.T, def int) int {
	if v := os.Getenv("SEGKV_SHUTDOWN_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return max(1, n*def/shutdownMemRounds)
	}
	if testing.Short() {
		return max(1, def/10)
	}
	return def
}

func shutdownSeed(t *testing.T) uint64 {
	if v := os.Getenv("SEGKV_SHUTDOWN_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
		return n
	}
	return 1
}

// importStream is an exported segment and the keys it holds.
type importStream struct {
	data []byte
	keys model
}

// shutdownStreams exports n segments from a scratch store, each holding
// keys of its own ("imp<i>-NNN"), disjoint from the writers' keys.
func shutdownStreams(t *testing.T, n int) []importStream {
	t.Helper()
	src := mustOpen(t, "/src", &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	defer src.Close()
	var out []importStream
	for i := range n {
		m := model{}
		for k := range 24 {
			key := fmt.Sprintf("imp%d-%03d", i, k)
			val := fmt.Sprintf("%s|import|%s", key, strings.Repeat("i", k*37))
			require.NoError(t, src.Put([]byte(key), []byte(val)))
			m[key] = val
		}
		out = append(out, importStream{data: exportNewest(t, src), keys: m})
	}
	return out
}

// shutdownConfig is what one chain of rounds (one directory) runs with.
type shutdownConfig struct {
	opts     Options
	valueMax int
	writers  int
}

func (c shutdownConfig) String() string {
	return fmt.Sprintf("segment=%d sync=%v mmap=%v merge=%+v maxOpen=%d valueMax=%d writers=%d",
		c.opts.SegmentSize, c.opts.Sync, !c.opts.DisableMmap, c.opts.Merge, c.opts.MaxOpenFiles, c.valueMax, c.writers)
}

func newShutdownConfig(rng *rand.Rand, fsys vfs.FS) shutdownConfig {
	c := shutdownConfig{valueMax: 1 << 10, writers: 1 + rng.IntN(3)}
	c.opts = Options{FS: fsys, SegmentSize: []int64{16 << 10, 64 << 10, 64 << 10, 2 << 20}[rng.IntN(4)]}
	if c.opts.SegmentSize > closeSealBytes {
		// Big values, so that the live file passes closeSealBytes and Close
		// seals it itself.
		c.valueMax = 24 << 10
	}
	c.opts.Sync = []SyncMode{SyncAlways, SyncManual, SyncInterval}[rng.IntN(3)]
	c.opts.SyncInterval = time.Duration(1+rng.IntN(5)) * time.Millisecond
	c.opts.DisableMmap = rng.IntN(3) == 0
	if rng.IntN(3) == 0 {
		c.opts.MaxOpenFiles = 2
	}
	c.opts.Merge = MergeOptions{MinRun: 2, SizeRatio: 8}
	if rng.IntN(6) == 0 {
		c.opts.Merge.Disable = true
	}
	return c
}

var shutdownPad = strings.Repeat("x", 64<<10)

// shutdownStats counts what the rounds exercised, to show that the races
// the test is about happen.
type shutdownStats struct {
	rounds, acked, closedErrs, imports, seals, compacts, exports atomic.Int64
	closeSeals, snapsKept, itersKept, crashes                    atomic.Int64
	reopen                                                       atomic.Int64 // nanoseconds in reopen and check
}

func (st *shutdownStats) String() string {
	return fmt.Sprintf("rounds=%d acked=%d ErrClosed=%d imports=%d seals=%d compacts=%d exports=%d closeSeals=%d snapshotsKept=%d iteratorsKept=%d crashesAfterClose=%d reopen+check=%v",
		st.rounds.Load(), st.acked.Load(), st.closedErrs.Load(), st.imports.Load(), st.seals.Load(), st.compacts.Load(),
		st.exports.Load(), st.closeSeals.Load(), st.snapsKept.Load(), st.itersKept.Load(), st.crashes.Load(), time.Duration(st.reopen.Load()).Round(time.Millisecond))
}

// shutdownRound is one store's life from Open (done by the caller) to
// Close, under load.
type shutdownRound struct {
	s       *Store
	cfg     shutdownConfig
	streams []importStream
	stats   *shutdownStats

	closeStarted atomic.Bool
	trigger      chan struct{} // closed when the writers reached the round's target
	target       int64
	acked        atomic.Int64
	stop         chan struct{} // closed once Close returned

	mu       sync.Mutex
	failures []string
	imported []bool // per stream: some Import of it returned nil
}

func (r *shutdownRound) failf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failures) < 20 {
		r.failures = append(r.failures, fmt.Sprintf(format, args...))
	}
}

func (r *shutdownRound) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// ok checks a racing call's error: nil or ErrClosed (ErrClosed only once
// Close has begun). It reports whether the call succeeded.
func (r *shutdownRound) ok(what string, err error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, ErrClosed) {
		r.stats.closedErrs.Add(1)
		if !r.closeStarted.Load() {
			r.failf("%s: %v before Close began", what, err)
		}
		return false
	}
	r.failf("%s: unexpected error racing Close: %v", what, err)
	return false
}

// checkValue checks that a value read for key is one written for key.
func (r *shutdownRound) checkValue(what string, key, v []byte) {
	if !bytes.HasPrefix(v, append(bytes.Clone(key), '|')) {
		r.failf("%s: value of %q is %.40q, not one written for it", what, key, v)
	}
}

func (r *shutdownRound) ack() {
	r.stats.acked.Add(1)
	if r.acked.Add(1) == r.target {
		close(r.trigger)
	}
}

func writerKey(w, k int) string { return fmt.Sprintf("w%d-%03d", w, k) }

// writer owns keys w<w>-NNN: the last acknowledged operation on each decides
// its expected value, which it records in m (deleted keys are removed).
func (r *shutdownRound) writer(w int, rng *rand.Rand, round int, m model) {
	const keys = 40
	for seq := 0; !r.stopped(); seq++ {
		k := writerKey(w, rng.IntN(keys))
		val := func(k string) string {
			return fmt.Sprintf("%s|%d-%d|%s", k, round, seq, shutdownPad[:rng.IntN(r.cfg.valueMax)])
		}
		switch op := rng.IntN(12); {
		case op < 6:
			v := val(k)
			if !r.ok("put", r.s.Put([]byte(k), []byte(v))) {
				return
			}
			m[k] = v
		case op < 8:
			if !r.ok("delete", r.s.Delete([]byte(k))) {
				return
			}
			delete(m, k)
		case op < 10:
			b := r.s.NewBatch()
			ops := map[string]*string{}
			for range 1 + rng.IntN(4) {
				k := writerKey(w, rng.IntN(keys))
				if rng.IntN(4) == 0 {
					if err := b.Delete([]byte(k)); err != nil {
						r.failf("batch delete: %v", err)
						return
					}
					ops[k] = nil
				} else {
					v := val(k)
					if err := b.Put([]byte(k), []byte(v)); err != nil {
						r.failf("batch put: %v", err)
						return
					}
					ops[k] = &v
				}
			}
			if !r.ok("apply", r.s.Apply(b)) {
				return
			}
			for k, v := range ops {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = *v
				}
			}
		default:
			// Read your own writes: nobody else writes these keys.
			v, err := r.s.Get([]byte(k))
			want, present := m[k]
			switch {
			case errors.Is(err, ErrNotFound):
				if present {
					r.failf("get %s: not found, want %.40q", k, want)
				}
			case !r.ok("get own key", err):
				return
			case !present:
				r.failf("get %s: %.40q, want absent", k, v)
			case string(v) != want:
				r.failf("get %s: %.40q, want %.40q", k, v, want)
			}
			continue
		}
		r.ack()
	}
}

// randomKey returns a key a round may have written or imported, or one
// next to those.
func (r *shutdownRound) randomKey(rng *rand.Rand) []byte {
	if len(r.streams) > 0 && rng.IntN(4) == 0 {
		return fmt.Appendf(nil, "imp%d-%03d", rng.IntN(len(r.streams)), rng.IntN(26))
	}
	return []byte(writerKey(rng.IntN(r.cfg.writers), rng.IntN(42)))
}

func (r *shutdownRound) sealer(rng *rand.Rand) {
	for !r.stopped() {
		if !r.ok("seal", r.s.Seal()) {
			return
		}
		r.stats.seals.Add(1)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
	}
}

func (r *shutdownRound) compactor(rng *rand.Rand) {
	for !r.stopped() {
		if !r.ok("compact", r.s.Compact(context.Background())) {
			return
		}
		r.stats.compacts.Add(1)
		time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
	}
}

func (r *shutdownRound) syncer(rng *rand.Rand) {
	for !r.stopped() {
		if !r.ok("sync", r.s.Sync()) {
			return
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
	}
}

func (r *shutdownRound) importer(rng *rand.Rand) {
	for !r.stopped() {
		n := 1 + rng.IntN(2)
		idx := make([]int, n)
		readers := make([]io.Reader, n)
		for i := range idx {
			idx[i] = rng.IntN(len(r.streams))
			readers[i] = bytes.NewReader(r.streams[idx[i]].data)
		}
		_, err := r.s.Import(context.Background(), readers...)
		if !r.ok("import", err) {
			return
		}
		r.stats.imports.Add(1)
		r.mu.Lock()
		for _, i := range idx {
			r.imported[i] = true
		}
		r.mu.Unlock()
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
	}
}

func (r *shutdownRound) exporter(rng *rand.Rand) {
	for !r.stopped() {
		pause(rng, 500)
		segs := r.s.Segments()
		if len(segs) == 0 {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		id := segs[rng.IntN(len(segs))].ID
		_, err := r.s.Export(context.Background(), id, io.Discard)
		if errors.Is(err, ErrNoSegment) {
			continue // merged away meanwhile
		}
		if !r.ok("export", err) {
			return
		}
		r.stats.exports.Add(1)
	}
}

func (r *shutdownRound) checker(rng *rand.Rand) {
	for !r.stopped() {
		if rng.IntN(2) == 0 {
			if !r.ok("check", r.s.Check()) {
				return
			}
		} else {
			rep, err := r.s.Verify(context.Background())
			if d := rep.Damaged; len(d) > 0 {
				r.failf("verify racing Close reported damage: %v (err %v)", d, err)
			}
			if !r.ok("verify", err) {
				return
			}
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
}

// pause sleeps up to max microseconds, so that the readers leave the CPU
// to the writers and to Close now and then (two cores, race detector on).
func pause(rng *rand.Rand, max int) {
	time.Sleep(time.Duration(rng.IntN(max)) * time.Microsecond)
}

func (r *shutdownRound) getter(rng *rand.Rand) {
	for !r.stopped() {
		pause(rng, 200)
		k := r.randomKey(rng)
		v, err := r.s.Get(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if !r.ok("get", err) {
			return
		}
		r.checkValue("get", k, v)
	}
}

// iterate scans with an iterator, forward or backward, reading values. Some
// iterators are kept across Close and used after it.
func (r *shutdownRound) iterate(rng *rand.Rand) {
	for !r.stopped() {
		pause(rng, 500)
		var o *IterOptions
		if rng.IntN(2) == 0 {
			o = &IterOptions{Prefix: fmt.Appendf(nil, "w%d-", rng.IntN(r.cfg.writers))}
		}
		it, err := r.s.NewIterator(o)
		if !r.ok("new iterator", err) {
			return
		}
		if rng.IntN(8) == 0 {
			r.keepAcrossClose(it, rng)
			return
		}
		backward := rng.IntN(3) == 0
		ok := it.First()
		if backward {
			ok = it.Last()
		}
		var prev []byte
		for ; ok; ok = r.advance(it, backward) {
			if prev != nil && (bytes.Compare(prev, it.Key()) >= 0) != backward {
				r.failf("iterator: %q after %q (backward %v)", it.Key(), prev, backward)
			}
			prev = append(prev[:0], it.Key()...)
			if rng.IntN(2) == 0 {
				v, err := it.Value()
				if !r.ok("iterator value", err) {
					break
				}
				r.checkValue("iterator value", it.Key(), v)
			}
		}
		r.ok("iterator err", it.Err())
		if err := it.Close(); err != nil {
			r.failf("iterator close: %v", err)
		}
	}
}

func (r *shutdownRound) advance(it *Iterator, backward bool) bool {
	if backward {
		return it.Prev()
	}
	return it.Next()
}

// keepAcrossClose holds it positioned until Close returned, then uses it:
// everything must say ErrClosed.
func (r *shutdownRound) keepAcrossClose(it *Iterator, rng *rand.Rand) {
	r.stats.itersKept.Add(1)
	valid := it.First()
	if valid {
		if _, err := it.Value(); !r.ok("kept iterator value", err) {
			valid = false
		}
	}
	<-r.stop
	if valid && it.Valid() {
		if _, err := it.Value(); err != ErrClosed {
			r.failf("iterator value after Close: %v, want ErrClosed", err)
		}
	}
	if rng.IntN(2) == 0 {
		if it.Next() {
			r.failf("iterator Next after Close returned true")
		}
	} else if it.First() {
		r.failf("iterator First after Close returned true")
	}
	if err := it.Err(); err != ErrClosed {
		r.failf("iterator Err after Close: %v, want ErrClosed", err)
	}
	if err := it.Close(); err != nil {
		r.failf("iterator close after store Close: %v", err)
	}
}

// snapshots takes snapshots and reads through them; some are kept across
// Close and used after it.
func (r *shutdownRound) snapshots(rng *rand.Rand) {
	for !r.stopped() {
		pause(rng, 300)
		sn, err := r.s.NewSnapshot()
		if !r.ok("new snapshot", err) {
			return
		}
		keep := rng.IntN(6) == 0
		for range 1 + rng.IntN(8) {
			k := r.randomKey(rng)
			v, err := sn.Get(k)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if !r.ok("snapshot get", err) {
				break
			}
			r.checkValue("snapshot get", k, v)
		}
		if rng.IntN(4) == 0 {
			it, err := sn.NewIterator(nil)
			if r.ok("snapshot iterator", err) {
				for ok := it.First(); ok; ok = it.Next() {
					if _, err := it.Value(); !r.ok("snapshot iterator value", err) {
						break
					}
				}
				r.ok("snapshot iterator err", it.Err())
				it.Close()
			}
		}
		if keep {
			r.stats.snapsKept.Add(1)
			<-r.stop
			if _, err := sn.Get(r.randomKey(rng)); !errors.Is(err, ErrClosed) {
				r.failf("snapshot get after Close: %v, want ErrClosed", err)
			}
			if it, err := sn.NewIterator(nil); err == nil {
				if it.First() || !errors.Is(it.Err(), ErrClosed) {
					r.failf("snapshot iterator after Close: First ok, Err %v", it.Err())
				}
				it.Close()
			} else if !errors.Is(err, ErrClosed) {
				r.failf("snapshot NewIterator after Close: %v", err)
			}
		}
		if err := sn.Close(); err != nil {
			r.failf("snapshot close: %v", err)
		}
		if keep {
			return
		}
	}
}

// closer waits for the writers to reach the round's target (or to stop),
// then closes the store, sometimes from several goroutines at once.
func (r *shutdownRound) closer(rng *rand.Rand, writersDone <-chan struct{}) {
	// Whichever comes first: the writers' target, or a short delay (except
	// for big values, which need the volume to reach closeSealBytes).
	var delay <-chan time.Time
	if r.cfg.valueMax <= 1<<10 {
		delay = time.After(time.Duration(1+rng.IntN(8)) * time.Millisecond)
	}
	select {
	case <-r.trigger:
	case <-writersDone:
	case <-delay:
	}
	if d := rng.IntN(4); d > 0 {
		time.Sleep(time.Duration(rng.IntN(d*200)) * time.Microsecond)
	}
	n := 1
	if rng.IntN(4) == 0 {
		n = 2 + rng.IntN(2)
	}
	r.closeStarted.Store(true)
	if r.s.Metrics().LiveBytes >= closeSealBytes {
		r.stats.closeSeals.Add(1) // Close will seal (a racing Seal may beat it)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = r.s.Close() })
	}
	wg.Wait()
	nils := 0
	for _, err := range errs {
		switch {
		case err == nil:
			nils++
		case errors.Is(err, ErrClosed):
		default:
			r.failf("close: %v", err)
		}
	}
	if nils != 1 {
		r.failf("%d concurrent Close calls: %d returned nil (errs %v), want exactly 1", n, nils, errs)
	}
	if err := r.s.Close(); !errors.Is(err, ErrClosed) {
		r.failf("Close after Close: %v, want ErrClosed", err)
	}
	close(r.stop)
}

// run drives one round on the open store s with model m (updated with the
// acknowledged writes); it returns once s is closed and every goroutine is
// done.
func (r *shutdownRound) run(rng *rand.Rand, round int, m model) {
	r.trigger = make(chan struct{})
	r.stop = make(chan struct{})
	r.imported = make([]bool, len(r.streams))
	if rng.IntN(10) == 0 {
		r.target = 0 // close at once
		close(r.trigger)
	} else if r.cfg.valueMax > 1<<10 {
		// Enough big values for the live file to reach closeSealBytes.
		r.target = 40 + rng.Int64N(120)
	} else {
		r.target = 1 + rng.Int64N(60)
	}
	sub := func() *rand.Rand { return rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())) }

	var wg, writers sync.WaitGroup
	models := make([]model, r.cfg.writers)
	for w := range r.cfg.writers {
		models[w] = model{}
		for k, v := range m {
			if strings.HasPrefix(k, fmt.Sprintf("w%d-", w)) {
				models[w][k] = v
			}
		}
		wrng := sub()
		writers.Go(func() { r.writer(w, wrng, round, models[w]) })
	}
	writersDone := make(chan struct{})
	go func() { writers.Wait(); close(writersDone) }()

	type job struct {
		p  int // percent chance of running
		fn func(*rand.Rand)
	}
	sealP := 70
	if r.cfg.valueMax > 1<<10 {
		sealP = 15 // explicit seals would keep the live file small
	}
	jobs := []job{
		{sealP, r.sealer}, {50, r.compactor}, {40, r.syncer}, {50, r.importer}, {40, r.exporter},
		{15, r.checker}, {60, r.getter}, {60, r.iterate},
		{60, r.snapshots}, {30, r.snapshots}, // sometimes two
	}
	for _, j := range jobs {
		jrng := sub()
		if rng.IntN(100) < j.p {
			wg.Go(func() { j.fn(jrng) })
		}
	}
	crng := sub()
	wg.Go(func() { r.closer(crng, writersDone) })
	wg.Wait()
	writers.Wait()

	for w := range r.cfg.writers {
		prefix := fmt.Sprintf("w%d-", w)
		for k := range m {
			if strings.HasPrefix(k, prefix) {
				delete(m, k)
			}
		}
		for k, v := range models[w] {
			m[k] = v
		}
	}
	for i, ok := range r.imported {
		if ok {
			for k, v := range r.streams[i].keys {
				m[k] = v
			}
		}
	}
}

// runShutdownChain runs rounds rounds in one directory: open, load and
// close, reopen and compare with the model, again. It returns an error
// naming the round and seed of the first failure.
func runShutdownChain(fsys *trackFS, dir string, seed uint64, rounds int, streams []importStream, stats *shutdownStats) error {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := newShutdownConfig(rng, fsys)
	m := model{}
	s, err := Open(dir, &cfg.opts)
	if err != nil {
		return fmt.Errorf("seed %d: open: %w", seed, err)
	}
	for round := range rounds {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("seed %d round %d (%v): %s", seed, round, cfg, fmt.Sprintf(format, args...))
		}
		r := &shutdownRound{s: s, cfg: cfg, streams: streams, stats: stats}
		// Not a timing assertion: a deadlock detector that names the round
		// (go test's own timeout would not).
		watchdog := time.AfterFunc(3*time.Minute, func() {
			fmt.Fprintf(os.Stderr, "seed %d round %d (%v): no progress in 3 minutes\n%s", seed, round, cfg, goroutineDump())
			panic("TestShutdownUnderLoad: deadlock?")
		})
		r.run(rng, round, m)
		watchdog.Stop()
		stats.rounds.Add(1)
		if len(r.failures) > 0 {
			return fail("\n  %s", strings.Join(r.failures, "\n  "))
		}
		if err := fsys.held(); err != nil {
			return fail("%v", err)
		}
		crashed := ""
		if mem, ok := fsys.FS.(*vfs.Mem); ok && rng.IntN(4) == 0 {
			// Close returned nil, so every acknowledged write is durable:
			// a power loss now must lose none of them.
			modes := testutil.CrashModes()
			mode := modes[rng.IntN(len(modes))]
			crashed = fmt.Sprintf(" after a crash (mode %d) that followed Close", mode)
			fsys = &trackFS{FS: mem.CrashClone(mode, rng)}
			cfg.opts.FS = fsys
			stats.crashes.Add(1)
		}
		start := time.Now()
		s, err = Open(dir, &cfg.opts)
		if err != nil {
			return fail("reopen%s: %v", crashed, err)
		}
		if err := fullDiff(s, m, nil); err != nil {
			s.Close()
			return fail("after reopen%s: %v", crashed, err)
		}
		// Check reads everything: once per chain is enough.
		if round == rounds-1 {
			if err := s.Check(); err != nil {
				s.Close()
				return fail("check after reopen%s: %v", crashed, err)
			}
		}
		stats.reopen.Add(int64(time.Since(start)))
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("seed %d: final close: %w", seed, err)
	}
	if err := fsys.held(); err != nil {
		return fmt.Errorf("seed %d: %w", seed, err)
	}
	return nil
}

// shutdownChainLen is how many rounds share a directory (and a model).
const shutdownChainLen = 4

// runShutdownChains runs chains of shutdownChainLen rounds (the last one
// shorter) until rounds rounds ran, GOMAXPROCS chains at a time; chain(c, n)
// runs chain c of n rounds. It returns the first error, in chain order.
func runShutdownChains(rounds int, chain func(c, n int) error) error {
	chains := (rounds + shutdownChainLen - 1) / shutdownChainLen
	errs := make([]error, chains)
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !failed.Load() {
				c := int(next.Add(1)) - 1
				if c >= chains {
					return
				}
				if errs[c] = chain(c, min(shutdownChainLen, rounds-c*shutdownChainLen)); errs[c] != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// openFDs counts this process's open file descriptors (-1 if unknown).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// mappingsUnder counts the memory mappings of files under dir (-1 if
// unknown).
func mappingsUnder(dir string) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1
	}
	return strings.Count(string(b), dir)
}

// settleGoroutines waits for the goroutine count to fall back to at most
// want, and returns the count it saw last.
func settleGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 1000 && n > want; i++ {
		time.Sleep(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

func TestShutdownUnderLoad(t *testing.T) {
	streams := shutdownStreams(t, 3)
	base := shutdownSeed(t)
	goroutines := runtime.NumGoroutine()

	t.Run("mem", func(t *testing.T) {
		rounds := shutdownRounds(t, shutdownMemRounds)
		start := time.Now()
		var stats shutdownStats
		err := runShutdownChains(rounds, func(c int, n int) error {
			fsys := &trackFS{FS: vfs.NewMem()}
			return runShutdownChain(fsys, "/db", base<<32|uint64(c), n, streams, &stats)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d rounds in %v: %v", rounds, time.Since(start).Round(time.Millisecond), &stats)
	})

	t.Run("os", func(t *testing.T) {
		rounds := shutdownRounds(t, 800)
		fds := openFDs()
		start := time.Now()
		var stats shutdownStats
		root := t.TempDir()
		err := runShutdownChains(rounds, func(c int, n int) error {
			fsys := &trackFS{FS: vfs.NewOS()}
			dir := filepath.Join(root, fmt.Sprint(c))
			return runShutdownChain(fsys, dir, base<<32|1<<31|uint64(c), n, streams, &stats)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d rounds in %v: %v", rounds, time.Since(start).Round(time.Millisecond), &stats)
		if fds >= 0 {
			// Slack for descriptors the runtime opens lazily; a leak per
			// round would be hundreds.
			if now := openFDs(); now > fds+8 {
				t.Errorf("open file descriptors: %d before, %d after %d rounds", fds, now, rounds)
			}
		}
		if n := mappingsUnder(root); n > 0 {
			t.Errorf("%d mappings of files under %s left after Close", n, root)
		}
	})

	if n := settleGoroutines(goroutines + 2); n > goroutines+2 {
		t.Errorf("goroutines: %d before, %d after every store closed\n%s", goroutines, n, goroutineDump())
	}
}

// ---- Targeted tests: ways a user can break Close that a stress test may
// not hit often.

// TestShutdownCloseTwiceConcurrently: of many Close calls at once exactly
// one does the work and returns nil; the others return ErrClosed; the store
// reopens with everything acknowledged.
func TestShutdownCloseTwiceConcurrently(t *testing.T) {
	for i := range 50 {
		fsys := &trackFS{FS: vfs.NewMem()}
		s := mustOpen(t, "/db", &Options{FS: fsys, SegmentSize: 16 << 10, Sync: SyncManual})
		for k := range 100 {
			require.NoError(t, s.Put(fmt.Appendf(nil, "k%03d", k), bytes.Repeat([]byte{'v'}, 300)))
		}
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for j := range errs {
			wg.Go(func() { errs[j] = s.Close() })
		}
		wg.Wait()
		nils := 0
		for _, err := range errs {
			if err == nil {
				nils++
			} else {
				require.ErrorIs(t, err, ErrClosed)
			}
		}
		require.Equal(t, 1, nils, "iteration %d: %v", i, errs)
		require.NoError(t, fsys.held())
		s = mustOpen(t, "/db", &Options{FS: fsys, SegmentSize: 16 << 10})
		for k := range 100 {
			_, err := s.Get(fmt.Appendf(nil, "k%03d", k))
			require.NoError(t, err)
		}
		require.NoError(t, s.Close())
	}
}

// sealedStore opens a store with n sealed segments (background merge off)
// holding keys k000.., one segment per 10 keys.
func sealedStore(t *testing.T, fsys *trackFS, dir string, n int, mods ...func(*Options)) *Store {
	t.Helper()
	o := &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	for _, mod := range mods {
		mod(o)
	}
	s := mustOpen(t, dir, o)
	for i := range n {
		for k := range 10 {
			key := fmt.Sprintf("k%03d", i*10+k)
			require.NoError(t, s.Put([]byte(key), []byte(key+"|v")))
		}
		require.NoError(t, s.Seal())
	}
	return s
}

// TestShutdownSnapshotAcrossClose: a snapshot and iterators open across
// Close (some of the files they pin retired by a merge) answer ErrClosed,
// close cleanly afterwards, even after the store was reopened, and leave no
// file, mapping or removed file behind that the new store needs.
func TestShutdownSnapshotAcrossClose(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			fsys := &trackFS{FS: vfs.NewMem()}
			dir := "/db"
			if fsName == "os" {
				fsys.FS, dir = vfs.NewOS(), t.TempDir()
			}
			fds := openFDs()
			s := sealedStore(t, fsys, dir, 6)
			require.NoError(t, s.Put([]byte("live"), []byte("live|v")))
			sn, err := s.NewSnapshot()
			require.NoError(t, err)
			for _, k := range []string{"k005", "k055", "live"} {
				v, err := sn.Get([]byte(k)) // maps the segments
				require.NoError(t, err)
				require.Equal(t, k+"|v", string(v))
			}
			// Retire every segment the snapshot sees: only its pins keep
			// them now.
			require.NoError(t, s.Compact(t.Context()))
			it, err := sn.NewIterator(nil)
			require.NoError(t, err)
			require.True(t, it.First())
			own, err := s.NewIterator(nil)
			require.NoError(t, err)
			require.True(t, own.Last())
			_, err = own.Value()
			require.NoError(t, err)
			require.NoError(t, s.Put([]byte("after"), []byte("after|v")))

			require.NoError(t, s.Close())

			_, err = sn.Get([]byte("k005"))
			require.ErrorIs(t, err, ErrClosed)
			_, err = it.Value()
			require.ErrorIs(t, err, ErrClosed)
			require.False(t, it.Next())
			require.ErrorIs(t, it.Err(), ErrClosed)
			_, err = own.Value()
			require.ErrorIs(t, err, ErrClosed)
			require.False(t, own.Prev())
			require.ErrorIs(t, own.Err(), ErrClosed)
			it2, err := sn.NewIterator(nil)
			if err == nil {
				require.False(t, it2.First())
				require.ErrorIs(t, it2.Err(), ErrClosed)
				require.NoError(t, it2.Close())
			} else {
				require.ErrorIs(t, err, ErrClosed)
			}
			_, err = s.NewSnapshot()
			require.ErrorIs(t, err, ErrClosed)
			_, err = s.NewIterator(nil)
			require.ErrorIs(t, err, ErrClosed)

			// Reopen while the old snapshot still pins retired files, then
			// release it: whatever it removes must be nothing the new
			// store uses.
			s2 := mustOpen(t, dir, &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
			require.NoError(t, it.Close())
			require.NoError(t, own.Close())
			require.NoError(t, sn.Close())
			require.ErrorIs(t, sn.Close(), ErrClosed, "a second Close does nothing and says so, as Store's does")
			want := model{"live": "live|v", "after": "after|v"}
			for i := range 60 {
				k := fmt.Sprintf("k%03d", i)
				want[k] = k + "|v"
			}
			require.NoError(t, fullDiff(s2, want, nil))
			require.NoError(t, s2.Check())
			require.NoError(t, s2.Close())
			require.NoError(t, fsys.held())
			if fsName == "os" {
				require.Zero(t, mappingsUnder(dir))
				if fds >= 0 {
					require.LessOrEqual(t, openFDs(), fds+4)
				}
			}
		})
	}
}

// blockingReader returns data, but blocks before its first byte after
// the first chunk until released, and says when it is blocked.
type blockingReader struct {
	data    []byte
	off     int
	first   int
	blocked chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.off >= b.first {
		b.once.Do(func() { close(b.blocked) })
		<-b.release
	}
	if b.off >= len(b.data) {
		return 0, io.EOF
	}
	end := len(b.data)
	if b.off < b.first {
		end = b.first
	}
	n := copy(p, b.data[b.off:end])
	b.off += n
	return n, nil
}

// blockingWriter blocks its second Write until released.
type blockingWriter struct {
	writes  int
	blocked chan struct{}
	release chan struct{}
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.writes++
	if b.writes == 2 {
		close(b.blocked)
		<-b.release
	}
	return len(p), nil
}

// waitClosing waits until Close has begun on s and cancelled the
// operations it admitted.
func waitClosing(s *Store) {
	for {
		s.ops.mu.Lock()
		closed := s.ops.closed // set under mu with the cancellations
		s.ops.mu.Unlock()
		if closed {
			return
		}
		runtime.Gosched()
	}
}

// TestShutdownDuringBlockedImport: Close while an Import waits on a slow
// peer. Close cannot interrupt a Read in progress, so it waits for it; once
// the Read returns, the Import stops with ErrClosed, commits nothing,
// removes its files, and Close returns nil.
func TestShutdownDuringBlockedImport(t *testing.T) {
	streams := shutdownStreams(t, 1)
	fsys := &trackFS{FS: vfs.NewMem()}
	s := sealedStore(t, fsys, "/db", 2)
	br := &blockingReader{data: streams[0].data, first: 4 << 10, blocked: make(chan struct{}), release: make(chan struct{})}
	require.Greater(t, len(br.data), br.first)
	importDone := make(chan error, 1)
	go func() {
		_, err := s.Import(context.Background(), br)
		importDone <- err
	}()
	<-br.blocked
	closeDone := make(chan error, 1)
	go func() { closeDone <- s.Close() }()
	waitClosing(s)
	// Close cannot finish while the Import it admitted is inside Read. (A
	// one-sided check: it cannot fail unless Close stops waiting for the
	// operations it admitted; the sleep only gives such a bug a chance to
	// show.)
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-closeDone:
		t.Fatalf("Close returned (%v) while an admitted Import was still reading", err)
	default:
	}
	close(br.release)
	require.ErrorIs(t, <-importDone, ErrClosed)
	require.NoError(t, <-closeDone)
	require.NoError(t, fsys.held())

	s = mustOpen(t, "/db", &Options{FS: fsys})
	for k := range streams[0].keys {
		_, err := s.Get([]byte(k))
		require.ErrorIs(t, err, ErrNotFound, "import cancelled by Close must commit nothing")
	}
	_, err := s.Get([]byte("k005"))
	require.NoError(t, err)
	names, err := fsys.List("/db")
	require.NoError(t, err)
	require.Len(t, s.Segments(), 2)
	for _, n := range names {
		if id, ext, ok := segment.ParseName(n); ok && ext == segment.NameSeg {
			found := slices.ContainsFunc(s.Segments(), func(si SegmentInfo) bool { return si.ID == id })
			require.True(t, found, "import output %s left behind", n)
		}
	}
	require.NoError(t, s.Close())
}

// TestShutdownDuringBlockedExport: the same for an Export whose writer
// blocks: it returns ErrClosed once the Write returns (when there is more to
// send), and Close returns nil.
func TestShutdownDuringBlockedExport(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	s := mustOpen(t, "/db", &Options{FS: fsys, SegmentSize: 8 << 20, Merge: MergeOptions{Disable: true}})
	for k := range 40 {
		require.NoError(t, s.Put(fmt.Appendf(nil, "k%03d", k), bytes.Repeat([]byte{'v'}, 100<<10)))
	}
	require.NoError(t, s.Seal())
	segs := s.Segments()
	require.Len(t, segs, 1)
	require.Greater(t, segs[0].Size, int64(3<<20), "export needs several chunks")
	bw := &blockingWriter{blocked: make(chan struct{}), release: make(chan struct{})}
	exportDone := make(chan error, 1)
	go func() {
		_, err := s.Export(context.Background(), segs[0].ID, bw)
		exportDone <- err
	}()
	<-bw.blocked
	closeDone := make(chan error, 1)
	go func() { closeDone <- s.Close() }()
	waitClosing(s)
	close(bw.release)
	require.ErrorIs(t, <-exportDone, ErrClosed)
	require.NoError(t, <-closeDone)
	require.NoError(t, fsys.held())
	s = mustOpen(t, "/db", &Options{FS: fsys})
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
}

// TestShutdownDuringPacedCompact: Close cancels a Compact whose merge is
// paced to a crawl: the Compact returns ErrClosed, its output is removed,
// and the store reopens with every key.
func TestShutdownDuringPacedCompact(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	s := sealedStore(t, fsys, "/db", 4, func(o *Options) { o.Merge.BytesPerSecond = 1 })
	before, err := fsys.List("/db")
	require.NoError(t, err)
	compactDone := make(chan error, 1)
	go func() { compactDone <- s.Compact(context.Background()) }()
	// Wait for the merge output to exist: the merge is copying, and will
	// then wait (about forever) for its pace.
	for {
		names, err := fsys.List("/db")
		require.NoError(t, err)
		if len(names) > len(before) {
			break
		}
		runtime.Gosched()
	}
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-compactDone, ErrClosed)
	require.NoError(t, fsys.held())
	s = mustOpen(t, "/db", &Options{FS: fsys, Merge: MergeOptions{Disable: true}})
	want := model{}
	for i := range 40 {
		k := fmt.Sprintf("k%03d", i)
		want[k] = k + "|v"
	}
	require.NoError(t, fullDiff(s, want, nil))
	require.Len(t, s.Segments(), 4, "the cancelled merge committed nothing")
	require.NoError(t, s.Close())
}

// TestShutdownIteratorAcrossClose: an iterator in the middle of a scan when
// the store closes stops with ErrClosed; Value says ErrClosed; so does any
// later positioning; Close of the iterator is fine.
func TestShutdownIteratorAcrossClose(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	s := sealedStore(t, fsys, "/db", 3)
	require.NoError(t, s.Put([]byte("zz"), []byte("zz|v")))
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	n := 0
	for ok := it.First(); ok && n < 5; ok = it.Next() {
		_, err := it.Value()
		require.NoError(t, err)
		n++
	}
	require.True(t, it.Valid())
	require.NoError(t, s.Close())
	_, err = it.Value()
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, it.Next())
	require.ErrorIs(t, it.Err(), ErrClosed)
	require.False(t, it.Seek([]byte("k010")))
	require.False(t, it.Last())
	require.False(t, it.SeekLT([]byte("k010")))
	require.ErrorIs(t, it.Err(), ErrClosed)
	require.NoError(t, it.Close())
	require.NoError(t, fsys.held())
}

// TestShutdownReadsRacingClose: point reads, snapshots, iterators, Verify,
// Metrics and the other read-only calls racing Close (run it under -race):
// each answers normally or with ErrClosed.
func TestShutdownReadsRacingClose(t *testing.T) {
	for i := range 40 {
		fsys := &trackFS{FS: vfs.NewMem()}
		s := sealedStore(t, fsys, "/db", 4, func(o *Options) { o.DisableMmap = i%2 == 0; o.MaxOpenFiles = 2 })
		require.NoError(t, s.Put([]byte("live"), []byte("live|v")))
		var wg sync.WaitGroup
		var failures sync.Map
		fail := func(what string, err error) { failures.Store(what, err) }
		start := make(chan struct{})
		for g := range 6 {
			wg.Go(func() {
				<-start
				for j := 0; ; j++ {
					k := fmt.Appendf(nil, "k%03d", (g*7+j)%40)
					var err error
					switch g {
					case 0, 1:
						var v []byte
						v, err = s.Get(k)
						if err == nil && string(v) != string(k)+"|v" {
							fail("get value", fmt.Errorf("%s = %q", k, v))
						}
					case 2:
						var sn *Snapshot
						if sn, err = s.NewSnapshot(); err == nil {
							_, err = sn.Get(k)
							sn.Close()
						}
					case 3:
						var it *Iterator
						if it, err = s.NewIterator(nil); err == nil {
							for ok := it.First(); ok; ok = it.Next() {
								if _, verr := it.Value(); verr != nil {
									break
								}
							}
							err = it.Err()
							it.Close()
						}
					case 4:
						_ = s.Metrics()
						_ = s.Segments()
						_ = s.ChangesSince(0)
						_ = s.ManifestSeq()
						if s.closed.Load() {
							return
						}
						continue
					case 5:
						var rep VerifyReport
						rep, err = s.Verify(context.Background())
						if d := rep.Damaged; len(d) > 0 {
							fail("verify damaged", fmt.Errorf("%v", d))
						}
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						fail(fmt.Sprint("reader ", g), err)
						return
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
		require.NoError(t, s.Close())
		wg.Wait()
		failures.Range(func(k, v any) bool {
			t.Errorf("iteration %d: %s: %v", i, k, v)
			return true
		})
		require.NoError(t, fsys.held())
	}
}

// TestShutdownVerifyRacingClose: a Verify whose snapshot was taken before
// Close, reading a segment after Close released the file cache, must
// return ErrClosed, not list the segment as damaged. Verify is not gated
// (Close does not wait for it) and its context is not cancelled by Close;
// verifySegment's files.acquire returns ErrClosed once the cache is closed
// (filecache.go, acquire), and Verify appends every verifySegment error to
// rep.Damaged and returns nil (check.go, Verify): each remaining segment is
// reported damaged, and the call succeeds.
func TestShutdownVerifyRacingClose(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	s := sealedStore(t, fsys, "/db", 3)
	// Hold Verify's first open of a segment file until Close has returned,
	// or, if Close waits for Verify (as it may: that is one way to fix this),
	// until Close is evidently waiting.
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	hook := func(name string) {
		if strings.HasSuffix(name, "."+segment.NameLog) || strings.HasSuffix(name, "."+segment.NameSeg) {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
	}
	fsys.onOpen.Store(&hook)
	type result struct {
		rep VerifyReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := s.Verify(context.Background())
		done <- result{rep, err}
	}()
	<-entered
	closeDone := make(chan error, 1)
	go func() { closeDone <- s.Close() }()
	var closeErr error
	select {
	case closeErr = <-closeDone:
		close(release)
	case <-time.After(2 * time.Second):
		// Close waits for the Verify: not this bug. (Not a timing
		// assertion: either branch can pass.)
		close(release)
		closeErr = <-closeDone
	}
	require.NoError(t, closeErr)
	res := <-done
	require.Empty(t, res.rep.Damaged, "Verify racing Close reported healthy segments as damaged")
	if res.err != nil {
		require.ErrorIs(t, res.err, ErrClosed)
	}
	require.NoError(t, fsys.held())
}

// TestShutdownWritesAfterClose: every write path after Close says
// ErrClosed, including a batch built before Close.
func TestShutdownWritesAfterClose(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	s := mustOpen(t, "/db", &Options{FS: fsys})
	b := s.NewBatch()
	require.NoError(t, b.Put([]byte("a"), []byte("1")))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Apply(b), ErrClosed)
	require.ErrorIs(t, s.Put([]byte("a"), []byte("1")), ErrClosed)
	require.ErrorIs(t, s.Delete([]byte("a")), ErrClosed)
	require.ErrorIs(t, s.Seal(), ErrClosed)
	require.ErrorIs(t, s.Sync(), ErrClosed)
	require.ErrorIs(t, s.Check(), ErrClosed)
	require.ErrorIs(t, s.Compact(context.Background()), ErrClosed)
	_, err := s.Import(context.Background(), bytes.NewReader(nil))
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Export(context.Background(), 1, io.Discard)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Verify(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Close(), ErrClosed)
	require.NoError(t, fsys.held())
	s = mustOpen(t, "/db", &Options{FS: fsys})
	_, err = s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, s.Close())
}

// TestShutdownFreshOpenLeaksFirstLiveFile: opening a new store and closing
// it must leave no file open. Open of an empty directory makes the first
// live file with makeSpare (which returns it open) and then opens it again
// with openTail; the first handle is never closed.
func TestShutdownFreshOpenLeaksFirstLiveFile(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			fsys := &trackFS{FS: vfs.NewMem()}
			dir := "/db"
			if fsName == "os" {
				fsys.FS, dir = vfs.NewOS(), t.TempDir()
			}
			s := mustOpen(t, dir, &Options{FS: fsys, Merge: MergeOptions{Disable: true}})
			require.NoError(t, s.Close())
			require.NoError(t, fsys.held(), "a fresh Open and a Close")
		})
	}
}

// TestShutdownCloseSealsWithSnapshotOpen: Close seals a large live file
// (closeSealBytes) while a snapshot and an iterator still read it; they
// answer ErrClosed afterwards, every write is durable (a power loss right
// after Close loses none, even under SyncManual), and closing them after
// the store reopened releases everything.
func TestShutdownCloseSealsWithSnapshotOpen(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			mem := vfs.NewMem()
			fsys := &trackFS{FS: mem}
			dir := "/db"
			if fsName == "os" {
				fsys.FS, dir = vfs.NewOS(), t.TempDir()
			}
			o := &Options{FS: fsys, SegmentSize: 4 << 20, Sync: SyncManual, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, dir, o)
			want := model{}
			val := strings.Repeat("v", 20<<10)
			for i := range 80 {
				k := fmt.Sprintf("k%03d", i)
				require.NoError(t, s.Put([]byte(k), []byte(k+"|"+val)))
				want[k] = k + "|" + val
			}
			require.GreaterOrEqual(t, s.Metrics().LiveBytes, int64(closeSealBytes))
			sn, err := s.NewSnapshot()
			require.NoError(t, err)
			it, err := s.NewIterator(nil)
			require.NoError(t, err)
			require.True(t, it.First())
			_, err = it.Value()
			require.NoError(t, err)
			require.NoError(t, s.Close())
			_, err = sn.Get([]byte("k001"))
			require.ErrorIs(t, err, ErrClosed)
			_, err = it.Value()
			require.ErrorIs(t, err, ErrClosed)

			if fsName == "mem" {
				// Close made everything durable: a power loss now loses nothing.
				crashed := &trackFS{FS: mem.CrashClone(vfs.CrashDropUnsynced, nil)}
				o2 := *o
				o2.FS = crashed
				s2 := mustOpen(t, dir, &o2)
				require.Len(t, s2.Segments(), 1, "Close sealed the large live file")
				require.NoError(t, fullDiff(s2, want, nil))
				require.NoError(t, s2.Close())
				require.NoError(t, crashed.held())
			}
			s2 := mustOpen(t, dir, o)
			require.Len(t, s2.Segments(), 1, "Close sealed the large live file")
			require.NoError(t, it.Close())
			require.NoError(t, sn.Close())
			require.NoError(t, fullDiff(s2, want, nil))
			require.NoError(t, s2.Check())
			require.NoError(t, s2.Close())
			require.NoError(t, fsys.held())
			if fsName == "os" {
				require.Zero(t, mappingsUnder(dir))
			}
		})
	}
}

// TestShutdownDuringPacedBackgroundMerge: Close stops a background merge
// that is paced to a crawl instead of waiting for it; the merge commits
// nothing.
func TestShutdownDuringPacedBackgroundMerge(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	o := &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8, BytesPerSecond: 1}}
	s := mustOpen(t, "/db", o)
	want := model{}
	for i := range 3 {
		k := fmt.Sprintf("k%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte(k+"|v")))
		want[k] = k + "|v"
		require.NoError(t, s.Seal())
	}
	// Wait for the merge output: the background merge is copying, and will
	// then wait (about forever) for its pace.
	for {
		names, err := fsys.List("/db")
		require.NoError(t, err)
		if slices.ContainsFunc(names, func(n string) bool {
			id, ext, ok := segment.ParseName(n)
			return ok && ext == segment.NameSeg && !slices.ContainsFunc(s.Segments(), func(si SegmentInfo) bool { return si.ID == id })
		}) {
			break
		}
		runtime.Gosched()
	}
	require.NoError(t, s.Close())
	require.Zero(t, s.Metrics().Merges)
	require.NoError(t, fsys.held())
	s = mustOpen(t, "/db", &Options{FS: fsys, Merge: MergeOptions{Disable: true}})
	require.Len(t, s.Segments(), 3)
	require.NoError(t, fullDiff(s, want, nil))
	require.NoError(t, s.Close())
}

// TestShutdownSnapshotsClosedRacingClose: snapshots and iterators closed
// by other goroutines while the store closes (run it under -race).
func TestShutdownSnapshotsClosedRacingClose(t *testing.T) {
	for i := range 30 {
		fsys := &trackFS{FS: vfs.NewMem()}
		s := sealedStore(t, fsys, "/db", 3, func(o *Options) { o.DisableMmap = i%2 == 1 })
		require.NoError(t, s.Put([]byte("live"), []byte("live|v")))
		var snaps []*Snapshot
		var iters []*Iterator
		for range 4 {
			sn, err := s.NewSnapshot()
			require.NoError(t, err)
			_, err = sn.Get([]byte("k001"))
			require.NoError(t, err)
			snaps = append(snaps, sn)
			it, err := s.NewIterator(nil)
			require.NoError(t, err)
			require.True(t, it.First())
			iters = append(iters, it)
		}
		require.NoError(t, s.Compact(t.Context())) // the snapshots hold the only pins of the inputs
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range snaps {
			wg.Go(func() {
				<-start
				sn, it := snaps[j], iters[j]
				for ok := true; ok; ok = it.Next() {
					if _, err := it.Value(); err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("value: %v", err)
						}
						break
					}
					if _, err := sn.Get(it.Key()); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("snapshot get: %v", err)
					}
				}
				if err := it.Err(); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("iterator: %v", err)
				}
				if err := it.Close(); err != nil {
					t.Errorf("iterator close: %v", err)
				}
				if err := sn.Close(); err != nil {
					t.Errorf("snapshot close: %v", err)
				}
			})
		}
		close(start)
		require.NoError(t, s.Close())
		wg.Wait()
		require.NoError(t, fsys.held())
	}
}

// TestShutdownIteratorEdgesAfterClose: iterators and snapshots used after
// Store.Close return ErrClosed, also an iterator that is not positioned
// (exhausted, or never moved: Next, Prev and Value used to test the
// position first and answer false / ErrNotFound) and Snapshot.NewIterator
// on a snapshot of a closed store (it used to test only the snapshot).
func TestShutdownIteratorEdgesAfterClose(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	s := sealedStore(t, fsys, "/db", 1)
	exhausted, err := s.NewIterator(nil)
	require.NoError(t, err)
	for ok := exhausted.First(); ok; ok = exhausted.Next() {
	}
	require.NoError(t, exhausted.Err())
	fresh, err := s.NewIterator(nil)
	require.NoError(t, err)
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	require.NoError(t, s.Close())

	var problems []string
	for _, c := range []struct {
		name string
		it   *Iterator
	}{{"exhausted", exhausted}, {"never positioned", fresh}} {
		name, it := c.name, c.it
		if it.Next() {
			problems = append(problems, name+": Next true")
		}
		if it.Err() != ErrClosed {
			problems = append(problems, fmt.Sprintf("%s iterator: Err after Close and Next = %v, want ErrClosed", name, it.Err()))
		}
		if _, err := it.Value(); err != ErrClosed {
			problems = append(problems, fmt.Sprintf("%s iterator: Value after Close = %v, want ErrClosed", name, err))
		}
		require.NoError(t, it.Close())
	}
	it, err := sn.NewIterator(nil)
	if err != ErrClosed {
		problems = append(problems, fmt.Sprintf("Snapshot.NewIterator after Close: err %v, want ErrClosed", err))
	}
	if it != nil {
		require.False(t, it.First())
		require.True(t, it.Err() == ErrClosed)
		require.NoError(t, it.Close())
	}
	require.NoError(t, sn.Close())
	require.NoError(t, fsys.held())
	if len(problems) > 0 {
		t.Errorf("after Store.Close:\n  %s", strings.Join(problems, "\n  "))
	}
}
