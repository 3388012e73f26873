package segstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// Break-it tests for merged block data files (segment.BlockVersion): crafted
// import streams, damaged blocks on disk, read faults on every reader of a
// block file, and edge-sized records through merges.

// bbRec encodes one record.
func bbRec(kind segment.RecordKind, key, value string) []byte {
	return segment.AppendRecord(nil, kind, []byte(key), []byte(value))
}

// bbPoints is a block's records: puts of the keys, each value "v-"+key.
func bbPoints(keys ...string) []byte {
	var b []byte
	for _, k := range keys {
		b = append(b, bbRec(segment.KindPut, k, "v-"+k)...)
	}
	return b
}

// bbStream is a version-3 data file stream holding one frame per payload.
func bbStream(payloads ...[]byte) []byte {
	out := segment.HeaderVersioned(segment.BlockVersion)
	for _, p := range payloads {
		out = wal.AppendFrame(out, p, 0)
	}
	return out
}

// bbRaw and bbS2 are block payloads of the records, stored raw or S2.
func bbRaw(records []byte) []byte { return append([]byte{byte(segment.CodecNone)}, records...) }

func bbS2(t *testing.T, records []byte) []byte {
	p := segment.AppendBlock(nil, records, segment.CodecS2)
	require.EqualValues(t, segment.CodecS2, p[0], "records must compress for this case")
	return p
}

// bbImportRefused imports stream into an empty store and requires
// ErrCorrupt, no segment and no file left behind.
func bbImportRefused(t *testing.T, stream []byte) {
	t.Helper()
	mem := vfs.NewMem()
	d := mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	infos, err := d.Import(context.Background(), bytes.NewReader(stream))
	require.ErrorIs(t, err, ErrCorrupt, "import accepted %d segment(s)", len(infos))
	require.Empty(t, d.Segments())
	require.Empty(t, bbOrphans(t, mem, d))
	checkAndClose(t, d)
}

// TestBlockBreakImportCraftedStreams: a hostile peer's version-3 streams,
// each frame checksum valid, so that only the block decoder and the block
// rules stand between them and the store. A valid stream of the same shape
// imports (the control); every broken one is refused whole.
func TestBlockBreakImportCraftedStreams(t *testing.T) {
	rangeBlock := bbRaw(bbRec(segment.KindRangeDelete, "a", "b"))
	compressible := func(keys ...string) []byte {
		var b []byte
		for _, k := range keys {
			b = append(b, bbRec(segment.KindPut, k, strings.Repeat("x", 200))...)
		}
		return b
	}
	// The control: ranges first, then ascending point blocks, raw and S2.
	t.Run("valid", func(t *testing.T) {
		mem := vfs.NewMem()
		d := mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
		stream := bbStream(rangeBlock, bbRaw(bbPoints("c", "d")), bbS2(t, compressible("e", "f")))
		_, err := d.Import(context.Background(), bytes.NewReader(stream))
		require.NoError(t, err)
		require.NoError(t, fullDiff(d, model{"c": "v-c", "d": "v-d", "e": strings.Repeat("x", 200), "f": strings.Repeat("x", 200)}, []string{"a", "b"}))
		checkAndClose(t, d)
	})

	s2Garbage := bbS2(t, compressible("c", "d"))
	for i := 2; i < len(s2Garbage); i++ {
		s2Garbage[i] ^= 0xa5
	}
	// An S2 body that claims 1 GiB + 1 of records: over every limit.
	hugeClaim := append([]byte{byte(segment.CodecS2)}, 0x81, 0x80, 0x80, 0x80, 0x04, 0, 0)
	truncated := bbPoints("c", "d")
	truncated = truncated[:len(truncated)-3]
	cases := []struct {
		name     string
		payloads [][]byte
	}{
		{"unknown-codec", [][]byte{append([]byte{2}, bbPoints("c")...)}},
		{"codec-255", [][]byte{append([]byte{255}, bbPoints("c")...)}},
		{"s2-garbage", [][]byte{s2Garbage}},
		{"s2-huge-claim", [][]byte{hugeClaim}},
		{"empty-raw-block", [][]byte{{byte(segment.CodecNone)}}},
		{"truncated-record", [][]byte{bbRaw(truncated)}},
		{"out-of-order", [][]byte{bbRaw(bbPoints("d", "c"))}},
		{"out-of-order-s2", [][]byte{bbS2(t, compressible("f", "e"))}},
		{"duplicate-key", [][]byte{bbRaw(bbPoints("c", "c"))}},
		{"mix-range-then-point", [][]byte{bbRaw(append(bbRec(segment.KindRangeDelete, "a", "b"), bbPoints("c")...))}},
		{"mix-point-then-range", [][]byte{bbRaw(append(bbPoints("c"), bbRec(segment.KindRangeDelete, "a", "b")...))}},
		{"link-record", [][]byte{bbRaw(segment.AppendLink(nil, 7, 100))}},
		{"link-then-points", [][]byte{bbRaw(append(segment.AppendLink(nil, 7, 100), bbPoints("c")...))}},
		{"unknown-kind", [][]byte{bbRaw(bbRec(9, "c", "v"))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bbImportRefused(t, bbStream(c.payloads...))
		})
	}
}

// TestBlockBreakImportCrossBlockOrder: docs/FORMAT.md ("Block data files")
// says point keys strictly ascend "within a block and from block to block",
// the range tombstones' blocks come first, and "a reader refuses a block
// that breaks these rules as corruption". Import checks each block alone
// (segstore/sync.go:380 calls segment.ForEachFrameRecord per frame, and
// ForEachBlockRecord starts a fresh key order per block, block.go:127), so a
// stream whose blocks are each valid but out of order among themselves is
// accepted as a version-3 file that no merge could have written.
func TestBlockBreakImportCrossBlockOrder(t *testing.T) {
	cases := []struct {
		name     string
		payloads [][]byte
	}{
		{"blocks-descending", [][]byte{bbRaw(bbPoints("e", "f")), bbRaw(bbPoints("c", "d"))}},
		{"key-in-two-blocks", [][]byte{bbRaw(bbPoints("c", "d")), bbRaw(bbPoints("d", "e"))}},
		{"range-block-after-points", [][]byte{bbRaw(bbPoints("c", "d")), bbRaw(bbRec(segment.KindRangeDelete, "c", "e"))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bbImportRefused(t, bbStream(c.payloads...))
		})
	}
}

// bbFrames returns the frames of segment seg's data file.
func bbFrames(t *testing.T, fsys vfs.FS, dir string, seg SegmentInfo) (string, []wal.Frame) {
	t.Helper()
	path := filepath.Join(dir, segment.DataName(seg.ID, segment.KindSeg))
	f, err := fsys.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var frames []wal.Frame
	_, err = wal.ScanFrames(f, path, segment.HeaderSize, seg.Size, func(fr wal.Frame) error {
		frames = append(frames, wal.Frame{Off: fr.Off, Payload: bytes.Clone(fr.Payload)})
		return nil
	})
	require.NoError(t, err)
	return path, frames
}

// bbBlockKeys returns the keys of a (valid) block frame.
func bbBlockKeys(t *testing.T, path string, fr wal.Frame) []string {
	t.Helper()
	var keys []string
	var walk segment.FrameWalk
	require.NoError(t, segment.ForEachFrameRecord(path, segment.BlockVersion, fr.Off, fr.Payload, segment.MaxBlockRecords, &walk,
		func(r segment.Record, _ int64, _ int) error {
			keys = append(keys, string(r.Key))
			return nil
		}))
	return keys
}

// bbRewriteFrame overwrites the frame at off with one of the same length
// holding payload, checksum recomputed: damage only the block decoder sees.
func bbRewriteFrame(t *testing.T, fsys vfs.FS, path string, off int64, payload []byte) {
	t.Helper()
	prWriteAt(t, fsys, path, off, wal.AppendFrame(nil, payload, 0))
}

// TestBlockBreakDamagedBlockOnDisk: a merged file whose block frame still
// verifies but whose block breaks a rule (unknown codec; two records
// swapped, out of order; garbage S2 body). The keys of that block fail with
// ErrCorrupt or read their own value, never another key's; every other key
// reads; Verify and Check find the damage; a merge refuses to launder it
// and leaves the store as it was.
func TestBlockBreakDamagedBlockOnDisk(t *testing.T) {
	type mutate func(t *testing.T, payload []byte) []byte
	cases := []struct {
		name     string
		compress bool
		mut      mutate
	}{
		{"unknown-codec", false, func(t *testing.T, p []byte) []byte { p[0] = 7; return p }},
		{"unknown-codec-s2", true, func(t *testing.T, p []byte) []byte { p[0] = 7; return p }},
		{"s2-garbage", true, func(t *testing.T, p []byte) []byte {
			require.EqualValues(t, segment.CodecS2, p[0])
			for i := 2; i < len(p); i++ {
				p[i] ^= 0x3c
			}
			return p
		}},
		{"raw-as-s2", false, func(t *testing.T, p []byte) []byte { p[0] = byte(segment.CodecS2); return p }},
		{"swapped-records", false, func(t *testing.T, p []byte) []byte {
			require.EqualValues(t, segment.CodecNone, p[0])
			recs := p[1:]
			_, n1, err := segment.DecodeRecord(recs)
			require.NoError(t, err)
			_, n2, err := segment.DecodeRecord(recs[n1:])
			require.NoError(t, err)
			swapped := append(bytes.Clone(recs[n1:n1+n2]), recs[:n1]...)
			copy(recs, swapped)
			return p
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, SegmentSize: 1 << 20, DisableCompression: !c.compress, Merge: MergeOptions{Disable: true}}
			s, m, _ := blockFixture(t, "/db", o)
			seg := s.Segments()[0]
			require.NoError(t, s.Close())
			path, frames := bbFrames(t, mem, "/db", seg)
			// A points block in the middle (the ranges' block comes first).
			victim := frames[len(frames)/2]
			victimKeys := bbBlockKeys(t, path, victim)
			require.Greater(t, len(victimKeys), 2)
			bbRewriteFrame(t, mem, path, victim.Off, c.mut(t, bytes.Clone(victim.Payload)))

			s = mustOpen(t, "/db", o)
			defer s.Close()
			for _, k := range victimKeys {
				got, err := s.Get([]byte(k))
				if err == nil {
					require.Equal(t, m[k], string(got), "key %s of the damaged block read another value", k)
					continue
				}
				require.ErrorIs(t, err, ErrCorrupt, k)
			}
			for k, v := range m {
				if slices.Contains(victimKeys, k) {
					continue
				}
				got, err := s.Get([]byte(k))
				require.NoError(t, err, k)
				require.Equal(t, v, string(got), k)
			}
			// A scan either stops with ErrCorrupt or reads true values.
			it, err := s.NewIterator(nil)
			require.NoError(t, err)
			var scanErr error
			for ok := it.First(); ok; ok = it.Next() {
				v, err := it.Value()
				if err != nil {
					scanErr = err
					break
				}
				require.Equal(t, m[string(it.Key())], string(v), string(it.Key()))
			}
			if scanErr == nil {
				scanErr = it.Err()
			}
			require.NoError(t, it.Close())
			require.ErrorIs(t, scanErr, ErrCorrupt)
			rep, err := s.Verify(context.Background())
			require.NoError(t, err)
			require.Len(t, rep.Damaged, 1)
			require.ErrorIs(t, rep.Damaged[0], ErrCorrupt)
			require.ErrorIs(t, s.Check(), ErrCorrupt)

			require.NoError(t, s.Put([]byte("key-00000"), []byte("x")))
			require.NoError(t, s.Seal())
			before := s.Segments()
			require.ErrorIs(t, s.Compact(context.Background()), ErrCorrupt)
			require.Equal(t, before, s.Segments())
			require.Empty(t, bbOrphans(t, mem, s))
		})
	}
}

// TestBlockBreakIndexDamagedRebuilt: the index of a block file, deleted,
// cut short or with a flipped byte, is rebuilt by Open from the blocks and
// answers the same, with and without compression.
func TestBlockBreakIndexDamagedRebuilt(t *testing.T) {
	for _, compress := range []bool{true, false} {
		for _, how := range []string{"delete", "truncate", "flip"} {
			t.Run(fmt.Sprintf("compress=%v/%s", compress, how), func(t *testing.T) {
				mem := vfs.NewMem()
				o := &Options{FS: mem, SegmentSize: 1 << 20, DisableCompression: !compress, Merge: MergeOptions{Disable: true}}
				s, m, _ := blockFixture(t, "/db", o)
				seg := s.Segments()[0]
				checkAndClose(t, s)
				ip := filepath.Join("/db", segment.IndexName(seg.ID))
				size, err := mem.Stat(ip)
				require.NoError(t, err)
				switch how {
				case "delete":
					require.NoError(t, mem.Remove(ip))
				case "truncate":
					f, err := mem.OpenReadWrite(ip)
					require.NoError(t, err)
					require.NoError(t, f.Truncate(size/2))
					require.NoError(t, f.Close())
				case "flip":
					testutil.FlipByte(t, mem, ip, size/3, 0xff)
				}
				extra := []string{"key-00100", "key-00150", "key-99999", ""}
				reopenCheck(t, mem, o, m, extra)
				// And once more with the other compression setting, after a
				// merge with new data: still the same answers.
				o2 := *o
				o2.DisableCompression = compress
				s = mustOpen(t, "/db", &o2)
				require.NoError(t, s.Put([]byte("key-00001"), []byte("fresh")))
				m["key-00001"] = "fresh"
				require.NoError(t, s.Seal())
				require.NoError(t, s.Compact(context.Background()))
				require.Len(t, s.Segments(), 1)
				require.NoError(t, fullDiff(s, m, extra))
				checkAndClose(t, s)
			})
		}
	}
}

// bbFaultStore is a merged block store on a Faulty file system, reads by
// pread (a fault on a mapped page is a signal, not an error).
func bbFaultStore(t *testing.T) (*vfs.Faulty, *Options, *Store, model, SegmentInfo) {
	t.Helper()
	mem := vfs.NewMem()
	ff := vfs.NewFaulty(mem)
	o := &Options{FS: ff, SegmentSize: 1 << 20, DisableMmap: true, Merge: MergeOptions{Disable: true}}
	s, m, _ := blockFixture(t, "/db", o)
	segs := s.Segments()
	require.Len(t, segs, 1)
	return ff, o, s, m, segs[0]
}

func isSegPath(id uint64) func(string) bool {
	name := segment.DataName(id, segment.KindSeg)
	return func(p string) bool { return strings.HasSuffix(p, name) }
}

// TestBlockBreakReadFaults: a read error on the block file, failing every
// read (persistent) or the nth read (each n in turn), and short reads. Get,
// a scan in each direction, Verify, Check, Export and a merge must each
// either return an error or the right answer (never a wrong value, never a
// panic); after the fault clears, the store reads right, and a merge that
// failed left the store as it was.
func TestBlockBreakReadFaults(t *testing.T) {
	ff, _, s, m, seg := bbFaultStore(t)
	defer s.Close()
	keys := sortedKeys(m)
	match := isSegPath(seg.ID)

	type readOp struct {
		name string
		run  func() error
	}
	getAll := func() error {
		for i, k := range keys {
			if i%7 != 0 {
				continue
			}
			v, err := s.Get([]byte(k))
			if err != nil {
				if errors.Is(err, ErrNotFound) {
					return fmt.Errorf("Get %s: ErrNotFound under a read fault: %w", k, errWrongAnswer)
				}
				return err
			}
			if string(v) != m[k] {
				return fmt.Errorf("Get %s = %.20q, want %.20q: %w", k, v, m[k], errWrongAnswer)
			}
		}
		return nil
	}
	scan := func(reverse bool) func() error {
		return func() error {
			it, err := s.NewIterator(nil)
			if err != nil {
				return err
			}
			defer it.Close()
			n := 0
			ok := it.First()
			if reverse {
				ok = it.Last()
			}
			for ; ok; n++ {
				v, err := it.Value()
				if err != nil {
					return err
				}
				if want, live := m[string(it.Key())]; !live || want != string(v) {
					return fmt.Errorf("scan %s = %.20q, want %.20q (live %v): %w", it.Key(), v, want, live, errWrongAnswer)
				}
				if reverse {
					ok = it.Prev()
				} else {
					ok = it.Next()
				}
			}
			if err := it.Err(); err != nil {
				return err
			}
			if n != len(m) {
				return fmt.Errorf("scan saw %d keys, want %d: %w", n, len(m), errWrongAnswer)
			}
			return nil
		}
	}
	verify := func() error {
		rep, err := s.Verify(context.Background())
		if err != nil {
			return err
		}
		if len(rep.Damaged) > 0 {
			return rep.Damaged[0]
		}
		return nil
	}
	var exported bytes.Buffer
	export := func() error {
		exported.Reset()
		_, err := s.Export(context.Background(), seg.ID, &exported)
		return err
	}
	ops := []readOp{
		{"get", getAll},
		{"scan", scan(false)},
		{"reverse-scan", scan(true)},
		{"verify", verify},
		{"check", s.Check},
		{"export", export},
	}
	// Reads of the segment file by one clean run of each op bound the sweep.
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			before := ff.Stats().Seen[vfs.OpRead]
			require.NoError(t, op.run())
			total := ff.Stats().Seen[vfs.OpRead] - before
			require.Positive(t, total)
			for _, fault := range []vfs.Fault{
				{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: match},
				{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: match, Short: true},
			} {
				require.NoError(t, ff.Inject(fault))
				err := op.run()
				ff.Clear()
				require.Error(t, err, "%s under a persistent read fault (short %v)", op.name, fault.Short)
				require.NotErrorIs(t, err, errWrongAnswer)
				require.NoError(t, op.run(), "%s after the fault cleared", op.name)
			}
			step := max(1, total/40)
			for n := int64(1); n <= total; n += step {
				require.NoError(t, ff.Inject(vfs.Fault{Op: vfs.OpRead, Nth: n, Match: match}))
				err := op.run()
				ff.Clear()
				require.NotErrorIs(t, err, errWrongAnswer, "read %d failed", n)
				require.NoError(t, op.run(), "%s after fault at read %d", op.name, n)
			}
		})
	}
	// An exported stream read under no fault is the file.
	require.NoError(t, export())
	require.EqualValues(t, seg.Size, exported.Len())

	// A merge that reads the block file under faults fails and changes
	// nothing; cleared, it completes.
	require.NoError(t, s.Put([]byte("key-00002"), []byte("newer")))
	m["key-00002"] = "newer"
	require.NoError(t, s.Seal())
	segsBefore := s.Segments()
	require.Len(t, segsBefore, 2)
	for n := int64(1); ; n++ {
		require.NoError(t, ff.Inject(vfs.Fault{Op: vfs.OpRead, Nth: n, Match: match}))
		err := s.Compact(context.Background())
		injected := ff.Stats().Injected[vfs.OpRead]
		ff.Clear()
		if err == nil {
			require.NoError(t, fullDiff(s, m, nil))
			break
		}
		require.NotErrorIs(t, err, ErrCorrupt, "a read error at read %d is not damage", n)
		require.Positive(t, injected)
		require.Equal(t, segsBefore, s.Segments(), "failed merge at read %d changed the segments", n)
		require.NoError(t, fullDiff(s, m, nil), "after failed merge at read %d", n)
		require.Empty(t, bbOrphans(t, ff, s), "failed merge at read %d", n)
		require.Less(t, n, int64(100000))
		if n > 50 {
			n += 20
		}
	}
	require.Len(t, s.Segments(), 1)
	require.NoError(t, s.Check())
}

var errWrongAnswer = errors.New("wrong answer")

// bbOrphans is orphans without the live-file spare the background may
// have made (a ".log" file no manifest names yet).
func bbOrphans(t *testing.T, fsys vfs.FS, s *Store) []string {
	t.Helper()
	orph, err := orphans(fsys, s)
	require.NoError(t, err)
	var out []string
	for _, n := range orph {
		if !strings.HasSuffix(n, ".log") || strings.HasPrefix(n, "missing:") {
			out = append(out, n)
		}
	}
	return out
}

// TestBlockBreakEdgeRecords: records of every size that matters to a
// block (empty key, empty value, keys of MaxKeySize, values of 1 to 4 MiB
// random and compressible, bigger than a block), range deletes over merged
// data merged again, and DisableCompression toggled between reopens.
func TestBlockBreakEdgeRecords(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 1 << 20, MaxKeySize: 4096, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	m := model{}
	rng := rand.New(rand.NewPCG(7, 8))
	put := func(k, v string) {
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	randBytes := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	put("", "empty key")
	put("e-empty", "")
	put(strings.Repeat("k", 4096), "max key")
	put(strings.Repeat("k", 4095)+"l", strings.Repeat("v", 9000))
	put("big-1-random", randBytes(1<<20))
	put("big-2-compressible", strings.Repeat("abcdefgh", 4<<20/8))
	put("big-3-random", randBytes(4<<20))
	put("big-4-almost-block", randBytes(2*4096-20))
	for i := 0; i < 3000; i++ {
		put(fmt.Sprintf("small-%05d", i), fmt.Sprintf("value %d %s", i, strings.Repeat("y", i%97)))
	}
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(context.Background()))
	require.Len(t, s.Segments(), 1)
	bbRequireBlockFiles(t, mem, s)
	require.NoError(t, fullDiff(s, m, []string{"\x00", "zzz"}))
	requireReverseScan(t, s, m)

	// Range deletes over the merged blocks: part of a block, across many,
	// the big records; then merge again.
	for _, r := range [][2]string{{"small-00010", "small-00013"}, {"small-01000", "small-02500"}, {"big-2", "big-4"}, {"", "\x00"}} {
		require.NoError(t, s.DeleteRange([]byte(r[0]), []byte(r[1])))
		m.deleteRange(r[0], r[1])
	}
	put("small-01200", "back")
	require.NoError(t, s.Seal())
	require.NoError(t, fullDiff(s, m, []string{"small-00011", "big-3-random", ""}))
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, fullDiff(s, m, []string{"small-00011", "big-3-random", ""}))
	requireReverseScan(t, s, m)
	checkAndClose(t, s)

	// Toggle compression across reopens, merging each time.
	for i, off := range []bool{true, false, true} {
		o2 := *o
		o2.DisableCompression = off
		s = mustOpen(t, "/db", &o2)
		require.NoError(t, fullDiff(s, m, nil), "reopen %d", i)
		put(fmt.Sprintf("small-%05d", i), fmt.Sprintf("round %d", i))
		require.NoError(t, s.Delete([]byte("e-empty")))
		delete(m, "e-empty")
		require.NoError(t, s.Seal())
		require.NoError(t, s.Compact(context.Background()))
		require.Len(t, s.Segments(), 1)
		bbRequireBlockFiles(t, mem, s)
		require.NoError(t, fullDiff(s, m, nil), "after merge %d", i)
		rep, err := s.Verify(context.Background())
		require.NoError(t, err)
		require.Empty(t, rep.Damaged)
		checkAndClose(t, s)
	}
}

// TestBlockBreakConcurrentReadsDuringMerges: Gets, scans, snapshots and
// iterators opened before merges of block files and read after their
// commits, under -race.
func TestBlockBreakConcurrentReadsDuringMerges(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s, m, _ := blockFixture(t, "/db", o)
	defer s.Close()
	keys := sortedKeys(m)

	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	frozen := m.clone()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	require.True(t, it.First())
	firstVal := frozen[string(it.Key())]

	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[rng.IntN(len(keys))]
				v, err := sn.Get([]byte(k))
				if err != nil || string(v) != frozen[k] {
					errs <- fmt.Errorf("snapshot Get %s = %.20q, %v", k, v, err)
					return
				}
				sit, err := sn.NewIterator(nil)
				if err != nil {
					errs <- err
					return
				}
				n := 0
				for ok := sit.Seek([]byte(k)); ok && n < 50; ok = sit.Next() {
					v, err := sit.Value()
					if err != nil || string(v) != frozen[string(sit.Key())] {
						errs <- fmt.Errorf("snapshot scan %s = %.20q, %v", sit.Key(), v, err)
						sit.Close()
						return
					}
					n++
				}
				sit.Close()
			}
		}(g)
	}
	// Writers and merges: each round shadows keys and merges all.
	for r := 0; r < 6; r++ {
		for i := 0; i < 300; i++ {
			k := keys[(r*300+i*7)%len(keys)]
			v := fmt.Sprintf("round %d %s %s", r, k, strings.Repeat("w", i%200))
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		require.NoError(t, s.Seal())
		require.NoError(t, s.Compact(context.Background()))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The iterator opened before the merges reads its own view.
	n := 1
	v, err := it.Value()
	require.NoError(t, err)
	require.Equal(t, firstVal, string(v))
	for it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		require.Equal(t, frozen[string(it.Key())], string(v), string(it.Key()))
		n++
	}
	require.NoError(t, it.Err())
	require.Equal(t, len(frozen), n)
	require.NoError(t, it.Close())
	require.NoError(t, sn.Close())
	require.NoError(t, fullDiff(s, m, nil))
}

// TestBlockBreakCrashDuringBlockMerge: a crash image at every sync point
// of workloads whose merges write block files (the merge crash sweep),
// with compression on and off, matches a state of acknowledged writes.
func TestBlockBreakCrashDuringBlockMerge(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		c := runMergeCrash(t, mode, 4242, 77, 250, bgCrashKeys(), MergeOptions{Disable: true, MinRun: 2, GarbageRatio: 0.1})
		require.Positive(t, c.points)
		require.Positive(t, c.rewrites+c.runMerges, "the sweep merged nothing")
	}
}

// TestBlockBreakImportDecodedSizeClaim: a block's S2 header claims how many
// bytes it decodes to, and DecodeBlock allocates that much before it
// decodes a byte. No block a merge writes decodes to more than two blocks'
// worth of records or one record (mergeWriter.add), and Import refuses any
// record over MaxKeySize+MaxValueSize anyway; yet the importer's bound is
// the largest batch payload (512 MiB), so a peer's 20-byte frame makes an
// Import allocate 512 MiB (and keep it for the rest of the stream):
// segstore/sync.go:380 passes maxBatchPayload as the limit, and
// segment/block.go:109 allocates the claimed length before decoding.
func TestBlockBreakImportDecodedSizeClaim(t *testing.T) {
	claim := binary.AppendUvarint([]byte{byte(segment.CodecS2)}, 512<<20)
	claim = append(claim, 0x00, 0x01, 0x02, 0x03)
	stream := bbStream(claim)
	mem := vfs.NewMem()
	d := mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	defer d.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := d.Import(context.Background(), bytes.NewReader(stream))
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Empty(t, d.Segments())
	// A generous bound: the largest record this store accepts, twice.
	bound := uint64(2 * segment.EncodedLen(DefaultMaxKeySize, DefaultMaxValueSize))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, bound,
		"a %d-byte stream made Import allocate %d MiB", len(stream), (after.TotalAlloc-before.TotalAlloc)>>20)
}

// TestBlockBreakBlockTombstones: tombstones in blocks, down to the
// smallest record a block can hold (a delete of the empty key, 7 bytes),
// shadow the older segments' records, from an import and from a merge that
// keeps them.
func TestBlockBreakBlockTombstones(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	m := model{}
	for _, k := range []string{"", "a", "b", "c"} {
		require.NoError(t, s.Put([]byte(k), []byte("old-"+k)))
		m[k] = "old-" + k
	}
	require.NoError(t, s.Seal())
	del := bbRec(segment.KindDelete, "", "")
	require.Len(t, del, 7)
	stream := bbStream(bbRaw(del), bbRaw(append(bbRec(segment.KindDelete, "a", ""), bbRec(segment.KindPut, "b", "new-b")...)))
	_, err := s.Import(context.Background(), bytes.NewReader(stream))
	require.NoError(t, err)
	delete(m, "")
	delete(m, "a")
	m["b"] = "new-b"
	require.NoError(t, fullDiff(s, m, []string{"", "a"}))
	requireReverseScan(t, s, m)
	// A rewrite of the import alone keeps its tombstones (older data holds
	// the keys): in a block file of this store's writing.
	segs := s.Segments()
	require.Len(t, segs, 2)
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, fullDiff(s, m, []string{"", "a"}))
	requireReverseScan(t, s, m)
	checkAndClose(t, s)
	reopenCheck(t, mem, o, m, []string{"", "a"})
}

// TestBlockBreakManyBlockFiles: a scan over more block files than a
// blockCache has slots (maxBlockSlots), keys interleaved so that every
// step moves to another file.
func TestBlockBreakManyBlockFiles(t *testing.T) {
	const files = maxBlockSlots + 5
	mem := vfs.NewMem()
	d := mustOpen(t, "/db", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	m := model{}
	for f := 0; f < files; f++ {
		src := mustOpen(t, fmt.Sprintf("/src%d", f), &Options{FS: mem, Merge: MergeOptions{Disable: true}, DisableCompression: f%2 == 0})
		for i := 0; i < 400; i++ {
			if i == 200 {
				require.NoError(t, src.Seal())
			}
			k := fmt.Sprintf("k-%05d-%02d", i, f)
			v := fmt.Sprintf("file %d key %d %s", f, i, strings.Repeat("q", i%50))
			require.NoError(t, src.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		require.NoError(t, src.Seal())
		require.NoError(t, src.Compact(context.Background()))
		var buf bytes.Buffer
		_, err := src.Export(context.Background(), src.Segments()[0].ID, &buf)
		require.NoError(t, err)
		require.NoError(t, src.Close())
		_, err = d.Import(context.Background(), &buf)
		require.NoError(t, err)
	}
	require.Len(t, d.Segments(), files)
	bbRequireBlockFiles(t, mem, d)
	require.NoError(t, fullDiff(d, m, nil))
	requireReverseScan(t, d, m)
	// Imported block files are in key order: no rewrite is due for them.
	for _, sg := range d.mu.segs {
		require.True(t, sg.index().InKeyOrder(), sg.df.path)
	}
	require.NoError(t, d.Compact(context.Background()))
	require.NoError(t, fullDiff(d, m, nil))
	checkAndClose(t, d)
}

// TestBlockBreakCloseDuringLongMerge: Close while a merge writes many MiB
// of very compressible blocks stops the merge instead of waiting for it
// (nothing is committed: the store reopens with both inputs), and the
// reopened store reads every acknowledged write.
func TestBlockBreakCloseDuringLongMerge(t *testing.T) {
	for _, compress := range []bool{true, false} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, SegmentSize: 64 << 20, DisableCompression: !compress, Merge: MergeOptions{Disable: true}}
			began := make(chan struct{}, 16)
			o2 := *o
			o2.Events.MergeBegin = func(MergeInfo) { began <- struct{}{} }
			s := mustOpen(t, "/db", &o2)
			m := model{}
			val := strings.Repeat("\x00", 16<<10)
			for r := 0; r < 2; r++ {
				for i := 0; i < 2000; i++ {
					k := fmt.Sprintf("key-%06d-%d", i, r)
					require.NoError(t, s.Put([]byte(k), []byte(val)))
					m[k] = val
				}
				require.NoError(t, s.Seal())
			}
			done := make(chan error, 1)
			go func() { done <- s.Compact(context.Background()) }()
			<-began // the step is under way
			require.NoError(t, s.Close())
			err := <-done
			t.Logf("compact: %v", err)
			require.Error(t, err)
			// Had Close waited for the merge, its output would have been
			// committed in place of the two inputs.
			s = mustOpen(t, "/db", o)
			require.Len(t, s.Segments(), 2, "Close waited for the merge to commit (or the merge finished first: make it longer)")
			require.NoError(t, s.Close())
			reopenCheck(t, mem, o, m, nil)
		})
	}
}

// bbScanModel reads the whole store into a model.
func bbScanModel(t *testing.T, s *Store) model {
	t.Helper()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	m := model{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		m[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Err())
	return m
}

// TestBlockBreakOldStoresCompact: copies of the stores old builds wrote
// (testdata/stores), compacted into block files with compression on and
// off, read the same, verify, and read the same again after a reopen
// without their indexes.
func TestBlockBreakOldStoresCompact(t *testing.T) {
	const src = "../testdata/stores"
	osfs := vfs.NewOS()
	names, err := osfs.List(src)
	require.NoError(t, err)
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, ".dump") {
			continue
		}
		for _, compress := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/compress=%v", name, compress), func(t *testing.T) {
				dir := t.TempDir()
				require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(src, name))))
				o := &Options{FS: osfs, DisableCompression: !compress, Merge: MergeOptions{Disable: true}}
				s := mustOpen(t, dir, o)
				m := bbScanModel(t, s)
				require.NotEmpty(t, m)
				require.NoError(t, s.Seal())
				require.NoError(t, s.Compact(context.Background()))
				segs := s.Segments()
				require.Len(t, segs, 1)
				require.EqualValues(t, segment.BlockVersion, dataHeaderVersion(t, osfs, s, segs[0].ID))
				require.NoError(t, fullDiff(s, m, []string{"", "k999"}))
				requireReverseScan(t, s, m)
				rep, err := s.Verify(context.Background())
				require.NoError(t, err)
				require.Empty(t, rep.Damaged)
				checkAndClose(t, s)
				require.NoError(t, osfs.Remove(filepath.Join(dir, segment.IndexName(segs[0].ID))))
				s = mustOpen(t, dir, o)
				require.NoError(t, fullDiff(s, m, nil))
				checkAndClose(t, s)
			})
			n++
		}
	}
	require.Equal(t, 6, n)
}

// TestBlockBreakIteratorRetainsLargeBlock: an iterator bounds the record
// buffer it keeps between reads (maxIterRecBuf) "so that one large value
// does not stay allocated for the iterator's life". Its blockCache does
// not: once a scan has read a large value from a block file, the slot
// keeps the decoded copy (and, without a mapping, the read buffer too) for
// as long as the iterator lives, and the pooled iterState keeps them after
// Close, however small every later block is (blockread.go:136 and :153
// grow sl.frame and sl.dec to the largest block read; reset, blockread.go:96,
// keeps them; iterator.go:69 pools them).
func TestBlockBreakIteratorRetainsLargeBlock(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			dir := t.TempDir()
			o := &Options{FS: vfs.NewOS(), DisableMmap: !mmap, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, dir, o)
			defer s.Close()
			rng := rand.New(rand.NewPCG(3, 4))
			big := make([]byte, 8<<20)
			for i := range big {
				big[i] = byte(rng.Uint32())
			}
			require.NoError(t, s.Put([]byte("a-big"), big))
			require.NoError(t, s.Seal())
			for i := 0; i < 2000; i++ {
				require.NoError(t, s.Put([]byte(fmt.Sprintf("b-%05d", i)), []byte(fmt.Sprintf("small value %d", i))))
			}
			require.NoError(t, s.Seal())
			require.NoError(t, s.Compact(context.Background()))
			bbRequireBlockFiles(t, o.FS, s)
			it, err := s.NewIterator(nil)
			require.NoError(t, err)
			defer it.Close()
			var buf []byte
			n := 0
			for ok := it.First(); ok; ok = it.Next() {
				buf, err = it.AppendValue(buf[:0])
				require.NoError(t, err)
				n++
			}
			require.Equal(t, 2001, n)
			require.NoError(t, it.Err())
			held := 0
			for _, sl := range it.blocks.slots {
				held += cap(sl.dec) + cap(sl.frame)
			}
			require.LessOrEqual(t, held, 2*maxIterRecBuf,
				"after a scan that ended on small blocks, the iterator still holds %d KiB of block buffers", held>>10)
		})
	}
}

// bbRequireBlockFiles requires every sealed segment of s to be a block
// data file: the merge a test relies on did happen.
func bbRequireBlockFiles(t *testing.T, fsys vfs.FS, s *Store) {
	t.Helper()
	for _, sg := range s.Segments() {
		require.EqualValues(t, segment.BlockVersion, dataHeaderVersion(t, fsys, s, sg.ID), "segment %d", sg.ID)
	}
}

// TestBlockBreakSealedSnapshotReplaceAll: the replicated state machine's
// path with block files: a sealed snapshot taken over merged data, merges
// that retire its segments, then its export installed elsewhere with
// ReplaceAll, including a stream whose block was garbled (refused, the
// target unchanged).
func TestBlockBreakSealedSnapshotReplaceAll(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
	s, m, _ := blockFixture(t, "/db", o)
	defer s.Close()
	require.NoError(t, s.Put([]byte("key-00003"), []byte("live")))
	m["key-00003"] = "live"
	sn, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	frozen := m.clone()
	// Retire the snapshot's segments.
	require.NoError(t, s.Put([]byte("key-00004"), []byte("after")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(context.Background()))
	var parts []ReplaceSegment
	var streams [][]byte
	for _, info := range sn.Segments() {
		var buf bytes.Buffer
		_, err := sn.Export(context.Background(), info.ID, &buf)
		require.NoError(t, err)
		streams = append(streams, buf.Bytes())
		parts = append(parts, ReplaceSegment{Digest: info.Digest, Size: info.Size, Data: bytes.NewReader(buf.Bytes())})
	}
	require.Len(t, parts, 2)

	mem2 := vfs.NewMem()
	d := mustOpen(t, "/db", &Options{FS: mem2, Merge: MergeOptions{Disable: true}})
	require.NoError(t, d.Put([]byte("zzz"), []byte("target's own")))
	// First a stream with one garbled block (valid frame checksum).
	bad := -1
	for i, st := range streams {
		if segment.HeaderVersion(st) == segment.BlockVersion {
			bad = i
		}
	}
	require.GreaterOrEqual(t, bad, 0)
	_, payload, err := wal.NewStreamReader(bytes.NewReader(streams[bad][segment.HeaderSize:]), "x", segment.HeaderSize, 1<<30).Next()
	require.NoError(t, err)
	garbled := bytes.Clone(payload)
	garbled[0] = 9
	badStream := append(append(bytes.Clone(streams[bad][:segment.HeaderSize]), wal.AppendFrame(nil, garbled, 0)...),
		streams[bad][segment.HeaderSize+wal.HeaderSize+len(payload):]...)
	badParts := slices.Clone(parts)
	for i := range badParts {
		badParts[i].Data = bytes.NewReader(streams[i])
	}
	badParts[bad].Data = bytes.NewReader(badStream)
	_, err = d.ReplaceAll(context.Background(), badParts)
	require.ErrorIs(t, err, ErrCorrupt)
	require.NoError(t, fullDiff(d, model{"zzz": "target's own"}, nil))

	for i := range parts {
		parts[i].Data = bytes.NewReader(streams[i])
	}
	_, err = d.ReplaceAll(context.Background(), parts)
	require.NoError(t, err)
	require.NoError(t, fullDiff(d, frozen, []string{"zzz", "key-00004"}))
	checkAndClose(t, d)
}

// TestBlockBreakReadOnlyBlocks: a read-only Open of a store whose data is
// in block files, its indexes gone (rebuilt in memory only), reads every
// key, scans both ways, verifies, and writes nothing.
func TestBlockBreakReadOnlyBlocks(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
	s, m, _ := blockFixture(t, "/db", o)
	segs := s.Segments()
	bbRequireBlockFiles(t, mem, s)
	checkAndClose(t, s)
	for _, sg := range segs {
		require.NoError(t, mem.Remove(filepath.Join("/db", segment.IndexName(sg.ID))))
	}
	names, err := mem.List("/db")
	require.NoError(t, err)
	ro := *o
	ro.ReadOnly = true
	s = mustOpen(t, "/db", &ro)
	require.NoError(t, fullDiff(s, m, []string{"key-00150"}))
	requireReverseScan(t, s, m)
	rep, err := s.Verify(context.Background())
	require.NoError(t, err)
	require.Empty(t, rep.Damaged)
	require.NoError(t, s.Close())
	after, err := mem.List("/db")
	require.NoError(t, err)
	require.ElementsMatch(t, names, after)
}
