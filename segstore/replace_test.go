package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// Tests of ReplaceAll, NewSealedSnapshot, Snapshot.Segments and
// Snapshot.Export: what a replicated state machine uses to snapshot a store
// (seal, pin, export the segments) and to restore one (replace the whole
// state by the snapshot's segments in one manifest commit).

// exported is one segment of a sealed snapshot, exported.
type exported struct {
	info SegmentInfo
	data []byte
}

// exportSnap exports every segment sn lists, oldest first, and checks each
// stream against its listed size and digest.
func exportSnap(t testingT, sn *Snapshot) []exported {
	t.Helper()
	var out []exported
	for _, info := range sn.Segments() {
		var buf bytes.Buffer
		n, err := sn.Export(context.Background(), info.ID, &buf)
		require.NoError(t, err)
		require.Equal(t, info.Size, n)
		require.Equal(t, info.Size, int64(buf.Len()))
		require.Equal(t, info.Digest, digestOf(buf.Bytes()), "segment %d: exported bytes do not have the listed digest", info.ID)
		out = append(out, exported{info: info, data: buf.Bytes()})
	}
	return out
}

// readCount is an io.Reader over data that counts the bytes read from it.
type readCount struct {
	r *bytes.Reader
	n *atomic.Int64
}

func (c readCount) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// replaceSegs makes the ReplaceAll input of exports; every byte read from
// any Data is counted in read.
func replaceSegs(exp []exported, read *atomic.Int64) []ReplaceSegment {
	out := make([]ReplaceSegment, len(exp))
	for i, e := range exp {
		out[i] = ReplaceSegment{Digest: e.info.Digest, Size: e.info.Size, Data: readCount{r: bytes.NewReader(e.data), n: read}}
	}
	return out
}

// testingT is what the helpers below need of a *testing.T or a *rapid.T.
type testingT interface {
	require.TestingT
	Helper()
}

// scanStore returns what a full scan of s reads.
func scanStore(t testingT, s *Store) model {
	t.Helper()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	return scanIter(t, it)
}

// snapScan returns what a full scan of sn reads.
func snapScan(t testingT, sn *Snapshot) model {
	t.Helper()
	it, err := sn.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	return scanIter(t, it)
}

// scanIter returns every key/value it yields, checking that keys ascend.
func scanIter(t testingT, it *Iterator) model {
	t.Helper()
	got := model{}
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		if prev != nil {
			require.Less(t, string(prev), string(it.Key()), "keys must ascend")
		}
		prev = append(prev[:0], it.Key()...)
		v, err := it.Value()
		require.NoError(t, err)
		got[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Err())
	return got
}

func putAll(t testingT, s *Store, m model, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		require.NoError(t, s.Put([]byte(kv[i]), []byte(kv[i+1])))
		if m != nil {
			m[kv[i]] = kv[i+1]
		}
	}
}

func replaceOpts(fsys vfs.FS) *Options {
	return &Options{FS: fsys, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
}

// TestSealedSnapshotBasics: the live file's writes are sealed into the
// snapshot's segments, the listing is oldest first, the exports carry the
// listed digests, and an empty live file is not sealed at all.
func TestSealedSnapshotBasics(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/a", replaceOpts(mem))
	defer s.Close()
	m := model{}
	putAll(t, s, m, "a", "1", "b", "1")
	require.NoError(t, s.Seal())
	putAll(t, s, m, "b", "2", "c", "2")
	require.NoError(t, s.DeleteRange([]byte("a"), []byte("b")))
	delete(m, "a")
	putAll(t, s, m, "d", "3")

	sn, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	segs := sn.Segments()
	require.Len(t, segs, 2)
	require.Less(t, segs[0].Order, segs[1].Order, "oldest first")
	require.Equal(t, s.Segments(), segs, "the seal made the live file's writes the newest segment")
	require.True(t, liveEmpty(s), "the live file was sealed")
	require.Equal(t, m, snapScan(t, sn))
	exp := exportSnap(t, sn)
	require.Len(t, exp, 2)

	// Writes after the snapshot are not in it.
	putAll(t, s, nil, "e", "4")
	require.Equal(t, m, snapScan(t, sn))

	// A second sealed snapshot with the live file emptied by a seal costs
	// no seal.
	require.NoError(t, s.Seal())
	seals := s.Metrics().Seals
	sn2, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	require.Equal(t, seals, s.Metrics().Seals, "an empty live file is not sealed")
	m["e"] = "4"
	require.Equal(t, m, snapScan(t, sn2))
	require.Len(t, sn2.Segments(), 3)
	require.NoError(t, sn2.Close())

	// A plain snapshot lists the sealed segments only.
	putAll(t, s, nil, "f", "5")
	sn3, err := s.NewSnapshot()
	require.NoError(t, err)
	require.Equal(t, s.Segments(), sn3.Segments())
	v, err := sn3.Get([]byte("f"))
	require.NoError(t, err)
	require.Equal(t, "5", string(v))
	require.NoError(t, sn3.Close())
}

// liveEmpty reports whether the store's live file holds no record.
func liveEmpty(s *Store) bool {
	s.mu.RLock()
	t := s.mu.tail
	s.mu.RUnlock()
	return t.empty()
}

// TestSealedSnapshotExportAfterMerge: a merge that retires the snapshot's
// segments between NewSealedSnapshot and Export does not make the export
// fail, and the bytes have the listed digest; an id the snapshot does not
// hold is ErrNoSegment, and a closed snapshot or store is ErrClosed.
func TestSealedSnapshotExportAfterMerge(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/a", replaceOpts(mem))
	m := model{}
	for i := range 4 {
		for k := range 20 {
			putAll(t, s, m, fmt.Sprintf("k%02d", k), fmt.Sprintf("v%d-%d", i, k))
		}
		require.NoError(t, s.Seal())
	}
	putAll(t, s, m, "live", "x")
	sn, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	listed := sn.Segments()
	require.Len(t, listed, 5)

	require.NoError(t, s.Compact(t.Context()))
	require.Len(t, s.Segments(), 1, "the merge retired every segment the snapshot lists")
	for _, info := range listed {
		require.NotContains(t, s.Segments(), info)
	}
	exp := exportSnap(t, sn) // checks sizes and digests
	require.Len(t, exp, 5)

	// Store.Export no longer knows the retired ids; the snapshot does.
	_, err = s.Export(t.Context(), listed[0].ID, io.Discard)
	require.ErrorIs(t, err, ErrNoSegment)
	_, err = sn.Export(t.Context(), s.Segments()[0].ID, io.Discard)
	require.ErrorIs(t, err, ErrNoSegment, "the merge output is not in the snapshot")
	_, err = sn.Export(nil, listed[0].ID, io.Discard) //lint:ignore SA1012 a nil context is what is tested
	require.ErrorIs(t, err, ErrInvalidOption)

	// The exported segments reproduce the snapshot exactly.
	b := mustOpen(t, "/b", replaceOpts(mem))
	var read atomic.Int64
	infos, err := b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	require.NoError(t, err)
	require.Len(t, infos, 5)
	require.Equal(t, m, scanStore(t, b))
	require.NoError(t, b.Close())

	require.NoError(t, sn.Close())
	_, err = sn.Export(t.Context(), listed[0].ID, io.Discard)
	require.ErrorIs(t, err, ErrClosed)
	// Closing the snapshot removed the retired files.
	data, _ := dataPaths(s)
	names, err := mem.List("/a")
	require.NoError(t, err)
	var segFiles []string
	for _, n := range names {
		if _, ext, ok := segment.ParseName(n); ok && ext != segment.NameIndex && ext != segment.NameLog {
			segFiles = append(segFiles, filepath.Join("/a", n))
		}
	}
	require.Equal(t, data, segFiles, "retired segment files removed with the snapshot's pins")

	sn2, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	_, err = sn2.Export(t.Context(), sn2.Segments()[0].ID, io.Discard)
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, sn2.Close())
	_, err = s.NewSealedSnapshot()
	require.ErrorIs(t, err, ErrClosed)
}

// TestSealedSnapshotExportSurvivesCloseMidStream: closing the snapshot
// while an export streams stops it with ErrClosed, and the file stays
// until the export is done.
func TestSealedSnapshotExportClosedMidStream(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/a", replaceOpts(mem))
	defer s.Close()
	// More than one export chunk (1 MiB).
	val := bytes.Repeat([]byte("v"), 64<<10)
	for k := range 24 {
		require.NoError(t, s.Put(fmt.Appendf(nil, "k%02d", k), val))
	}
	sn, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	info := sn.Segments()[0]
	require.Greater(t, info.Size, int64(1<<20))
	w := &closeAfterWrite{sn: sn}
	_, err = sn.Export(t.Context(), info.ID, w)
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, 1, w.writes)
}

type closeAfterWrite struct {
	sn     *Snapshot
	writes int
}

func (w *closeAfterWrite) Write(p []byte) (int, error) {
	w.writes++
	w.sn.Close()
	return len(p), nil
}

// TestReplaceAllReplacesEverything: sealed segments and the live file's
// writes of the target are gone, the source's snapshot is reproduced
// exactly, before and after a reopen, and the target accepts writes on top.
func TestReplaceAllReplacesEverything(t *testing.T) {
	mem := vfs.NewMem()
	a := mustOpen(t, "/a", replaceOpts(mem))
	want := model{}
	putAll(t, a, want, "k1", "a1", "k2", "a2")
	require.NoError(t, a.Seal())
	putAll(t, a, want, "k2", "a2'", "k3", "a3")
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	exp := exportSnap(t, sn)
	require.NoError(t, sn.Close())
	require.NoError(t, a.Close())

	b := mustOpen(t, "/b", replaceOpts(mem))
	putAll(t, b, nil, "k1", "b1", "only-b", "x")
	require.NoError(t, b.Seal())
	require.NoError(t, b.DeleteRange([]byte("k3"), []byte("k4")))
	putAll(t, b, nil, "live-b", "y", "k2", "b2")
	seq := b.ManifestSeq()
	var read atomic.Int64
	infos, err := b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	require.NoError(t, err)
	require.Equal(t, seq+1, b.ManifestSeq(), "one manifest commit")
	require.Len(t, infos, 2)
	require.Equal(t, b.Segments(), infos)
	for i, info := range infos {
		require.Equal(t, exp[i].info.Digest, info.Digest)
		require.Equal(t, exp[i].info.Size, info.Size)
	}
	require.Equal(t, want, scanStore(t, b))
	require.NoError(t, diff(b, want, 0))
	for _, k := range []string{"only-b", "live-b"} {
		_, err := b.Get([]byte(k))
		require.ErrorIs(t, err, ErrNotFound, k)
	}
	require.NoError(t, b.Check())
	ch := b.ChangesSince(seq)
	require.True(t, ch.Complete)
	require.Equal(t, infos, ch.Added)
	require.Len(t, ch.Removed, 1)

	// Writes on top shadow the replaced state and survive a reopen.
	putAll(t, b, want, "k1", "after")
	require.NoError(t, b.Close())
	b = mustOpen(t, "/b", replaceOpts(mem))
	require.Equal(t, want, scanStore(t, b))
	require.NoError(t, b.Check())
	gs := reopenGated(t, b, mem, "/b")
	orph, err := orphans(mem, gs.Store)
	require.NoError(t, err)
	require.Empty(t, orph)
	require.NoError(t, gs.closeAll())
}

// reopenGated closes s and opens dir again with the background held, so
// that orphans sees the directory as recovery left it.
func reopenGated(t *testing.T, s *Store, fsys vfs.FS, dir string) *gatedStore {
	t.Helper()
	require.NoError(t, s.Close())
	gs, err := openGated(dir, replaceOpts(fsys))
	require.NoError(t, err)
	return gs
}

// TestReplaceAllEmpty: an empty set makes the store empty, durably.
func TestReplaceAllEmpty(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/b", replaceOpts(mem))
	putAll(t, s, nil, "a", "1")
	require.NoError(t, s.Seal())
	putAll(t, s, nil, "b", "2")
	infos, err := s.ReplaceAll(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, infos)
	require.Empty(t, s.Segments())
	require.Empty(t, scanStore(t, s))
	require.NoError(t, s.Close())
	s = mustOpen(t, "/b", replaceOpts(mem))
	require.Empty(t, scanStore(t, s))
	require.Empty(t, s.Segments())
	gs := reopenGated(t, s, mem, "/b")
	orph, err := orphans(mem, gs.Store)
	require.NoError(t, err)
	require.Empty(t, orph)
	names, err := mem.List("/b")
	require.NoError(t, err)
	for _, n := range names {
		require.False(t, strings.HasSuffix(n, ".seg") || strings.HasSuffix(n, ".idx"), "left behind: %s", n)
	}
	require.NoError(t, gs.closeAll())
}

// TestReplaceAllReuseAndOrder: segments the target already holds are kept
// (same file id, no byte of their Data read, none written), and take their
// place in the new order even where their old Order put them on the wrong
// side of a copied segment; a repeated segment is taken once.
func TestReplaceAllReuseAndOrder(t *testing.T) {
	mem := vfs.NewMem()
	a := mustOpen(t, "/a", replaceOpts(mem))
	want := model{}
	putAll(t, a, want, "k", "old", "x", "1")
	require.NoError(t, a.Seal())
	putAll(t, a, want, "k", "mid", "y", "2")
	require.NoError(t, a.Seal())
	putAll(t, a, want, "k", "new", "z", "3")
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	exp := exportSnap(t, sn) // S1 (k=old), S2 (k=mid), S3 (k=new)
	require.Len(t, exp, 3)
	require.NoError(t, sn.Close())
	require.NoError(t, a.Close())

	// B imports S3 first and S1 afterwards: in B, S1 has the higher Order.
	cnt := vfs.NewCounting(mem)
	b := mustOpen(t, "/b", replaceOpts(cnt))
	_, err = b.Import(t.Context(), bytes.NewReader(exp[2].data))
	require.NoError(t, err)
	_, err = b.Import(t.Context(), bytes.NewReader(exp[0].data))
	require.NoError(t, err)
	putAll(t, b, nil, "k", "b-live")
	before := map[uint64]SegmentInfo{}
	for _, info := range b.Segments() {
		before[info.Digest] = info
	}
	require.Greater(t, before[exp[0].info.Digest].Order, before[exp[2].info.Digest].Order)

	cnt.Reset()
	var read atomic.Int64
	segs := replaceSegs(exp, &read)
	// S1 repeated before itself: shadowed whole by the later copy.
	segs = append([]ReplaceSegment{segs[0]}, segs...)
	infos, err := b.ReplaceAll(t.Context(), segs)
	require.NoError(t, err)
	require.Len(t, infos, 3)
	require.Equal(t, int64(exp[1].info.Size), read.Load(), "only the segment B lacked was read")
	for i, info := range infos {
		require.Equal(t, exp[i].info.Digest, info.Digest)
		if i != 1 {
			require.Equal(t, before[info.Digest].ID, info.ID, "a kept segment keeps its file")
		}
		if i > 0 {
			require.Less(t, infos[i-1].Order, info.Order, "the new order is the order of segs")
		}
	}
	var segBytes int64
	for p, n := range cnt.Counts().BytesWritten {
		if strings.HasSuffix(p, ".seg") {
			segBytes += n
			require.Equal(t, filepath.Join("/b", segment.DataName(infos[1].ID, segment.KindSeg)), p)
		}
	}
	require.Equal(t, exp[1].info.Size, segBytes, "only the missing segment was written")
	require.Equal(t, want, scanStore(t, b))
	v, err := b.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "new", string(v))
	require.NoError(t, b.Close())
	b = mustOpen(t, "/b", replaceOpts(mem))
	require.Equal(t, want, scanStore(t, b))
	require.Equal(t, infos, b.Segments())
	require.NoError(t, b.Check())
	require.NoError(t, b.Close())
}

// TestReplaceAllKeepsOldSnapshots: a snapshot and an iterator taken before
// ReplaceAll see the old state, the live file's writes included, until they
// are closed; then the replaced files go.
func TestReplaceAllKeepsOldSnapshots(t *testing.T) {
	mem := vfs.NewMem()
	a := mustOpen(t, "/a", replaceOpts(mem))
	putAll(t, a, nil, "n1", "1", "n2", "2")
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	exp := exportSnap(t, sn)
	require.NoError(t, sn.Close())
	require.NoError(t, a.Close())

	b := mustOpen(t, "/b", replaceOpts(mem))
	old := model{}
	putAll(t, b, old, "o1", "sealed")
	require.NoError(t, b.Seal())
	putAll(t, b, old, "o2", "live")
	bsn, err := b.NewSnapshot()
	require.NoError(t, err)
	it, err := b.NewIterator(nil)
	require.NoError(t, err)
	var read atomic.Int64
	_, err = b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	require.NoError(t, err)
	require.Equal(t, model{"n1": "1", "n2": "2"}, scanStore(t, b))
	require.Equal(t, old, snapScan(t, bsn))
	require.Equal(t, old, scanIter(t, it))
	v, err := bsn.Get([]byte("o2"))
	require.NoError(t, err)
	require.Equal(t, "live", string(v))
	require.NoError(t, it.Close())
	require.NoError(t, bsn.Close())
	// The old live file and the old segment are gone now.
	requireNoStrays(t, b, mem)
	require.NoError(t, b.Close())
}

// TestReplaceAllBadInput: every kind of bad input is refused with a typed
// error naming the stream, nothing changes, no file is left behind and no
// descriptor leaks, and the store goes on.
func TestReplaceAllBadInput(t *testing.T) {
	mem := vfs.NewMem()
	a := mustOpen(t, "/a", replaceOpts(mem))
	putAll(t, a, nil, "a1", "1")
	require.NoError(t, a.Seal())
	putAll(t, a, nil, "a2", "2")
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	exp := exportSnap(t, sn)
	require.NoError(t, sn.Close())
	require.NoError(t, a.Close())
	good := exp[1]

	tfs := &trackFS{FS: mem}
	b := mustOpen(t, "/b", replaceOpts(tfs))
	old := model{}
	putAll(t, b, old, "b1", "1")
	require.NoError(t, b.Seal())
	putAll(t, b, old, "b2", "2")
	requireNoStrays(t, b, mem)
	seq := b.ManifestSeq()

	boom := errors.New("peer went away")
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	type tc struct {
		name   string
		ctx    context.Context
		seg    ReplaceSegment
		stream int
		is     []error
	}
	half := good.data[:len(good.data)/2]
	cases := []tc{
		{"digest mismatch", t.Context(), ReplaceSegment{Digest: good.info.Digest ^ 1, Size: good.info.Size, Data: bytes.NewReader(good.data)}, 1, []error{ErrCorrupt}},
		{"size larger than the stream", t.Context(), ReplaceSegment{Digest: good.info.Digest, Size: good.info.Size + 1, Data: bytes.NewReader(good.data)}, 1, []error{ErrCorrupt}},
		{"stream longer than size", t.Context(), ReplaceSegment{Digest: good.info.Digest, Size: good.info.Size, Data: io.MultiReader(bytes.NewReader(good.data), bytes.NewReader(exp[0].data[segment.HeaderSize:]))}, 1, []error{ErrCorrupt}},
		{"stream cut mid-frame", t.Context(), ReplaceSegment{Digest: good.info.Digest, Size: good.info.Size, Data: bytes.NewReader(half)}, 1, []error{ErrCorrupt}},
		{"reader error mid-stream", t.Context(), ReplaceSegment{Digest: good.info.Digest, Size: good.info.Size, Data: io.MultiReader(bytes.NewReader(half), errReader{boom})}, 1, []error{boom}},
		{"nil data", t.Context(), ReplaceSegment{Digest: good.info.Digest, Size: good.info.Size}, 1, []error{ErrInvalidOption}},
		{"negative size", t.Context(), ReplaceSegment{Digest: good.info.Digest, Size: -1, Data: bytes.NewReader(good.data)}, 1, []error{ErrInvalidOption}},
		{"cancelled", canceled, ReplaceSegment{Digest: good.info.Digest, Size: good.info.Size, Data: bytes.NewReader(good.data)}, 0, []error{context.Canceled}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first := ReplaceSegment{Digest: exp[0].info.Digest, Size: exp[0].info.Size, Data: bytes.NewReader(exp[0].data)}
			_, err := b.ReplaceAll(c.ctx, []ReplaceSegment{first, c.seg})
			require.Error(t, err)
			for _, want := range c.is {
				require.ErrorIs(t, err, want)
			}
			var ie *ImportError
			if c.name != "cancelled" {
				require.ErrorAs(t, err, &ie)
				require.Equal(t, c.stream, ie.Stream)
			}
			require.NoError(t, b.failed())
			require.Equal(t, seq, b.ManifestSeq(), "nothing committed")
			require.Equal(t, old, scanStore(t, b))
			requireNoStrays(t, b, mem)
		})
	}
	_, err = b.ReplaceAll(nil, nil) //lint:ignore SA1012 a nil context is what is tested
	require.ErrorIs(t, err, ErrInvalidOption)
	// Still usable: a good replace goes through.
	var read atomic.Int64
	_, err = b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	require.NoError(t, err)
	require.Equal(t, model{"a1": "1", "a2": "2"}, scanStore(t, b))
	require.NoError(t, b.Close())
	require.NoError(t, tfs.held())
}

// requireNoStrays requires that the directory of s holds no file but those
// of its state (the manifest, the named segments and their indexes, the
// live file) and the spare live file the background makes.
func requireNoStrays(t *testing.T, s *Store, fsys vfs.FS) {
	t.Helper()
	// Wait for the background's spare, so that no file is being created.
	require.Eventually(t, func() bool {
		s.spare.Lock()
		have := s.spare.file != nil
		s.spare.Unlock()
		if !have {
			s.bg.requestSpare() // an injected fault may have failed the last attempt
		}
		return have
	}, 10*time.Second, time.Millisecond)
	orph, err := orphans(fsys, s)
	require.NoError(t, err)
	s.spare.Lock()
	sp := filepath.Base(s.spare.file.path)
	s.spare.Unlock()
	orph = slices.DeleteFunc(orph, func(n string) bool { return n == sp })
	require.Empty(t, orph, "files left behind")
}

// TestReplaceAllStopsMerge: a merge step in progress (made slow by a rate
// limit) is stopped by ReplaceAll, which does not wait for it to finish;
// Compact does not report an error for it and resumes on the new state.
func TestReplaceAllStopsMerge(t *testing.T) {
	mem := vfs.NewMem()
	a := mustOpen(t, "/a", replaceOpts(mem))
	putAll(t, a, nil, "a", "1")
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	exp := exportSnap(t, sn)
	require.NoError(t, sn.Close())
	require.NoError(t, a.Close())

	o := replaceOpts(mem)
	o.Merge.BytesPerSecond = 1 // one byte per second: the step would take hours
	b := mustOpen(t, "/b", o)
	val := bytes.Repeat([]byte("v"), 4<<10)
	for i := range 4 {
		for k := range 8 {
			require.NoError(t, b.Put(fmt.Appendf(nil, "k%d-%d", i, k), val))
		}
		require.NoError(t, b.Seal())
	}
	compactDone := make(chan error, 1)
	go func() { compactDone <- b.Compact(context.Background()) }()
	// Wait until the merge step has claimed its run.
	require.Eventually(t, func() bool {
		b.commitMu.Lock()
		defer b.commitMu.Unlock()
		return len(b.merging) > 0
	}, 10*time.Second, time.Millisecond)
	var read atomic.Int64
	_, err = b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	require.NoError(t, err)
	require.NoError(t, <-compactDone)
	require.Equal(t, model{"a": "1"}, scanStore(t, b))
	require.NoError(t, b.Check())
	require.NoError(t, b.Close())
}

// TestReplaceAllConcurrentWriters: writers that run through a ReplaceAll
// each see a cut: every write of theirs before it is gone, every write
// after it is kept, never a mixture; a concurrent Sync and seals do not
// disturb it.
func TestReplaceAllConcurrentWriters(t *testing.T) {
	mem := vfs.NewMem()
	a := mustOpen(t, "/a", replaceOpts(mem))
	putAll(t, a, nil, "from-a", "1")
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	exp := exportSnap(t, sn)
	require.NoError(t, sn.Close())
	require.NoError(t, a.Close())

	o := replaceOpts(mem)
	o.SegmentSize = 16 << 10 // the background seals now and then
	o.Sync = SyncManual
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		dir := fmt.Sprintf("/b%d", round)
		b := mustOpen(t, dir, o)
		const writers = 3
		var wg sync.WaitGroup
		stop := make(chan struct{})
		acked := make([]atomic.Int64, writers)
		for w := range writers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := b.Put(fmt.Appendf(nil, "w%d-%06d", w, i), bytes.Repeat([]byte("x"), 100)); err != nil {
						t.Error(err)
						return
					}
					acked[w].Store(int64(i + 1))
					if i%50 == 0 {
						if err := b.Sync(); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		require.Eventually(t, func() bool { return acked[0].Load() > 100 }, 10*time.Second, time.Millisecond)
		var before [writers]int64
		for w := range writers {
			before[w] = acked[w].Load()
		}
		var read atomic.Int64
		_, err := b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
		require.NoError(t, err)
		var after [writers]int64
		for w := range writers {
			after[w] = acked[w].Load()
		}
		time.Sleep(5 * time.Millisecond)
		close(stop)
		wg.Wait()
		check := func(s *Store) {
			got := scanStore(t, s)
			require.Equal(t, "1", got["from-a"])
			for w := range writers {
				n := acked[w].Load()
				cut := int64(-1)
				for i := int64(0); i < n; i++ {
					_, ok := got[fmt.Sprintf("w%d-%06d", w, i)]
					if ok && cut < 0 {
						cut = i
					}
					if cut >= 0 {
						require.True(t, ok, "writer %d: write %d kept, %d after it lost", w, cut, i)
					}
				}
				if cut < 0 {
					cut = n
				}
				require.GreaterOrEqual(t, cut, before[w], "writer %d: a write acknowledged before ReplaceAll survived it", w)
				// Write after[w] may have begun before ReplaceAll returned;
				// every later one began after it and must be kept.
				require.LessOrEqual(t, cut, after[w]+1, "writer %d: a write begun after ReplaceAll returned was lost", w)
			}
		}
		check(b)
		require.NoError(t, b.Close())
		b = mustOpen(t, dir, o)
		check(b)
		require.NoError(t, b.Close())
	}
}
