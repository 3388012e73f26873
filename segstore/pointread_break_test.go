package segstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// Break-it tests for the point read of a block data file (pointRecord):
// the frame checksum is left unread when the key's record is found and
// proves itself by its own checksum; every other outcome is trusted only
// once the frame and all the block's records verify. The invariant every
// test here asserts: a Get returns the key's newest value, ErrNotFound when
// that is the truth, or ErrCorrupt; never an older segment's value, never
// another key's, never ErrNotFound for a live key, never a panic.

// prWant is what a Get of one key must answer on undamaged data.
type prWant struct {
	live bool
	val  string
}

// prFixture is a store on a mem FS with an older segment of every key's
// old value beneath a merged block file of the newer values, some of them
// tombstones, some keys left to the older segment alone.
type prFixture struct {
	mem    *vfs.Mem
	opts   *Options
	model  map[string]prWant
	keys   []string // every key probed: written ones and absent ones, sorted
	newer  SegmentInfo
	older  SegmentInfo
	path   string      // the block file's path
	frames []wal.Frame // its frames
}

const prN = 600

func prKey(i int) string { return fmt.Sprintf("key-%05d", i) }

// prVal is a value of key i: "old" and "new" values have the same length,
// so that an old record fits exactly where a new one was. Values repeat a
// pattern so that S2 saves more than an eighth of a block.
func prVal(gen string, i int) string {
	return fmt.Sprintf("%s-%05d-%s", gen, i, strings.Repeat("ab", 6))
}

// prTomb and prOldOnly pick the keys the newer segments delete and the
// keys they leave alone.
func prTomb(i int) bool    { return i%7 == 3 }
func prOldOnly(i int) bool { return i%11 == 5 }

func prBuild(t *testing.T, compress, disableMmap bool) *prFixture {
	t.Helper()
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 1 << 20, DisableCompression: !compress, DisableMmap: disableMmap,
		Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 1.5, KeepWriteOrder: true}}
	s := mustOpen(t, "/db", o)
	rng := rand.New(rand.NewPCG(11, 12))
	model := map[string]prWant{}
	for _, i := range rng.Perm(prN) {
		require.NoError(t, s.Put([]byte(prKey(i)), []byte(prVal("old", i))))
		model[prKey(i)] = prWant{true, prVal("old", i)}
	}
	require.NoError(t, s.Seal())
	for half := 0; half < 2; half++ {
		for _, j := range rng.Perm(prN / 2) {
			i := half*prN/2 + j
			switch {
			case prOldOnly(i):
			case prTomb(i):
				require.NoError(t, s.Delete([]byte(prKey(i))))
				model[prKey(i)] = prWant{}
			default:
				require.NoError(t, s.Put([]byte(prKey(i)), []byte(prVal("new", i))))
				model[prKey(i)] = prWant{true, prVal("new", i)}
			}
		}
		require.NoError(t, s.Seal())
	}
	did, err := s.mergeStep(context.Background(), false)
	require.NoError(t, err)
	require.True(t, did)
	segs := s.Segments()
	require.Len(t, segs, 2)
	newer, older := segs[0], segs[1]
	if older.Order > newer.Order {
		newer, older = older, newer
	}
	require.NoError(t, s.Close())
	f := &prFixture{mem: mem, opts: o, model: model, newer: newer, older: older}
	f.path, f.frames = bbFrames(t, mem, "/db", newer)
	require.Greater(t, len(f.frames), 3)
	codec := segment.CodecNone
	if compress {
		codec = segment.CodecS2
	}
	for _, fr := range f.frames {
		require.EqualValues(t, codec, fr.Payload[0], "every block of the fixture is stored %v", codec)
	}
	for k := range model {
		f.keys = append(f.keys, k)
	}
	// Keys never written: between two written keys, and past the last.
	for i := 0; i < prN+3; i += 37 {
		k := prKey(i) + "~"
		f.keys = append(f.keys, k)
		model[k] = prWant{}
	}
	model[prKey(prN+1)] = prWant{}
	f.keys = append(f.keys, prKey(prN+1))
	return f
}

// prGet checks one Get against the model and reports the outcome: "ok",
// "absent" (a right ErrNotFound) or "corrupt". Any wrong answer fails t.
func prGet(t *testing.T, s *Store, want prWant, key, ctx string) string {
	t.Helper()
	got, err := s.Get([]byte(key))
	switch {
	case err == nil:
		if !want.live {
			t.Fatalf("%s: Get(%q) = %q, want ErrNotFound (a deleted or never written key read a value: resurrection)", ctx, key, got)
		}
		if string(got) != want.val {
			t.Fatalf("%s: Get(%q) = %q, want %q (an older version or another key's value)", ctx, key, got, want.val)
		}
		return "ok"
	case errors.Is(err, ErrNotFound):
		if want.live {
			t.Fatalf("%s: Get(%q) = ErrNotFound, want %q (a live key lost)", ctx, key, want.val)
		}
		return "absent"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	}
	t.Fatalf("%s: Get(%q): unexpected error %v", ctx, key, err)
	return ""
}

// prRecords returns the start of each record of a raw block payload (its
// offsets in the payload, the codec byte at 0) and the key of each.
func prRecords(t *testing.T, payload []byte) (starts []int, keys []string) {
	t.Helper()
	require.EqualValues(t, segment.CodecNone, payload[0])
	for pos := 1; pos < len(payload); {
		r, n, err := segment.DecodeRecord(payload[pos:])
		require.NoError(t, err)
		starts = append(starts, pos)
		keys = append(keys, string(r.Key))
		pos += n
	}
	return starts, keys
}

// prWriter writes bytes into a file of the mem FS while a store has it
// open: with DisableMmap the store reads the file through ReadAt, so it
// reads the damage at once, with no reopen.
type prWriter struct {
	t *testing.T
	f vfs.File
}

func prOpenWriter(t *testing.T, f *prFixture) *prWriter {
	fh, err := f.mem.OpenReadWrite(f.path)
	require.NoError(t, err)
	t.Cleanup(func() { fh.Close() })
	return &prWriter{t: t, f: fh}
}

func (w *prWriter) write(off int64, b []byte) {
	_, err := w.f.WriteAt(b, off)
	require.NoError(w.t, err)
}

// prProbeKeys are the keys probed around the victim frame: all of its
// keys, the last key of the frame before and the first of the frame
// after (whose blocks are whole), and the keys never written or left to
// the older segment that fall in its range.
func prProbeKeys(t *testing.T, f *prFixture, victim int) []string {
	t.Helper()
	var probe []string
	lo := bbBlockKeys(t, f.path, f.frames[victim])
	probe = append(probe, lo...)
	if victim > 0 {
		prev := bbBlockKeys(t, f.path, f.frames[victim-1])
		probe = append(probe, prev[len(prev)-1])
	}
	if victim+1 < len(f.frames) {
		probe = append(probe, bbBlockKeys(t, f.path, f.frames[victim+1])[0])
	}
	in := map[string]bool{}
	for _, k := range lo {
		in[k] = true
	}
	first, last := lo[0], lo[len(lo)-1]
	for _, k := range f.keys {
		if k >= first && k <= last && !in[k] {
			probe = append(probe, k) // absent from the block: never written, or the older segment's
		}
	}
	return probe
}

// TestPointReadBreakEveryByte flips every byte of one block frame, header
// and payload, raw and S2, with the frame checksum left stale and again
// recomputed so that the frame verifies; after each flip it reads the
// frame's keys, its neighbours and the absent keys of its range. Every
// answer must be right or ErrCorrupt; a raw block's key whose own record
// holds the flipped byte must be ErrCorrupt. The damage is read in place
// (DisableMmap, ReadAt of a mem file), so each flip costs no reopen.
func TestPointReadBreakEveryByte(t *testing.T) {
	for _, c := range []struct {
		name     string
		compress bool
		victim   func(n int) int
	}{
		{"raw-middle", false, func(n int) int { return n / 2 }},
		{"raw-last", false, func(n int) int { return n - 1 }},
		{"s2-middle", true, func(n int) int { return n / 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := prBuild(t, c.compress, true)
			victim := c.victim(len(f.frames))
			fr := f.frames[victim]
			frame := wal.AppendFrame(nil, fr.Payload, 0)
			// The frame as the merge wrote it (watermark included).
			orig := make([]byte, len(frame))
			rf, err := f.mem.Open(f.path)
			require.NoError(t, err)
			_, err = rf.ReadAt(orig, fr.Off)
			require.NoError(t, err)
			require.NoError(t, rf.Close())
			_, err = wal.CheckFrame(orig, f.path, fr.Off)
			require.NoError(t, err)

			probe := prProbeKeys(t, f, victim)
			blockKeys := bbBlockKeys(t, f.path, fr)
			others := probe[len(blockKeys):] // neighbours and keys absent from the block
			var starts []int
			if !c.compress {
				starts, _ = prRecords(t, fr.Payload)
			}
			// ownRecord is the record of a raw block that holds payload
			// byte p, -1 for the codec byte.
			ownRecord := func(p int) int {
				j := -1
				for i, st := range starts {
					if st <= p {
						j = i
					}
				}
				return j
			}
			// keysFor are the keys read after a flip of frame byte at: the
			// frame's neighbours and absent keys, its first and last key,
			// and of a raw block the records around the damaged one (the
			// records before those read whole either way); of an S2 block,
			// where a flip can change any record it decodes to, a third of
			// its keys, a different third for each byte; all of them for a
			// flip in the frame header.
			keysFor := func(at int) (ks []string, own string) {
				ks = append(ks, others...)
				ks = append(ks, blockKeys[0], blockKeys[len(blockKeys)-1])
				switch p := at - wal.HeaderSize; {
				case p < 0:
					return append(ks, blockKeys...), ""
				case c.compress:
					for i := at % 3; i < len(blockKeys); i += 3 {
						ks = append(ks, blockKeys[i])
					}
					return ks, ""
				default:
					j := ownRecord(p)
					for i := max(j-2, 0); i <= min(j+4, len(blockKeys)-1); i++ {
						ks = append(ks, blockKeys[i])
					}
					if j >= 0 {
						own = blockKeys[j]
					}
					return ks, own
				}
			}

			s := mustOpen(t, "/db", f.opts)
			defer s.Close()
			w := prOpenWriter(t, f)
			for _, k := range probe {
				require.NotEqual(t, "corrupt", prGet(t, s, f.model[k], k, "undamaged"))
			}
			counts := map[string]int{}
			masks := []byte{0x01, 0x80, 0xff}
			for at := 0; at < len(orig); at++ {
				for _, valid := range []bool{false, true} {
					if valid && at < wal.HeaderSize {
						continue // the header is what the checksum is over: nothing to rewrite
					}
					mask := masks[at%len(masks)]
					damaged := bytes.Clone(orig)
					damaged[at] ^= mask
					if valid {
						damaged = reseal(damaged)
					}
					w.write(fr.Off, damaged)
					ctx := fmt.Sprintf("frame byte %d ^ %#x (valid frame %v)", at, mask, valid)
					ks, own := keysFor(at)
					for _, k := range ks {
						out := prGet(t, s, f.model[k], k, ctx)
						counts[out]++
						if k == own {
							// Every byte of a record is under its checksum.
							require.Equal(t, "corrupt", out, "%s: the key whose record holds the flipped byte read %s", ctx, out)
						}
					}
				}
			}
			w.write(fr.Off, orig)
			for _, k := range probe {
				require.NotEqual(t, "corrupt", prGet(t, s, f.model[k], k, "restored"))
			}
			t.Logf("%d frame bytes, %d keys probed: %v", len(orig), len(probe), counts)
			require.Positive(t, counts["corrupt"])
			require.Positive(t, counts["ok"])
			require.Positive(t, counts["absent"])
		})
	}
}

// reseal recomputes a frame's checksum over its (damaged) payload, its
// watermark kept.
func reseal(frame []byte) []byte {
	return wal.AppendFrame(nil, frame[wal.HeaderSize:], binary.LittleEndian.Uint64(frame[16:]))
}

// prRecordOf returns the encoding of key's record in a data file's frames
// (a file of records, or a raw block file), with its file offset.
func prRecordOf(t *testing.T, frames []wal.Frame, block bool, key string) (rec []byte, off int64) {
	t.Helper()
	for _, fr := range frames {
		start := 0
		if block {
			require.EqualValues(t, segment.CodecNone, fr.Payload[0])
			start = 1
		}
		for pos := start; pos < len(fr.Payload); {
			r, n, err := segment.DecodeRecord(fr.Payload[pos:])
			require.NoError(t, err)
			if string(r.Key) == key {
				return bytes.Clone(fr.Payload[pos : pos+n]), fr.Off + wal.HeaderSize + int64(pos)
			}
			pos += n
		}
	}
	t.Fatalf("no record of %q", key)
	return nil, 0
}

// prLogFrames returns the frames of a segment sealed from a live file
// (a file of records, named as a log).
func prLogFrames(t *testing.T, fsys vfs.FS, seg SegmentInfo) []wal.Frame {
	t.Helper()
	path := filepath.Join("/db", segment.DataName(seg.ID, segment.KindLog))
	fh, err := fsys.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	var frames []wal.Frame
	_, err = wal.ScanFrames(fh, path, segment.HeaderSize, seg.Size, func(fr wal.Frame) error {
		frames = append(frames, wal.Frame{Off: fr.Off, Payload: bytes.Clone(fr.Payload)})
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, frames)
	return frames
}

// prWriteAt writes b at off of path, as damage done while the store is
// closed.
func prWriteAt(t *testing.T, fsys vfs.FS, path string, off int64, b []byte) {
	t.Helper()
	fh, err := fsys.OpenReadWrite(path)
	require.NoError(t, err)
	_, err = fh.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, fh.Close())
}

// TestPointReadBreakStaleRecordTransplant: the block file's bytes where a
// key's record was are replaced by the older segment's record of the same
// key (a misdirected or stale write of the very bytes the older file
// holds: a record whose own checksum holds, at a place that is not its
// own). The frame checksum no longer holds, so the damage is detectable,
// and the only right answers are the newest value, unreadable here, hence
// ErrCorrupt (or ErrNotFound for the deleted key). A point read that took
// the record on its own checksum, frame unchecked, would answer with the
// older value: a resurrection. The block file's frame checksum is what
// stops it. (A sealed file of records, version 1/2, takes a record on its
// own checksum and is exposed the same way.)
func TestPointReadBreakStaleRecordTransplant(t *testing.T) {
	for _, c := range []struct {
		name    string
		mmap    bool
		deleted bool // the victim is a tombstone in the block file
	}{
		{"put-mmap", true, false},
		{"put-pread", false, false},
		{"tombstone-mmap", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := prBuild(t, false, !c.mmap)
			fr := f.frames[len(f.frames)/2]
			keys := bbBlockKeys(t, f.path, fr)
			var victim string
			for _, k := range keys[2 : len(keys)-2] {
				if !f.model[k].live == c.deleted {
					victim = k
					break
				}
			}
			require.NotEmpty(t, victim)
			newRec, at := prRecordOf(t, []wal.Frame{fr}, true, victim)
			olderFrames := prLogFrames(t, f.mem, f.older)
			oldRec, _ := prRecordOf(t, olderFrames, false, victim)
			if !c.deleted {
				require.Len(t, oldRec, len(newRec), "old and new records of a key are the same size")
			}
			prWriteAt(t, f.mem, f.path, at, oldRec)

			s := mustOpen(t, "/db", f.opts)
			defer s.Close()
			// The frame is detectably damaged: a verify of the file says so.
			rep, err := s.Verify(context.Background())
			require.NoError(t, err)
			require.NotEmpty(t, rep.Damaged, "the transplant must leave the frame checksum broken")
			prGet(t, s, f.model[victim], victim, "victim's record replaced by its older record")
		})
	}
}

// TestPointReadBreakRuleBreakingBlocks: blocks whose frame checksum holds
// (rewritten) but which break the block rules: a key twice, or two keys
// swapped. A key the walk reaches only past the broken place, or that the
// damage took out of the block, must be ErrCorrupt; no key reads an older
// value or ErrNotFound.
func TestPointReadBreakRuleBreakingBlocks(t *testing.T) {
	f := prBuild(t, false, false)
	vi := len(f.frames) / 2
	fr := f.frames[vi]
	starts, keys := prRecords(t, fr.Payload)
	// Three consecutive live puts in the middle of the block: a, b, c.
	j := -1
	for i := 2; i+3 < len(keys); i++ {
		if f.model[keys[i]].live && f.model[keys[i+1]].live && f.model[keys[i+2]].live &&
			strings.HasPrefix(f.model[keys[i]].val, "new-") && strings.HasPrefix(f.model[keys[i+1]].val, "new-") &&
			strings.HasPrefix(f.model[keys[i+2]].val, "new-") {
			j = i
			break
		}
	}
	require.GreaterOrEqual(t, j, 0)
	rec := func(i int) []byte { return fr.Payload[starts[i]:starts[i+1]] }
	a, b := keys[j], keys[j+1]
	forged := prVal("dup", 0)
	dupA := segment.AppendRecord(nil, segment.KindPut, []byte(a), []byte(forged))
	dupB := segment.AppendRecord(nil, segment.KindPut, []byte(b), []byte(forged))
	require.Len(t, dupA, len(rec(j+1)))

	replace := func(i int, with []byte) []byte {
		p := bytes.Clone(fr.Payload)
		copy(p[starts[i]:], with)
		return p
	}
	swapped := bytes.Clone(fr.Payload)
	copy(swapped[starts[j]:], rec(j+1))
	copy(swapped[starts[j+1]:], rec(j))

	for _, c := range []struct {
		name    string
		payload []byte
		// gone: keys whose record the damage took out, which must read
		// ErrCorrupt; mayBe: values a key may read besides its own.
		gone       []string
		mayBe      map[string]string
		brokenFrom string // every key of the block from this one on must read ErrCorrupt
	}{
		// [.., a, a', c, ..]: b is gone, the walk past a' stops at the rule.
		{"duplicate-after", replace(j+1, dupA), []string{b}, nil, b},
		// [.., b', b, c, ..]: a is gone; b read at its first record may
		// take the forged one, which the walk reaches first.
		{"duplicate-before", replace(j, dupB), []string{a}, map[string]string{b: forged}, keys[j+2]},
		// [.., b, a, c, ..]: the walk to a stops at b, past a the rule.
		{"swapped", swapped, []string{a}, nil, keys[j+2]},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig := make([]byte, wal.HeaderSize+len(fr.Payload))
			rf, err := f.mem.Open(f.path)
			require.NoError(t, err)
			_, err = rf.ReadAt(orig, fr.Off)
			require.NoError(t, err)
			require.NoError(t, rf.Close())
			damaged := reseal(append(bytes.Clone(orig[:wal.HeaderSize]), c.payload...))
			prWriteAt(t, f.mem, f.path, fr.Off, damaged)
			defer prWriteAt(t, f.mem, f.path, fr.Off, orig)

			s := mustOpen(t, "/db", f.opts)
			defer s.Close()
			for _, k := range c.gone {
				_, err := s.Get([]byte(k))
				require.ErrorIs(t, err, ErrCorrupt, "%q, taken out of the block by the damage", k)
			}
			broken := false
			for _, k := range prProbeKeys(t, f, vi) {
				if k == c.brokenFrom {
					broken = true
				}
				want := f.model[k]
				if alt, ok := c.mayBe[k]; ok {
					got, err := s.Get([]byte(k))
					if err == nil && string(got) == alt {
						t.Logf("%s: Get(%q) read the forged duplicate %q (the walk stops at the first record of the key)", c.name, k, got)
						continue
					}
				}
				out := prGet(t, s, want, k, c.name)
				if broken && slices.Contains(keys, k) {
					require.Equal(t, "corrupt", out, "%q lies past the broken place in the block", k)
				}
			}
			require.True(t, broken)
		})
	}
}

// TestPointReadBreakLyingFrameLength: the frame header's length says less
// or more than the frame the index names, under a checksum recomputed to
// match the header: ErrCorrupt for the block's keys, right answers around.
func TestPointReadBreakLyingFrameLength(t *testing.T) {
	for _, compress := range []bool{false, true} {
		for _, delta := range []int{-1, -7, +1, +4096} {
			t.Run(fmt.Sprintf("s2=%v/delta=%d", compress, delta), func(t *testing.T) {
				f := prBuild(t, compress, delta%2 == 0)
				vi := len(f.frames) / 2
				fr := f.frames[vi]
				orig := make([]byte, wal.HeaderSize+len(fr.Payload))
				rf, err := f.mem.Open(f.path)
				require.NoError(t, err)
				_, err = rf.ReadAt(orig, fr.Off)
				require.NoError(t, err)
				require.NoError(t, rf.Close())
				lie := bytes.Clone(orig)
				binary.LittleEndian.PutUint32(lie[8:], uint32(len(fr.Payload)+delta))
				binary.LittleEndian.PutUint64(lie, xxhash.Sum64(lie[8:]))
				prWriteAt(t, f.mem, f.path, fr.Off, lie)

				s := mustOpen(t, "/db", f.opts)
				defer s.Close()
				for _, k := range bbBlockKeys(t, f.path, fr) {
					_, err := s.Get([]byte(k))
					require.ErrorIs(t, err, ErrCorrupt, k)
				}
				for _, k := range f.keys {
					prGet(t, s, f.model[k], k, "lying frame length")
				}
			})
		}
	}
}

// TestPointReadBreakTruncatedFile: the block file cut short inside a
// block, inside a frame header, at a frame, at its last byte, past the
// file header and inside it. Open must refuse it with ErrCorrupt, or, if
// it opens, answer no Get wrong. Then the same cuts behind the back of an
// open store that reads through pread: the keys of the blocks cut off
// read ErrCorrupt, never ErrNotFound or their older values.
func TestPointReadBreakTruncatedFile(t *testing.T) {
	f := prBuild(t, false, true)
	vi := len(f.frames) / 2
	cuts := []struct {
		name string
		at   int64
	}{
		{"mid-block", f.frames[vi].Off + wal.HeaderSize + int64(len(f.frames[vi].Payload))/2},
		{"mid-header", f.frames[vi].Off + 5},
		{"at-frame", f.frames[vi].Off},
		{"last-byte", f.newer.Size - 1},
		{"header-only", int64(segment.HeaderSize)},
		{"file-header", 3},
	}
	whole, err := f.mem.Open(f.path)
	require.NoError(t, err)
	orig := make([]byte, f.newer.Size)
	_, err = whole.ReadAt(orig, 0)
	require.NoError(t, err)
	require.NoError(t, whole.Close())
	restore := func() {
		fh, err := f.mem.OpenReadWrite(f.path)
		require.NoError(t, err)
		_, err = fh.WriteAt(orig, 0)
		require.NoError(t, err)
		require.NoError(t, fh.Close())
	}
	cut := func(at int64) {
		fh, err := f.mem.OpenReadWrite(f.path)
		require.NoError(t, err)
		require.NoError(t, fh.Truncate(at))
		require.NoError(t, fh.Close())
	}
	for _, c := range cuts {
		t.Run(c.name, func(t *testing.T) {
			defer restore()
			for _, mmap := range []bool{true, false} {
				cut(c.at)
				o := *f.opts
				o.DisableMmap = !mmap
				s, err := Open("/db", &o)
				if err == nil {
					for _, k := range f.keys {
						prGet(t, s, f.model[k], k, "opened truncated at "+c.name)
					}
					require.NoError(t, s.Close())
				} else {
					require.ErrorIs(t, err, ErrCorrupt)
				}
				restore()
			}
			// Cut while the store is open.
			s := mustOpen(t, "/db", f.opts)
			defer s.Close()
			for _, k := range f.keys {
				require.NotEqual(t, "corrupt", prGet(t, s, f.model[k], k, "whole"))
			}
			cut(c.at)
			var gone []string
			for _, fr := range f.frames {
				if fr.Off+wal.HeaderSize+int64(len(fr.Payload)) > c.at {
					gone = append(gone, bbBlockKeys(t, f.path, fr)...)
				}
			}
			require.NotEmpty(t, gone)
			for _, k := range gone {
				_, err := s.Get([]byte(k))
				require.ErrorIs(t, err, ErrCorrupt, "%q lies past the cut at %d", k, c.at)
			}
			for _, k := range f.keys {
				prGet(t, s, f.model[k], k, "cut behind the store at "+c.name)
			}
		})
	}
}

// TestPointReadBreakReadFaults: reads of the block file fail, persistently
// and once, whole and short (a device returning less than asked). A Get
// of a key the block file holds returns an error, never ErrNotFound or
// the older value; once the faults clear every key reads right.
func TestPointReadBreakReadFaults(t *testing.T) {
	f := prBuild(t, true, true)
	fs := vfs.NewFaulty(f.mem)
	o := *f.opts
	o.FS = fs
	s := mustOpen(t, "/db", &o)
	defer s.Close()
	onBlockFile := func(p string) bool { return p == f.path }
	var inBlock []string
	for _, fr := range f.frames {
		inBlock = append(inBlock, bbBlockKeys(t, f.path, fr)...)
	}
	check := func(k, ctx string) string {
		got, err := s.Get([]byte(k))
		if err != nil && errors.Is(err, vfs.ErrInjected) {
			require.NotErrorIs(t, err, ErrNotFound)
			return "fault"
		}
		want := f.model[k]
		return prCheckGot(t, want, k, ctx, got, err)
	}
	for _, short := range []bool{false, true} {
		require.NoError(t, fs.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: onBlockFile, Short: short}))
		faults := 0
		for _, k := range inBlock {
			if check(k, fmt.Sprintf("persistent read fault (short %v)", short)) == "fault" {
				faults++
			} else {
				t.Fatalf("Get(%q) answered with every read of the block file failing", k)
			}
		}
		require.Equal(t, len(inBlock), faults)
		fs.Clear()
	}
	// One read fails, at each of the first reads in turn.
	rng := rand.New(rand.NewPCG(5, 6))
	faults := 0
	for n := int64(1); n <= 40; n++ {
		require.NoError(t, fs.Inject(vfs.Fault{Op: vfs.OpRead, Nth: n%3 + 1, Match: onBlockFile, Short: n%2 == 0}))
		for range 3 {
			k := f.keys[rng.IntN(len(f.keys))]
			if check(k, fmt.Sprintf("one read fault, #%d", n)) == "fault" {
				faults++
			}
		}
		fs.Clear()
	}
	require.Positive(t, faults)
	for _, k := range f.keys {
		require.NotEqual(t, "fault", check(k, "faults cleared"))
		require.NotEqual(t, "corrupt", check(k, "faults cleared"))
	}
}

// prCheckGot is prGet for an answer already read.
func prCheckGot(t *testing.T, want prWant, key, ctx string, got []byte, err error) string {
	t.Helper()
	switch {
	case err == nil:
		if !want.live || string(got) != want.val {
			t.Fatalf("%s: Get(%q) = %q, want %+v", ctx, key, got, want)
		}
		return "ok"
	case errors.Is(err, ErrNotFound):
		if want.live {
			t.Fatalf("%s: Get(%q) = ErrNotFound, want %q", ctx, key, want.val)
		}
		return "absent"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	}
	t.Fatalf("%s: Get(%q): unexpected error %v", ctx, key, err)
	return ""
}

// TestPointReadBreakGetDuringClose: Gets of a block file, mapped and
// read through pread, raw and S2, run while Close does: each answers
// right or ErrClosed; nothing panics (run it with -race).
func TestPointReadBreakGetDuringClose(t *testing.T) {
	for _, c := range []struct{ compress, mmap bool }{{false, true}, {true, false}} {
		t.Run(fmt.Sprintf("s2=%v/mmap=%v", c.compress, c.mmap), func(t *testing.T) {
			f := prBuild(t, c.compress, !c.mmap)
			for round := range 3 {
				s := mustOpen(t, "/db", f.opts)
				var wg sync.WaitGroup
				var mu sync.Mutex
				var answered, closed int
				errc := make(chan error, 4)
				// Close waits until every reader has answered once, so
				// that the count asserted below never depends on how fast
				// the goroutines get going on a loaded machine.
				var started sync.WaitGroup
				started.Add(4)
				for g := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var first sync.Once
						defer first.Do(started.Done) // a reader that failed first
						rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
						for {
							k := f.keys[rng.IntN(len(f.keys))]
							got, err := s.Get([]byte(k))
							want := f.model[k]
							switch {
							case errors.Is(err, ErrClosed):
								mu.Lock()
								closed++
								mu.Unlock()
								return
							case err == nil && want.live && string(got) == want.val,
								errors.Is(err, ErrNotFound) && !want.live:
								mu.Lock()
								answered++
								mu.Unlock()
								first.Do(started.Done)
							default:
								errc <- fmt.Errorf("Get(%q) = %q, %v; want %+v", k, got, err, want)
								return
							}
						}
					}()
				}
				started.Wait()
				time.Sleep(time.Duration(5*round) * time.Millisecond)
				require.NoError(t, s.Close())
				wg.Wait()
				close(errc)
				for err := range errc {
					t.Error(err)
				}
				require.Positive(t, answered)
				require.Equal(t, 4, closed)
			}
		})
	}
}

// prFrameBytes reads the frame fr of the fixture's block file as it is on
// disk.
func prFrameBytes(t *testing.T, f *prFixture, fr wal.Frame) []byte {
	t.Helper()
	b := make([]byte, wal.HeaderSize+len(fr.Payload))
	rf, err := f.mem.Open(f.path)
	require.NoError(t, err)
	_, err = rf.ReadAt(b, fr.Off)
	require.NoError(t, err)
	require.NoError(t, rf.Close())
	_, err = wal.CheckFrame(b, f.path, fr.Off)
	require.NoError(t, err)
	return b
}

// TestPointReadBreakMappedSample is TestPointReadBreakEveryByte through a
// mapping (the read path that copies a raw block's record out of the
// mapping before verifying it): a mem file's mapping is a copy taken at
// Open, so each flip reopens the store, and a sample of the bytes is
// flipped: every header byte, then every 23rd.
func TestPointReadBreakMappedSample(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("s2=%v", compress), func(t *testing.T) {
			f := prBuild(t, compress, false)
			vi := len(f.frames) / 2
			fr := f.frames[vi]
			orig := prFrameBytes(t, f, fr)
			probe := prProbeKeys(t, f, vi)
			counts := map[string]int{}
			for at := 0; at < len(orig); at += map[bool]int{true: 1, false: 23}[at < wal.HeaderSize] {
				for _, valid := range []bool{false, true} {
					if valid && at < wal.HeaderSize {
						continue
					}
					damaged := bytes.Clone(orig)
					damaged[at] ^= byte(1 << (at % 8))
					if valid {
						damaged = reseal(damaged)
					}
					prWriteAt(t, f.mem, f.path, fr.Off, damaged)
					s := mustOpen(t, "/db", f.opts)
					ctx := fmt.Sprintf("mapped, frame byte %d (valid frame %v)", at, valid)
					for _, k := range probe {
						counts[prGet(t, s, f.model[k], k, ctx)]++
					}
					require.NoError(t, s.Close())
				}
			}
			prWriteAt(t, f.mem, f.path, fr.Off, orig)
			t.Logf("%v", counts)
			require.Positive(t, counts["corrupt"])
			require.Positive(t, counts["ok"])
		})
	}
}

// TestPointReadBreakRandomDamage: a few random bytes of a block's payload
// set to random values, raw and S2, the frame checksum recomputed so that
// only the block decoder, the walk's rules and the records' checksums
// stand in the way; several times as many trials with the checksum left
// stale. Read in place (pread), every key of the block and around it.
func TestPointReadBreakRandomDamage(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("s2=%v", compress), func(t *testing.T) {
			f := prBuild(t, compress, true)
			vi := len(f.frames) / 2
			fr := f.frames[vi]
			orig := prFrameBytes(t, f, fr)
			probe := prProbeKeys(t, f, vi)
			s := mustOpen(t, "/db", f.opts)
			defer s.Close()
			w := prOpenWriter(t, f)
			rng := rand.New(rand.NewPCG(21, uint64(len(orig))))
			counts := map[string]int{}
			for trial := range 400 {
				damaged := bytes.Clone(orig)
				n := 1 + rng.IntN(4)
				var where []int
				for range n {
					// Mostly near each other: a torn or smeared spot.
					at := wal.HeaderSize + rng.IntN(len(orig)-wal.HeaderSize)
					if len(where) > 0 && rng.IntN(2) == 0 {
						at = min(where[0]+rng.IntN(8), len(orig)-1)
					}
					damaged[at] = byte(rng.UintN(256))
					where = append(where, at)
				}
				valid := trial%2 == 0
				if valid {
					damaged = reseal(damaged)
				}
				w.write(fr.Off, damaged)
				ctx := fmt.Sprintf("trial %d: bytes %v set (valid frame %v)", trial, where, valid)
				for _, k := range probe {
					counts[prGet(t, s, f.model[k], k, ctx)]++
				}
			}
			w.write(fr.Off, orig)
			t.Logf("%v", counts)
			require.Positive(t, counts["corrupt"])
			require.Positive(t, counts["ok"])
		})
	}
}

// TestPointReadBreakConcurrentDamagedGets: many Gets at once of a damaged
// block's keys (the point read's buffers come from a pool) and of the
// keys around it: each answers right or ErrCorrupt (run it with -race).
func TestPointReadBreakConcurrentDamagedGets(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("s2=%v", compress), func(t *testing.T) {
			f := prBuild(t, compress, !compress)
			vi := len(f.frames) / 2
			fr := f.frames[vi]
			damaged := prFrameBytes(t, f, fr)
			damaged[wal.HeaderSize+len(fr.Payload)/2] ^= 0x10
			prWriteAt(t, f.mem, f.path, fr.Off, damaged)
			s := mustOpen(t, "/db", f.opts)
			defer s.Close()
			probe := prProbeKeys(t, f, vi)
			var wg sync.WaitGroup
			errc := make(chan error, 4)
			var mu sync.Mutex
			counts := map[string]int{}
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(7, uint64(g)))
					for range 1500 {
						k := probe[rng.IntN(len(probe))]
						got, err := s.Get([]byte(k))
						want := f.model[k]
						out := ""
						switch {
						case err == nil && want.live && string(got) == want.val:
							out = "ok"
						case errors.Is(err, ErrNotFound) && !want.live:
							out = "absent"
						case errors.Is(err, ErrCorrupt):
							out = "corrupt"
						default:
							errc <- fmt.Errorf("Get(%q) = %q, %v; want %+v", k, got, err, want)
							return
						}
						mu.Lock()
						counts[out]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			t.Logf("%v", counts)
			require.Positive(t, counts["corrupt"])
			require.Positive(t, counts["ok"])
		})
	}
}
