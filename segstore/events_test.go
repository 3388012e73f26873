package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// eventLog records every event a listener receives, in order.
type eventLog struct {
	mu     sync.Mutex
	names  []string
	seals  []SealInfo
	merges []MergeInfo
	imps   []ImportInfo
	rots   []ManifestRotationInfo
	reps   []RepairInfo
	ixs    []IndexRebuildInfo
	bgs    []BackgroundErrorInfo
	fails  []StoreFailedInfo
	// bg receives every background error without blocking the store.
	bg chan BackgroundErrorInfo
}

func (l *eventLog) add(name string, f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, name)
	f()
}

func (l *eventLog) listener() EventListener {
	l.bg = make(chan BackgroundErrorInfo, 64)
	return EventListener{
		SealBegin:       func(i SealInfo) { l.add("seal-begin", func() { l.seals = append(l.seals, i) }) },
		SealEnd:         func(i SealInfo) { l.add("seal-end", func() { l.seals = append(l.seals, i) }) },
		MergeBegin:      func(i MergeInfo) { l.add("merge-begin", func() { l.merges = append(l.merges, i) }) },
		MergeEnd:        func(i MergeInfo) { l.add("merge-end", func() { l.merges = append(l.merges, i) }) },
		ImportBegin:     func(i ImportInfo) { l.add("import-begin", func() { l.imps = append(l.imps, i) }) },
		ImportEnd:       func(i ImportInfo) { l.add("import-end", func() { l.imps = append(l.imps, i) }) },
		ManifestRotated: func(i ManifestRotationInfo) { l.add("rotated", func() { l.rots = append(l.rots, i) }) },
		RecoveryRepair:  func(i RepairInfo) { l.add("repair:"+string(i.Kind), func() { l.reps = append(l.reps, i) }) },
		IndexRebuilt:    func(i IndexRebuildInfo) { l.add("index-rebuilt", func() { l.ixs = append(l.ixs, i) }) },
		BackgroundError: func(i BackgroundErrorInfo) {
			l.add("background-error:"+i.Op, func() { l.bgs = append(l.bgs, i) })
			select {
			case l.bg <- i:
			default:
			}
		},
		StoreFailed: func(i StoreFailedInfo) { l.add("store-failed", func() { l.fails = append(l.fails, i) }) },
	}
}

// only returns the recorded names that start with one of the prefixes:
// background work this test did not ask for (a spare, a tidy) stays out.
func (l *eventLog) only(prefixes ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.names {
		for _, p := range prefixes {
			if strings.HasPrefix(n, p) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

func noMerge() MergeOptions { return MergeOptions{Disable: true} }

func putN(t *testing.T, s *Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, s.Put(fmt.Appendf(nil, "%s%04d", prefix, i), bytes.Repeat([]byte{'v'}, 100)))
	}
}

func segmentByID(t *testing.T, s *Store, id uint64) SegmentInfo {
	t.Helper()
	for _, sg := range s.Segments() {
		if sg.ID == id {
			return sg
		}
	}
	t.Fatalf("no segment %d", id)
	return SegmentInfo{}
}

func TestEventsSeal(t *testing.T) {
	var ev eventLog
	s, err := Open(t.TempDir(), &Options{FS: vfs.NewMem(), Merge: noMerge(), Events: ev.listener()})
	require.NoError(t, err)
	defer s.Close()
	putN(t, s, "k", 20)
	before := s.Metrics()
	require.NoError(t, s.Seal())
	require.NoError(t, s.Seal()) // empty: no events
	after := s.Metrics()

	require.Equal(t, []string{"seal-begin", "seal-end"}, ev.only("seal"))
	begin, end := ev.seals[0], ev.seals[1]
	require.Equal(t, begin.ID, end.ID)
	require.Equal(t, uint64(20), begin.Records)
	require.NoError(t, end.Err)
	sg := segmentByID(t, s, end.ID)
	require.Equal(t, sg.Size, end.Bytes, "a seal's bytes are the segment's DataLength")
	require.Equal(t, before.LiveBytes, end.Bytes)
	require.Equal(t, sg.Records, end.Records)
	require.Positive(t, end.Duration)
	require.Equal(t, end.Bytes, after.SealedBytes-before.SealedBytes)
	require.Equal(t, int64(1), after.Seals-before.Seals)
	require.Equal(t, int64(1), after.ManifestCommits.Count-before.ManifestCommits.Count, "one manifest commit per seal")
}

func TestEventsMergeMatchMetrics(t *testing.T) {
	var ev eventLog
	s, err := Open(t.TempDir(), &Options{FS: vfs.NewMem(), Merge: noMerge(), Events: ev.listener()})
	require.NoError(t, err)
	defer s.Close()
	var ids []uint64
	for i := range 3 {
		putN(t, s, fmt.Sprintf("m%d-", i), 30)
		putN(t, s, "shared", 10) // overwritten by every round: the merge drops the old versions
		require.NoError(t, s.Seal())
	}
	for _, sg := range s.Segments() {
		ids = append(ids, sg.ID)
	}
	before := s.Metrics()
	require.NoError(t, s.Compact(context.Background()))
	after := s.Metrics()

	names := ev.only("merge")
	require.NotEmpty(t, names)
	var in, out int64
	var outputs []uint64
	for i := 0; i < len(names); i += 2 {
		require.Equal(t, "merge-begin", names[i])
		require.Equal(t, "merge-end", names[i+1])
		b, e := ev.merges[i], ev.merges[i+1]
		require.Equal(t, b.Inputs, e.Inputs)
		require.Equal(t, b.BytesIn, e.BytesIn)
		require.NoError(t, e.Err)
		require.NotZero(t, e.Output)
		require.Positive(t, e.BytesOut)
		in += e.BytesIn
		out += e.BytesOut
		outputs = append(outputs, e.Output)
	}
	// The first step's inputs are segments the test sealed.
	require.Subset(t, ids, ev.merges[0].Inputs)
	require.Equal(t, after.MergedBytesIn-before.MergedBytesIn, in)
	require.Equal(t, after.MergedBytesOut-before.MergedBytesOut, out)
	require.Equal(t, int64(len(outputs)), after.Merges-before.Merges)
	// The last output is what is left.
	segs := s.Segments()
	require.Len(t, segs, 1)
	require.Equal(t, outputs[len(outputs)-1], segs[0].ID)
	require.Equal(t, segs[0].Size, ev.merges[len(ev.merges)-1].BytesOut)
}

func TestEventsImport(t *testing.T) {
	src, err := Open(t.TempDir(), &Options{FS: vfs.NewMem(), Merge: noMerge()})
	require.NoError(t, err)
	defer src.Close()
	putN(t, src, "i", 25)
	stream := exportNewest(t, src)

	var ev eventLog
	s, err := Open(t.TempDir(), &Options{FS: vfs.NewMem(), Merge: noMerge(), Events: ev.listener()})
	require.NoError(t, err)
	defer s.Close()
	before := s.Metrics()
	infos, err := s.Import(context.Background(), bytes.NewReader(stream))
	require.NoError(t, err)
	_, err = s.Import(context.Background(), bytes.NewReader(stream[:len(stream)-5]))
	require.Error(t, err)
	after := s.Metrics()

	require.Equal(t, []string{"import-begin", "import-end", "import-begin", "import-end"}, ev.only("import"))
	require.Equal(t, 1, ev.imps[0].Streams)
	ok := ev.imps[1]
	require.NoError(t, ok.Err)
	require.Equal(t, []uint64{infos[0].ID}, ok.Segments)
	require.Equal(t, int64(len(stream)), ok.Bytes)
	require.Equal(t, infos[0].Size, ok.Bytes)
	bad := ev.imps[3]
	require.Error(t, bad.Err)
	require.ErrorIs(t, bad.Err, ErrCorrupt)
	require.Empty(t, bad.Segments)
	require.Equal(t, int64(1), after.Imports-before.Imports)
	require.Equal(t, ok.Bytes, after.ImportedBytes-before.ImportedBytes)
	require.Equal(t, int64(1), after.Imported-before.Imported)
}

func TestEventsManifestRotation(t *testing.T) {
	var ev eventLog
	s, err := Open(t.TempDir(), &Options{FS: vfs.NewMem(), Merge: noMerge(), Events: ev.listener()})
	require.NoError(t, err)
	defer s.Close()
	putN(t, s, "r", 5)
	require.NoError(t, s.Seal())
	gen := s.mlog.Stats().Generation
	require.NoError(t, s.mlog.Checkpoint())
	st := s.mlog.Stats()
	require.Equal(t, []string{"rotated"}, ev.only("rotated"))
	r := ev.rots[0]
	require.Equal(t, gen+1, r.Generation)
	require.Equal(t, st.Generation, r.Generation)
	require.Equal(t, st.CheckpointBytes, r.CheckpointBytes)
	require.Equal(t, s.ManifestSeq(), r.Seq)
	m := s.Metrics()
	require.Equal(t, st.CheckpointBytes+st.BytesSinceCheckpoint, m.ManifestBytes)
}

// TestEventsRecoveryRepairs damages a closed store (a torn live file tail,
// a lost index file) and checks that Open reports each repair with its
// figures, and the index rebuild, before it returns.
func TestEventsRecoveryRepairs(t *testing.T) {
	mem := vfs.NewMem()
	dir := "/db"
	s, err := Open(dir, &Options{FS: mem, Merge: noMerge()})
	require.NoError(t, err)
	putN(t, s, "a", 10)
	require.NoError(t, s.Seal())
	segID := s.Segments()[0].ID
	putN(t, s, "b", 3)
	live := s.mu.tail.path
	require.NoError(t, s.Close())

	// The live file's last frame loses its last 3 bytes; the index goes.
	b, err := mem.ReadFile(live)
	require.NoError(t, err)
	require.NoError(t, mem.WriteFile(live, b[:len(b)-3]))
	ixPath := filepath.Join(dir, segment.IndexName(segID))
	require.NoError(t, mem.Remove(ixPath))

	var ev eventLog
	s, err = Open(dir, &Options{FS: mem, Merge: noMerge(), Events: ev.listener()})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, []string{"repair:torn-tail", "repair:rebuilt-index", "index-rebuilt"}, ev.only("repair", "index"))
	torn := ev.reps[0]
	require.Equal(t, live, torn.Path)
	require.Equal(t, int64(len(b)-3)-torn.Offset, torn.Bytes, "bytes dropped: the cut frame's remains")
	require.Positive(t, torn.Bytes)
	require.Equal(t, ixPath, ev.reps[1].Path)
	require.NotEmpty(t, ev.reps[1].Detail)
	require.Equal(t, IndexRebuildInfo{SegmentID: segID, Path: ixPath, Reason: ev.reps[1].Detail}, ev.ixs[0])
	require.Equal(t, int64(1), s.Metrics().IndexRebuilds)
	// The torn write is gone, the rest is there.
	_, err = s.Get([]byte("b0002"))
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Get([]byte("b0001"))
	require.NoError(t, err)
}

// TestEventsStoreFailedOnce fails the live file's fdatasync: the write
// returns ErrFailed, StoreFailed fires once with the injected cause, and
// later failures do not fire it again.
func TestEventsStoreFailedOnce(t *testing.T) {
	fsys := vfs.NewFaulty(vfs.NewMem())
	var ev eventLog
	s, err := Open("/db", &Options{FS: fsys, Merge: noMerge(), Events: ev.listener()})
	require.NoError(t, err)
	require.NoError(t, s.Put([]byte("a"), []byte("1")))
	require.NoError(t, fsys.Inject(vfs.Fault{Op: vfs.OpFileSync, Nth: 1, Persistent: true,
		Match: func(p string) bool { return strings.HasSuffix(p, ".log") }}))
	err = s.Put([]byte("b"), []byte("2"))
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, s.Put([]byte("c"), []byte("3")), ErrFailed)
	require.ErrorIs(t, s.Sync(), ErrFailed)
	require.True(t, s.Metrics().Failed)
	s.fail(errors.New("a later failure")) // as a second failing path would: no second event
	closeErr := s.Close()
	require.ErrorIs(t, closeErr, ErrFailed)

	require.Equal(t, []string{"store-failed"}, ev.only("store-failed"))
	require.ErrorIs(t, ev.fails[0].Err, vfs.ErrInjected)
	require.False(t, errors.Is(ev.fails[0].Err, ErrFailed), "the cause, not the state")
}

// TestEventsBackgroundMergeError fails the build of every merge output: the
// background merge reports it as a BackgroundError, after its MergeEnd.
func TestEventsBackgroundMergeError(t *testing.T) {
	injected := errors.New("injected build failure")
	var ev eventLog
	o := &Options{FS: vfs.NewMem(), Merge: MergeOptions{MinRun: 2}, Events: ev.listener()}
	s, err := open("/db", o, testHooks{beforeBuild: func(p string) error {
		if strings.HasSuffix(p, ".seg") {
			return injected
		}
		return nil
	}})
	require.NoError(t, err)
	defer s.Close()
	for i := range 2 {
		putN(t, s, fmt.Sprintf("g%d-", i), 10)
		require.NoError(t, s.Seal())
	}
	got := <-ev.bg // the merge the second seal requested
	require.Equal(t, "merge", got.Op)
	require.ErrorIs(t, got.Err, injected)
	names := ev.only("merge", "background")
	require.Equal(t, []string{"merge-begin", "merge-end", "background-error:merge"}, names[:3])
	ev.mu.Lock()
	require.ErrorIs(t, ev.merges[1].Err, injected)
	require.Zero(t, ev.merges[1].Output)
	ev.mu.Unlock()
	require.GreaterOrEqual(t, s.Metrics().BackgroundErrors, int64(1))
	require.False(t, s.Metrics().Failed, "a failed merge step does not fail the store")
}

func TestMetricsReadsAndWrites(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{FS: vfs.NewMem(), Merge: noMerge()})
	require.NoError(t, err)
	defer s.Close()
	const n = 10
	putN(t, s, "w", n)
	m := s.Metrics()
	require.Equal(t, int64(n), m.Writes)
	// One frame per Put (one writer, SyncAlways): the live file holds the
	// header, n frame headers and the bytes WriteBytes counted.
	require.Equal(t, m.LiveBytes, int64(segment.HeaderSize)+n*int64(wal.HeaderSize)+m.WriteBytes)
	require.GreaterOrEqual(t, m.DataSyncs.Count, int64(n), "every durable Put waited for an fdatasync")
	require.NoError(t, s.Seal())

	_, err = s.Get([]byte("w0001")) // in the sealed segment
	require.NoError(t, err)
	_, err = s.Get([]byte("absent"))
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Get(make([]byte, DefaultMaxKeySize+1))
	require.ErrorIs(t, err, ErrKeyTooLarge)
	require.NoError(t, s.Put([]byte("live"), []byte("x")))
	_, err = s.Get([]byte("live")) // in the live file
	require.NoError(t, err)
	snap, err := s.NewSnapshot()
	require.NoError(t, err)
	_, err = snap.Get([]byte("absent2"))
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, snap.Close())

	m = s.Metrics()
	require.Equal(t, int64(2), m.GetHits)
	require.Equal(t, int64(2), m.GetMisses)
	require.Equal(t, int64(5), m.Gets, "hits, misses and the failed Get")
	// "absent" and "absent2" are each ruled out by the one segment's bloom
	// filter (10 keys: no false positive for these two).
	require.Equal(t, int64(2), m.BloomNegatives)
	// Two records read: a 5-byte key with a 100-byte value, and "live"/"x".
	require.Greater(t, m.ReadBytes, int64(5+100+4+1))
	require.Less(t, m.ReadBytes, int64(2*(5+100+64)))
}

func TestMetricsDisk(t *testing.T) {
	mem := vfs.NewMem()
	s, err := Open("/db", &Options{FS: mem, Merge: noMerge()})
	require.NoError(t, err)
	defer s.Close()
	for i := range 3 {
		putN(t, s, fmt.Sprintf("d%d-", i), 50)
		require.NoError(t, s.Seal())
	}
	s.bg.runTidy() // the index files are written off the seal's path
	m := s.Metrics()
	require.Equal(t, 3, m.Segments)
	var idxBytes, segBytes int64
	names, err := mem.List("/db")
	require.NoError(t, err)
	for _, name := range names {
		size, err := mem.Stat(filepath.Join("/db", name))
		require.NoError(t, err)
		if strings.HasSuffix(name, ".idx") {
			idxBytes += size
		}
	}
	for _, sg := range s.Segments() {
		segBytes += sg.Size
	}
	require.Positive(t, idxBytes)
	require.Equal(t, idxBytes, m.IndexBytes, "IndexBytes is the size of the index files")
	require.Equal(t, segBytes, m.SegmentBytes)
	require.Equal(t, m.SegmentBytes+m.IndexBytes+m.ManifestBytes+m.LiveBytes, m.DiskBytes)
	require.GreaterOrEqual(t, m.Files, 1+2*3+1)
	require.Positive(t, m.ManifestBytes)
}

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	require.Equal(t, 8*time.Microsecond, h.UpperBound(0))
	require.Equal(t, 16*time.Microsecond, h.UpperBound(1))
	for i := range HistogramBuckets - 1 {
		ub := h.UpperBound(i)
		require.Equal(t, i, bucketOf(ub), "bound %v is in its own bucket", ub)
		require.Equal(t, i+1, bucketOf(ub+1), "just above %v is in the next", ub)
	}
	require.Equal(t, 0, bucketOf(0))
	require.Equal(t, HistogramBuckets-1, bucketOf(time.Hour))

	var hh histogram
	for _, d := range []time.Duration{time.Microsecond, 10 * time.Microsecond, 10 * time.Microsecond, time.Minute} {
		hh.observe(d)
	}
	got := hh.snapshot()
	require.Equal(t, int64(4), got.Count)
	require.Equal(t, time.Microsecond+20*time.Microsecond+time.Minute, got.Sum)
	require.Equal(t, int64(1), got.Buckets[0])
	require.Equal(t, int64(2), got.Buckets[1])
	require.Equal(t, int64(1), got.Buckets[HistogramBuckets-1])
}

// recordHandler keeps every log record, with its attributes.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// find returns the attributes of the first record with msg at level.
func (h *recordHandler) find(t *testing.T, level slog.Level, msg string) map[string]slog.Value {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message == msg && r.Level == level {
			attrs := map[string]slog.Value{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
			return attrs
		}
	}
	t.Fatalf("no %v record %q", level, msg)
	return nil
}

// TestLoggerLifecycle checks the INFO lines Options.Logger promises, with
// their figures as typed attributes.
func TestLoggerLifecycle(t *testing.T) {
	h := &recordHandler{}
	mem := vfs.NewMem()
	s, err := Open("/db", &Options{FS: mem, Merge: noMerge(), Logger: slog.New(h)})
	require.NoError(t, err)
	open := h.find(t, slog.LevelInfo, "segkv: opened store")
	require.Equal(t, "/db", open["dir"].String())
	require.Equal(t, int64(0), open["segments"].Int64())
	for i := range 2 {
		putN(t, s, fmt.Sprintf("l%d-", i), 10)
		require.NoError(t, s.Seal())
	}
	seal := h.find(t, slog.LevelInfo, "segkv: sealed segment")
	require.Equal(t, slog.KindUint64, seal["id"].Kind())
	require.Equal(t, segmentByID(t, s, seal["id"].Uint64()).Size, seal["bytes"].Int64())
	require.Equal(t, uint64(10), seal["records"].Uint64())
	require.NoError(t, s.Compact(context.Background()))
	merge := h.find(t, slog.LevelInfo, "segkv: merged segments")
	require.Equal(t, s.Segments()[0].ID, merge["output"].Uint64())
	require.Equal(t, s.Metrics().MergedBytesIn, merge["bytes_in"].Int64())
	require.NoError(t, s.mlog.Checkpoint())
	h.find(t, slog.LevelInfo, "segkv: manifest log rotated")
	_, err = s.Import(context.Background())
	require.NoError(t, err)
	require.NoError(t, s.Close())
	closed := h.find(t, slog.LevelInfo, "segkv: closed store")
	require.Equal(t, "/db", closed["dir"].String())

	s, err = Open("/db", &Options{FS: mem, Logger: slog.New(h)})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	h.mu.Lock()
	defer h.mu.Unlock()
	var opens int
	for _, r := range h.recs {
		if r.Message == "segkv: opened store" {
			opens++
		}
	}
	require.Equal(t, 2, opens)
}
