package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/vfs"
)

// The model-based test of DeleteRange: a rapid state machine over a small
// key alphabet (so that ranges cover, start at, end at and fall between
// keys), whose actions are puts, deletes, range deletes (empty, from the
// first key, and invalid ones that must change nothing), batches mixing the
// three, seals, Compact, Close and reopen, and snapshots kept open across
// all of it. After every action, point reads and iterators of the store and
// of every open snapshot are compared with the model.

// rdKeys are the keys the machine writes: "" and keys that are prefixes of
// one another, so that range ends fall right on and right next to them.
var rdKeys = []string{"", "a", "a\x00", "ab", "abc", "b", "ba", "bb", "c", "c\xff", "d", "da", "e"}

// rdBounds are the range ends and iterator bounds: the keys and strings
// between and around them.
var rdBounds = append(slices.Clone(rdKeys), "a\x00\x00", "aa", "b\x00", "bz", "cz", "f", "\xff")

// rdMaxKey is the stores' MaxKeySize: long enough for every key above,
// short enough that an oversized range end is cheap to make.
const rdMaxKey = 8

// rdOptions are the options of the machine's store. With background, the
// live file seals itself every 4 KiB and the background merges any two
// similar segments (MinRun 2), both at moments the machine does not choose;
// without, merges are off and a run seldom writes the 64 KiB that seals a
// live file, so that only the machine's Seal and Compact actions seal and
// merge, a failing run replays exactly and rapid can shrink it.
func rdOptions(fsys vfs.FS, background bool) *Options {
	if !background {
		return &Options{FS: fsys, SegmentSize: 64 << 10, MaxKeySize: rdMaxKey, Merge: MergeOptions{Disable: true}}
	}
	return &Options{
		FS: fsys, SegmentSize: 4 << 10, MaxKeySize: rdMaxKey,
		Merge: MergeOptions{MinRun: 2, SizeRatio: 8},
	}
}

// deleteRange applies a range deletion to the model: every key in
// [start, end). The caller has checked start <= end.
func (m model) deleteRange(start, end string) {
	for k := range m {
		if start <= k && k < end {
			delete(m, k)
		}
	}
}

type rdSnap struct {
	sn *Snapshot
	m  model // the model when the snapshot was taken
}

type rdMachine struct {
	opts  *Options
	s     *Store
	m     model
	snaps []rdSnap
	n     int // values written, to make each one distinct
	pad   int // values are padded with 0 to this many bytes

	rangeDels, emptyRanges, invalidRanges, tooLarge, seals, compacts, reopens int
	// From the stores' metrics: every seal (the size threshold's too) and
	// every merge step, and those of Compact alone.
	allSeals, merges, compactMerges int64
	// Segments dropped whole because a newer range tombstone covers them.
	rangeDropped int64
}

// closeStore closes the store and counts its seals and merges.
func (rm *rdMachine) closeStore() error {
	m := rm.s.Metrics()
	rm.allSeals += m.Seals
	rm.merges += m.Merges
	rm.rangeDropped += m.RangeDropped
	return rm.s.Close()
}

func (rm *rdMachine) add(o *rdMachine) {
	rm.rangeDels += o.rangeDels
	rm.emptyRanges += o.emptyRanges
	rm.invalidRanges += o.invalidRanges
	rm.tooLarge += o.tooLarge
	rm.seals += o.seals
	rm.compacts += o.compacts
	rm.reopens += o.reopens
	rm.allSeals += o.allSeals
	rm.merges += o.merges
	rm.compactMerges += o.compactMerges
	rm.rangeDropped += o.rangeDropped
}

func (rm *rdMachine) logTotals(t *testing.T) {
	t.Logf("range deletes: %d (+%d empty, %d invalid, %d too large); Seal %d, Compact %d, reopens %d; seals in all %d, merge steps %d (%d by Compact), segments dropped under a range tombstone %d",
		rm.rangeDels, rm.emptyRanges, rm.invalidRanges, rm.tooLarge, rm.seals, rm.compacts, rm.reopens, rm.allSeals, rm.merges, rm.compactMerges, rm.rangeDropped)
}

// prefill puts a few keys, sealing now and then, so that the first range
// deletions already have keys in sealed segments and in the live file to
// delete.
func (rm *rdMachine) prefill(rt *rapid.T) {
	for i, n := 0, rapid.IntRange(0, 16).Draw(rt, "prefill"); i < n; i++ {
		rm.Put(rt)
		if rapid.IntRange(0, 4).Draw(rt, "prefill seal") == 4 {
			rm.Seal(rt)
		}
	}
}

func (rm *rdMachine) value(k string) string {
	rm.n++
	pad := rm.n * 7919 % (rm.pad + 1) // sizes vary without a draw to shrink
	return fmt.Sprintf("%q#%d-%s", k, rm.n, strings.Repeat("v", pad))
}

// rdRange is one drawn range deletion and what the store must answer.
type rdRange struct {
	start, end []byte
	want       error // nil, ErrInvalidRange or ErrKeyTooLarge
}

func drawRange(rt *rapid.T) rdRange {
	a := []byte(rapid.SampledFrom(rdBounds).Draw(rt, "range a"))
	b := []byte(rapid.SampledFrom(rdBounds).Draw(rt, "range b"))
	if bytes.Compare(a, b) > 0 {
		a, b = b, a
	}
	// rapid favours small numbers: the plain range comes first.
	switch rapid.IntRange(0, 15).Draw(rt, "range kind") {
	case 9, 10:
		return rdRange{start: a, end: a} // empty: a no-op
	case 11, 12:
		return rdRange{start: nil, end: b} // from the first key
	case 13:
		return rdRange{start: []byte{}, end: b}
	case 14:
		if !bytes.Equal(a, b) {
			return rdRange{start: b, end: a, want: ErrInvalidRange}
		}
		return rdRange{start: []byte("b"), end: []byte("a"), want: ErrInvalidRange}
	case 15:
		long := bytes.Repeat([]byte("z"), rdMaxKey+1)
		if rapid.Bool().Draw(rt, "long end") {
			return rdRange{start: a, end: long, want: ErrKeyTooLarge}
		}
		// A long start that still sorts before the end.
		return rdRange{start: bytes.Repeat([]byte("a"), rdMaxKey+1), end: []byte("b"), want: ErrKeyTooLarge}
	}
	return rdRange{start: a, end: b}
}

func (rm *rdMachine) countRange(r rdRange) {
	switch {
	case errors.Is(r.want, ErrInvalidRange):
		rm.invalidRanges++
	case errors.Is(r.want, ErrKeyTooLarge):
		rm.tooLarge++
	case bytes.Equal(r.start, r.end):
		rm.emptyRanges++
	default:
		rm.rangeDels++
	}
}

func (rm *rdMachine) Put(rt *rapid.T) {
	k := rapid.SampledFrom(rdKeys).Draw(rt, "key")
	v := rm.value(k)
	require.NoError(rt, rm.s.Put([]byte(k), []byte(v)))
	rm.m[k] = v
}

func (rm *rdMachine) Delete(rt *rapid.T) {
	k := rapid.SampledFrom(rdKeys).Draw(rt, "key")
	require.NoError(rt, rm.s.Delete([]byte(k)))
	delete(rm.m, k)
}

func (rm *rdMachine) DeleteRange(rt *rapid.T) {
	r := drawRange(rt)
	rm.countRange(r)
	err := rm.s.DeleteRange(r.start, r.end)
	if r.want != nil {
		require.ErrorIs(rt, err, r.want, "DeleteRange(%q, %q)", r.start, r.end)
		return // and the checks after the action see no change
	}
	require.NoError(rt, err, "DeleteRange(%q, %q)", r.start, r.end)
	rm.m.deleteRange(string(r.start), string(r.end))
}

// Batch applies a batch of puts, deletes and range deletes, in order. One
// batch in sixteen holds an invalid range: the batch must then refuse it,
// Apply must fail, and nothing of the batch may be visible.
func (rm *rdMachine) Batch(rt *rapid.T) {
	b := rm.s.NewBatch()
	next := rm.m.clone()
	var failed error
	n := rapid.IntRange(1, 6).Draw(rt, "batch ops")
	for i := 0; i < n; i++ {
		switch rapid.IntRange(0, 3).Draw(rt, "batch op") {
		case 0, 1:
			k := rapid.SampledFrom(rdKeys).Draw(rt, "key")
			v := rm.value(k)
			err := b.Put([]byte(k), []byte(v))
			if failed != nil {
				require.ErrorIs(rt, err, failed, "a batch that refused an operation keeps refusing")
				continue
			}
			require.NoError(rt, err)
			next[k] = v
		case 2:
			k := rapid.SampledFrom(rdKeys).Draw(rt, "key")
			err := b.Delete([]byte(k))
			if failed != nil {
				require.ErrorIs(rt, err, failed, "a batch that refused an operation keeps refusing")
				continue
			}
			require.NoError(rt, err)
			delete(next, k)
		case 3:
			r := drawRange(rt)
			rm.countRange(r)
			err := b.DeleteRange(r.start, r.end)
			if failed != nil {
				require.ErrorIs(rt, err, failed, "a batch that refused an operation keeps refusing")
				continue
			}
			if r.want != nil {
				require.ErrorIs(rt, err, r.want, "Batch.DeleteRange(%q, %q)", r.start, r.end)
				failed = r.want
				continue
			}
			require.NoError(rt, err, "Batch.DeleteRange(%q, %q)", r.start, r.end)
			next.deleteRange(string(r.start), string(r.end))
		}
	}
	err := rm.s.Apply(b)
	if failed != nil {
		require.ErrorIs(rt, err, failed, "Apply of a batch that refused an operation")
		return
	}
	require.NoError(rt, err)
	rm.m = next
}

func (rm *rdMachine) Seal(rt *rapid.T) {
	require.NoError(rt, rm.s.Seal())
	rm.seals++
}

func (rm *rdMachine) Compact(rt *rapid.T) {
	before := rm.s.Metrics().Merges
	require.NoError(rt, rm.s.Compact(context.Background()))
	rm.compactMerges += rm.s.Metrics().Merges - before // a background step may count too
	rm.compacts++
}

// Reopen closes every snapshot (their model goes with them) and the store,
// and opens the store again on the same file system.
func (rm *rdMachine) Reopen(rt *rapid.T) {
	for _, sn := range rm.snaps {
		require.NoError(rt, sn.sn.Close())
	}
	rm.snaps = nil
	require.NoError(rt, rm.s.Check())
	require.NoError(rt, rm.closeStore())
	s, err := Open("/db", rm.opts)
	require.NoError(rt, err)
	rm.s = s
	rm.reopens++
}

func (rm *rdMachine) NewSnapshot(rt *rapid.T) {
	if len(rm.snaps) >= 4 {
		rt.Skip("enough snapshots open")
	}
	sn, err := rm.s.NewSnapshot()
	require.NoError(rt, err)
	rm.snaps = append(rm.snaps, rdSnap{sn: sn, m: rm.m.clone()})
}

func (rm *rdMachine) CloseSnapshot(rt *rapid.T) {
	if len(rm.snaps) == 0 {
		rt.Skip("no snapshot open")
	}
	i := rapid.IntRange(0, len(rm.snaps)-1).Draw(rt, "snapshot")
	sn := rm.snaps[i].sn
	require.NoError(rt, sn.Close())
	_, err := sn.Get([]byte("a"))
	require.ErrorIs(rt, err, ErrClosed)
	rm.snaps = slices.Delete(rm.snaps, i, i+1)
}

// check compares the store and every open snapshot with their models, and
// runs the store's own consistency check.
func (rm *rdMachine) check(rt *rapid.T) {
	require.NoError(rt, rm.s.Check())
	for i := 0; i < 4; i++ {
		k := rapid.SampledFrom(rdBounds).Draw(rt, "get")
		rdCheckGet(rt, "store", rm.s.Get, rm.m, k)
		for j, sn := range rm.snaps {
			rdCheckGet(rt, fmt.Sprintf("snapshot %d", j), sn.sn.Get, sn.m, k)
		}
	}
	opts := drawIterOptions(rt)
	it, err := rm.s.NewIterator(&opts)
	require.NoError(rt, err)
	rdCheckIterator(rt, "store", it, rm.m, opts)
	require.NoError(rt, it.Close())
	if len(rm.snaps) > 0 {
		i := rapid.IntRange(0, len(rm.snaps)-1).Draw(rt, "iterated snapshot")
		opts := drawIterOptions(rt)
		it, err := rm.snaps[i].sn.NewIterator(&opts)
		require.NoError(rt, err)
		rdCheckIterator(rt, fmt.Sprintf("snapshot %d", i), it, rm.snaps[i].m, opts)
		require.NoError(rt, it.Close())
	}
}

func rdCheckGet(rt *rapid.T, who string, get func([]byte) ([]byte, error), m model, k string) {
	v, err := get([]byte(k))
	if want, ok := m[k]; ok {
		require.NoError(rt, err, "%s: Get(%q)", who, k)
		require.Equal(rt, want, string(v), "%s: Get(%q)", who, k)
	} else {
		require.ErrorIs(rt, err, ErrNotFound, "%s: Get(%q) = %.20q, want absent", who, k, v)
	}
}

func drawIterOptions(rt *rapid.T) IterOptions {
	var opts IterOptions
	switch rapid.IntRange(0, 3).Draw(rt, "bounds") {
	case 1, 2:
		if rapid.Bool().Draw(rt, "has lower") {
			opts.LowerBound = []byte(rapid.SampledFrom(rdBounds).Draw(rt, "lower"))
		}
		if rapid.Bool().Draw(rt, "has upper") {
			opts.UpperBound = []byte(rapid.SampledFrom(rdBounds).Draw(rt, "upper"))
		}
	case 3:
		opts.Prefix = []byte(rapid.SampledFrom([]string{"a", "ab", "b", "c\xff", "z"}).Draw(rt, "prefix"))
	}
	return opts
}

// fmtOpts shows iterator bounds readably in failure messages.
func fmtOpts(o IterOptions) string {
	show := func(b []byte) string {
		if b == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("{lower %s, upper %s, prefix %s}", show(o.LowerBound), show(o.UpperBound), show(o.Prefix))
}

// visibleKeys returns the keys of m that opts admits, ascending.
func visibleKeys(m model, opts IterOptions) []string {
	var want []string
	for k := range m {
		if opts.LowerBound != nil && k < string(opts.LowerBound) ||
			opts.UpperBound != nil && k >= string(opts.UpperBound) ||
			!strings.HasPrefix(k, string(opts.Prefix)) {
			continue
		}
		want = append(want, k)
	}
	slices.Sort(want)
	return want
}

// rdCheckIterator requires a full forward scan and a full reverse scan of
// it to be exactly the model within opts, then moves it at random (as
// TestIteratorMatchesModel does) and checks every position.
func rdCheckIterator(rt *rapid.T, who string, it *Iterator, m model, opts IterOptions) {
	want := visibleKeys(m, opts)
	var fwd, back []string
	for ok := it.First(); ok; ok = it.Next() {
		fwd = append(fwd, string(it.Key()))
		v, err := it.Value()
		require.NoError(rt, err)
		require.Equal(rt, m[string(it.Key())], string(v), "%s: value of %q in a forward scan", who, it.Key())
	}
	require.NoError(rt, it.Err())
	require.Equal(rt, want, fwd, "%s: forward scan with %s", who, fmtOpts(opts))
	for ok := it.Last(); ok; ok = it.Prev() {
		back = append(back, string(it.Key()))
	}
	require.NoError(rt, it.Err())
	slices.Reverse(back)
	require.Equal(rt, want, back, "%s: reverse scan with %s", who, fmtOpts(opts))

	pos := -1 // index into want, or -1 when the iterator is not valid
	for i, n := 0, rapid.IntRange(0, 12).Draw(rt, "moves"); i < n; i++ {
		var ok bool
		var what string
		switch move := rapid.IntRange(0, 5).Draw(rt, "move"); move {
		case 0:
			ok, what = it.First(), "First"
			pos = 0
		case 1:
			ok, what = it.Last(), "Last"
			pos = len(want) - 1
		case 2:
			target := rapid.SampledFrom(rdBounds).Draw(rt, "seek")
			ok, what = it.Seek([]byte(target)), fmt.Sprintf("Seek(%q)", target)
			pos, _ = slices.BinarySearch(want, target)
		case 3:
			target := rapid.SampledFrom(rdBounds).Draw(rt, "seeklt")
			ok, what = it.SeekLT([]byte(target)), fmt.Sprintf("SeekLT(%q)", target)
			pos, _ = slices.BinarySearch(want, target)
			pos--
		case 4:
			wasValid := pos >= 0 && pos < len(want)
			ok, what = it.Next(), "Next"
			if wasValid {
				pos++
			}
		case 5:
			wasValid := pos >= 0 && pos < len(want)
			ok, what = it.Prev(), "Prev"
			if wasValid {
				pos--
			}
		}
		if pos < 0 || pos >= len(want) {
			pos = -1
		}
		require.Equal(rt, pos >= 0, ok, "%s: move %d %s valid (want %q, %s)", who, i, what, want, fmtOpts(opts))
		require.Equal(rt, ok, it.Valid())
		if !ok {
			continue
		}
		require.Equal(rt, want[pos], string(it.Key()), "%s: move %d %s", who, i, what)
		v, err := it.Value()
		require.NoError(rt, err)
		require.Equal(rt, m[want[pos]], string(v), "%s: move %d %s: value", who, i, what)
	}
	require.NoError(rt, it.Err())
}

// TestRangeDelMatchesModel runs the state machine with seals and merges
// only where it asks for them, so that a failure shrinks to a short,
// replayable sequence of actions.
func TestRangeDelMatchesModel(t *testing.T) {
	runRangeDelMachine(t, false)
}

// TestRangeDelMatchesModelBackground runs the state machine with seals at
// the size threshold and background merges on top of its own: they fold
// range tombstones, drop segments under them and retire files that open
// snapshots still read, at moments nothing in the run controls (so a
// failure may not replay exactly; rapid then reports it as flaky).
func TestRangeDelMatchesModelBackground(t *testing.T) {
	runRangeDelMachine(t, true)
}

func runRangeDelMachine(t *testing.T, background bool) {
	var total rdMachine
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMem()
		rm := &rdMachine{opts: rdOptions(mem, background), m: model{}, pad: 300}
		s, err := Open("/db", rm.opts)
		require.NoError(rt, err)
		rm.s = s
		closed := false
		defer func() {
			// On failure too: release what the run holds.
			for _, sn := range rm.snaps {
				sn.sn.Close()
			}
			if !closed {
				rm.s.Close()
			}
		}()
		rm.prefill(rt)
		// Duplicated names weigh the draw towards writes.
		actions := map[string]func(*rapid.T){
			"Put":           rm.Put,
			"Put2":          rm.Put,
			"Put3":          rm.Put,
			"Delete":        rm.Delete,
			"DeleteRange":   rm.DeleteRange,
			"DeleteRange2":  rm.DeleteRange,
			"Batch":         rm.Batch,
			"Batch2":        rm.Batch,
			"Seal":          rm.Seal,
			"Compact":       rm.Compact,
			"Reopen":        rm.Reopen,
			"NewSnapshot":   rm.NewSnapshot,
			"CloseSnapshot": rm.CloseSnapshot,
			"":              rm.check,
		}
		// Three rounds of Repeat's default (about 30 actions each) on the
		// same store, so that segments and snapshots pile up.
		for range 3 {
			rt.Repeat(actions)
		}
		require.NoError(rt, rm.s.Check())
		for _, sn := range rm.snaps {
			require.NoError(rt, sn.sn.Close())
		}
		rm.snaps = nil
		closed = true
		require.NoError(rt, rm.closeStore())
		total.add(rm)
	})
	total.logTotals(t)
}

// TestRangeDelMergesAndSeals drives the same machine's actions without
// Reopen or snapshots but with many more writes (and larger values) per
// run, so that seals (explicit and at the size threshold) and background
// merges (MinRun 2) fold range deletions into merged segments while writes
// go on; Compact then merges the rest, and a reopen must read the same.
func TestRangeDelMergesAndSeals(t *testing.T) {
	var total rdMachine
	rapid.Check(t, func(rt *rapid.T) {
		mem := vfs.NewMem()
		// Larger values: a 4 KiB live file fills every dozen writes.
		rm := &rdMachine{opts: rdOptions(mem, true), m: model{}, pad: 1000}
		s, err := Open("/db", rm.opts)
		require.NoError(rt, err)
		rm.s = s
		closed := false
		defer func() {
			if !closed {
				rm.s.Close()
			}
		}()
		for i, n := 0, rapid.IntRange(20, 200).Draw(rt, "steps"); i < n; i++ {
			switch rapid.IntRange(0, 19).Draw(rt, "action") {
			case 0, 1, 2, 3, 4, 5:
				rm.Put(rt)
			case 6, 7:
				rm.Seal(rt)
			case 8, 9:
				rm.Delete(rt)
			case 10, 11, 12, 13:
				rm.DeleteRange(rt)
			case 14, 15, 16, 17, 18:
				rm.Batch(rt)
			case 19:
				rm.Compact(rt)
			}
		}
		rm.check(rt)
		rm.Compact(rt)
		rm.check(rt)
		require.NoError(rt, rm.s.Check())
		closed = true
		require.NoError(rt, rm.closeStore())
		s, err = Open("/db", rm.opts)
		require.NoError(rt, err)
		rm.s = s
		closed = false
		rm.check(rt)
		require.NoError(rt, rm.s.Check())
		closed = true
		require.NoError(rt, rm.closeStore())
		total.add(rm)
	})
	total.logTotals(t)
}

// TestRangeDelExportImport exports a sealed segment holding a range
// deletion (between a put it deletes and a put after it) and imports it
// into a second store whose own sealed segments hold keys in the range: the
// deletion applies there too, and keeps applying across a reopen and a
// Compact. Imported segments are newer than every sealed segment and older
// than the live file, so a key of the importer's live file in the range
// survives.
func TestRangeDelExportImport(t *testing.T) {
	ctx := context.Background()
	a := mustOpen(t, "/a", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	defer a.Close()
	require.NoError(t, a.Put([]byte("a"), []byte("a-1")))
	require.NoError(t, a.Put([]byte("b"), []byte("b-1")))
	require.NoError(t, a.Seal())
	older := exportAll(t, a)
	require.Len(t, older, 1)
	// The second segment: a put in the range, the range deletion, then a
	// put in the range after it and one outside it.
	require.NoError(t, a.Put([]byte("bb"), []byte("bb-1")))
	require.NoError(t, a.DeleteRange([]byte("b"), []byte("d")))
	require.NoError(t, a.Put([]byte("bc"), []byte("bc-2")))
	require.NoError(t, a.Put([]byte("d"), []byte("d-2")))
	rangeSeg := exportNewest(t, a)
	wantA := model{"a": "a-1", "bc": "bc-2", "d": "d-2"}
	require.NoError(t, fullDiff(a, wantA, []string{"b", "bb", "c"}))

	newB := func(fsys vfs.FS) *Store {
		return mustOpen(t, "/b", &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	}
	// The importer's own history: sealed keys on both sides of the range
	// and inside it, and a live key inside it.
	setupB := func(b *Store) model {
		for _, k := range []string{"", "a0", "b", "b\x00", "bz", "c", "c\xff", "d", "da"} {
			require.NoError(t, b.Put([]byte(k), []byte("B-"+k)))
		}
		require.NoError(t, b.Seal())
		require.NoError(t, b.Put([]byte("cc"), []byte("B-live")))
		return model{"": "B-", "a0": "B-a0", "b": "B-b", "b\x00": "B-b\x00", "bz": "B-bz", "c": "B-c", "c\xff": "B-c\xff", "d": "B-d", "da": "B-da", "cc": "B-live"}
	}
	extra := []string{"a", "b", "bb", "bc", "c", "cc", "d", "zz"}

	t.Run("range segment alone", func(t *testing.T) {
		mem := vfs.NewMem()
		b := newB(mem)
		want := setupB(b)
		_, err := b.Import(ctx, bytes.NewReader(rangeSeg))
		require.NoError(t, err)
		want.deleteRange("b", "d")
		want["cc"] = "B-live" // the live file is newer than the import
		want["bc"], want["d"] = "bc-2", "d-2"
		require.NoError(t, fullDiff(b, want, extra))
		checkAndClose(t, b)
		b = newB(mem)
		require.NoError(t, fullDiff(b, want, extra), "after reopen")
		require.NoError(t, b.Compact(ctx))
		require.NoError(t, fullDiff(b, want, extra), "after Compact")
		checkAndClose(t, b)
		b = newB(mem)
		require.NoError(t, fullDiff(b, want, extra), "after Compact and reopen")
		checkAndClose(t, b)
	})

	t.Run("both segments in one import", func(t *testing.T) {
		mem := vfs.NewMem()
		b := newB(mem)
		want := setupB(b)
		require.NoError(t, b.Seal()) // nothing live: the import is the newest data
		_, err := b.Import(ctx, bytes.NewReader(older[0]), bytes.NewReader(rangeSeg))
		require.NoError(t, err)
		want["a"] = "a-1"
		want.deleteRange("b", "d")
		want["bc"], want["d"] = "bc-2", "d-2"
		require.NoError(t, fullDiff(b, want, extra))
		require.NoError(t, b.Compact(ctx))
		require.NoError(t, fullDiff(b, want, extra), "after Compact")
		checkAndClose(t, b)
		b = newB(mem)
		require.NoError(t, fullDiff(b, want, extra), "after reopen")
		checkAndClose(t, b)
	})

	t.Run("older segment wholly under the range", func(t *testing.T) {
		// B's oldest segment holds only keys the imported range deletes, so
		// nothing of it may be read again (the store may drop it whole).
		mem := vfs.NewMem()
		b := newB(mem)
		for _, k := range []string{"b", "bb", "c"} {
			require.NoError(t, b.Put([]byte(k), []byte("B-"+k)))
		}
		require.NoError(t, b.Seal())
		require.NoError(t, b.Put([]byte("a"), []byte("B-a")))
		require.NoError(t, b.Seal())
		sn, err := b.NewSnapshot()
		require.NoError(t, err)
		_, err = b.Import(ctx, bytes.NewReader(rangeSeg))
		require.NoError(t, err)
		want := model{"a": "B-a", "bc": "bc-2", "d": "d-2"}
		require.NoError(t, fullDiff(b, want, extra))
		// The snapshot still reads the deleted keys.
		for _, k := range []string{"b", "bb", "c"} {
			v, err := sn.Get([]byte(k))
			require.NoError(t, err, "snapshot Get(%q)", k)
			require.Equal(t, "B-"+k, string(v))
		}
		require.NoError(t, sn.Close())
		t.Logf("segments dropped under the range: %d", b.Metrics().RangeDropped)
		checkAndClose(t, b)
		b = newB(mem)
		require.NoError(t, fullDiff(b, want, extra), "after reopen")
		require.NoError(t, b.Compact(ctx))
		require.NoError(t, fullDiff(b, want, extra), "after Compact")
		checkAndClose(t, b)
	})

	t.Run("range from the first key", func(t *testing.T) {
		a := mustOpen(t, "/a2", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
		defer a.Close()
		require.NoError(t, a.Put([]byte("b"), []byte("a-b")))
		require.NoError(t, a.DeleteRange(nil, []byte("c")))
		require.NoError(t, a.Put([]byte("a"), []byte("a-a")))
		seg := exportNewest(t, a)
		mem := vfs.NewMem()
		b := newB(mem)
		for _, k := range []string{"", "\x00", "a", "b", "c", "d"} {
			require.NoError(t, b.Put([]byte(k), []byte("B-"+k)))
		}
		require.NoError(t, b.Seal())
		_, err := b.Import(ctx, bytes.NewReader(seg))
		require.NoError(t, err)
		want := model{"a": "a-a", "c": "B-c", "d": "B-d"}
		keys := []string{"", "\x00", "a", "b", "c", "d"}
		require.NoError(t, fullDiff(b, want, keys))
		checkAndClose(t, b)
		b = newB(mem)
		require.NoError(t, fullDiff(b, want, keys), "after reopen")
		require.NoError(t, b.Compact(ctx))
		require.NoError(t, fullDiff(b, want, keys), "after Compact")
		checkAndClose(t, b)
	})

	t.Run("snapshot before the import", func(t *testing.T) {
		b := newB(vfs.NewMem())
		want := setupB(b)
		sn, err := b.NewSnapshot()
		require.NoError(t, err)
		_, err = b.Import(ctx, bytes.NewReader(rangeSeg))
		require.NoError(t, err)
		for k, v := range want {
			got, err := sn.Get([]byte(k))
			require.NoError(t, err, "snapshot Get(%q)", k)
			require.Equal(t, v, string(got))
		}
		it, err := sn.NewIterator(nil)
		require.NoError(t, err)
		var keys []string
		for ok := it.First(); ok; ok = it.Next() {
			keys = append(keys, string(it.Key()))
		}
		require.NoError(t, it.Close())
		require.Equal(t, sortedKeys(want), keys)
		require.NoError(t, sn.Close())
		checkAndClose(t, b)
	})
}
