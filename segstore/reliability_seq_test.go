package segstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// Sequence checks: a manifest whose sequence numbers have a gap or a repeat,
// and a segment that the manifest names but that is missing or shorter than
// recorded, must make Open fail with a typed corruption error naming the
// file, never open as a silently smaller store.

// seqFixture is a closed store with a checkpoint followed by several edits
// (seals, a merge, an import), and what it holds.
type seqFixture struct {
	mem  *vfs.Mem
	mani string
	want model
	segs []SegmentInfo
	data []string
	live string // the live file the manifest names
}

func buildSeqFixture(t *testing.T) *seqFixture {
	t.Helper()
	mem := vfs.NewMem()
	o := seqOpts(mem)
	s := mustOpen(t, "/db", o)
	want := model{}
	n := 0
	put := func(k int) {
		for range k {
			key, v := fmt.Sprintf("key-%03d", n%50), fmt.Sprintf("v%d", n)
			require.NoError(t, s.Put([]byte(key), []byte(v)))
			want[key] = v
			n++
		}
	}
	put(20)
	require.NoError(t, s.Seal())
	put(20)
	require.NoError(t, s.Seal())
	require.NoError(t, s.mlog.Checkpoint())
	put(20)
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(t.Context()))
	peer := mustOpen(t, "/peer", seqOpts(vfs.NewMem()))
	require.NoError(t, peer.Put([]byte("imp"), []byte("peer")))
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())
	_, err := s.Import(t.Context(), readers([][]byte{stream})...)
	require.NoError(t, err)
	want["imp"] = "peer"
	put(20)
	require.NoError(t, s.Seal())
	put(5)
	fx := &seqFixture{mem: mem, mani: s.mreport.Path, want: want, segs: s.Segments()}
	fx.data, _ = dataPaths(s)
	fx.live = filepath.Join("/db", segment.DataName(s.mlog.State().LiveID, segment.KindLog))
	require.NoError(t, s.Close())
	fx.mani = currentManifest(t, mem)
	return fx
}

func currentManifest(t *testing.T, mem *vfs.Mem) string {
	var out []string
	for _, p := range mem.FileNames() {
		if strings.HasPrefix(filepath.Base(p), "MANIFEST-") {
			out = append(out, p)
		}
	}
	require.Len(t, out, 1)
	return out[0]
}

// clone copies the fixture's files into a fresh Mem.
func (fx *seqFixture) clone(t *testing.T) *vfs.Mem {
	mem := vfs.NewMem()
	for _, p := range fx.mem.FileNames() {
		b, err := fx.mem.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, mem.WriteFile(p, b))
	}
	return mem
}

// editFrame is a manifest edit record located in its file.
type editFrame struct {
	off       int64
	watermark uint64
	payload   []byte
	seq       uint64
}

// manifestEdits returns the frames of a manifest and the edit records among
// them (kind 4), with their sequence numbers.
func manifestEdits(t *testing.T, b []byte) (frames []frameSpan, edits []editFrame) {
	for _, fr := range testutil.Frames(t, b, "/m", 0) {
		frames = append(frames, frameSpan{off: fr.Off, end: fr.Off + fr.Size()})
		if fr.Payload[0] == 4 {
			seq, n := binary.Uvarint(fr.Payload[1:])
			require.Positive(t, n)
			edits = append(edits, editFrame{off: fr.Off, watermark: fr.Watermark, payload: fr.Payload, seq: seq})
		}
	}
	return frames, edits
}

// reseq rewrites an edit record with sequence number seq: its own seq and
// the added-seq of every segment it adds, which must agree. The frame keeps
// its watermark and gets a valid checksum: this is a manifest written wrong,
// not damaged afterwards. The new seq must encode to as many bytes as the old.
func reseq(t *testing.T, e editFrame, seq uint64) []byte {
	p := e.payload
	old, n := binary.Uvarint(p[1:])
	require.Equal(t, len(binary.AppendUvarint(nil, old)), len(binary.AppendUvarint(nil, seq)))
	out := append([]byte{p[0]}, binary.AppendUvarint(nil, seq)...)
	pos := 1 + n
	flags := p[pos]
	out = append(out, flags)
	pos++
	uv := func() {
		_, k := binary.Uvarint(p[pos:])
		require.Positive(t, k)
		out = append(out, p[pos:pos+k]...)
		pos += k
	}
	if flags&1 != 0 {
		uv() // live id
	}
	uv() // next id
	uv() // next order
	nAdd, k := binary.Uvarint(p[pos:])
	out = append(out, p[pos:pos+k]...)
	pos += k
	for range nAdd {
		uv()                                // id
		out = append(out, p[pos])           // file kind
		pos++                               //
		uv()                                // order
		uv()                                // data length
		out = append(out, p[pos:pos+16]...) // digest, index checksum
		pos += 16                           //
		uv()                                // records
		uv()                                // keys
		for range 2 {                       // min key, max key
			l, k := binary.Uvarint(p[pos:])
			out = append(out, p[pos:pos+k+int(l)]...)
			pos += k + int(l)
		}
		added, k := binary.Uvarint(p[pos:])
		require.Equal(t, old, added)
		out = binary.AppendUvarint(out, seq)
		pos += k
	}
	out = append(out, p[pos:]...)
	require.Len(t, out, len(p))
	return wal.AppendFrame(nil, out, e.watermark)
}

func TestReliabilityManifestSequence(t *testing.T) {
	fx := buildSeqFixture(t)
	orig, err := fx.mem.ReadFile(fx.mani)
	require.NoError(t, err)
	_, edits := manifestEdits(t, orig)
	require.GreaterOrEqual(t, len(edits), 4, "the fixture needs several edits after its checkpoint")
	for i, e := range edits[1:] {
		require.Equal(t, edits[i].seq+1, e.seq)
	}
	first, last := edits[0].seq, edits[len(edits)-1].seq
	ckpt := first - 1 // the first edit after the checkpoint follows it directly

	type tc struct {
		name string
		edit int    // which edit record to rewrite
		seq  uint64 // its new sequence number
	}
	var cases []tc
	for i := range edits {
		s := edits[i].seq
		cases = append(cases,
			tc{fmt.Sprintf("gap: edit %d skips one", s), i, s + 1},
			tc{fmt.Sprintf("gap: edit %d jumps far", s), i, s + 50},
		)
		if i > 0 {
			cases = append(cases,
				tc{fmt.Sprintf("repeat: edit %d repeats its predecessor", s), i, s - 1},
				tc{fmt.Sprintf("backwards: edit %d goes back to the first", s), i, first})
		}
	}
	cases = append(cases, tc{fmt.Sprintf("repeat: the first edit repeats the checkpoint's seq %d", ckpt), 0, ckpt})
	checked := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.seq > 127 || c.seq == 0 {
				t.Skip("keeps one-byte varints")
			}
			e := edits[c.edit]
			b := slices.Clone(orig)
			frame := reseq(t, e, c.seq)
			copy(b[e.off:], frame)
			mem := fx.clone(t)
			require.NoError(t, mem.WriteFile(fx.mani, b))
			s, err := Open("/db", seqOpts(mem))
			if err == nil {
				defer s.Close()
				t.Fatalf("Open accepted a manifest whose edit %d says seq %d (last seq %d): store has %d segments, ManifestSeq %d; %v",
					e.seq, c.seq, last, len(s.Segments()), s.ManifestSeq(), fullDiff(s, fx.want, nil))
			}
			require.ErrorIs(t, err, ErrCorrupt)
			require.True(t, namesFile(err, fx.mani), "error must name the manifest: %v", err)
			var ce *CorruptionError
			require.True(t, errors.As(err, &ce))
			require.Equal(t, e.off, ce.Offset, "error must point at the rewritten record: %v", err)
			checked++
		})
	}
	t.Logf("manifest sequence damage cases refused with a typed error: %d of %d", checked, len(cases))
}

func TestReliabilityMissingOrShortSegment(t *testing.T) {
	fx := buildSeqFixture(t)
	require.GreaterOrEqual(t, len(fx.data), 3)
	kinds := map[string]int{}
	cases := 0
	for _, p := range fx.data {
		kinds[filepath.Ext(p)]++
		size, err := fx.mem.Stat(p)
		require.NoError(t, err)
		damage := map[string]func(mem *vfs.Mem) error{
			"missing":        func(mem *vfs.Mem) error { return mem.Remove(p) },
			"empty":          func(mem *vfs.Mem) error { return mem.WriteFile(p, nil) },
			"header only":    func(mem *vfs.Mem) error { return truncateTo(mem, p, segment.HeaderSize) },
			"half":           func(mem *vfs.Mem) error { return truncateTo(mem, p, size/2) },
			"one byte short": func(mem *vfs.Mem) error { return truncateTo(mem, p, size-1) },
			"renamed to the other kind": func(mem *vfs.Mem) error {
				other := strings.TrimSuffix(p, filepath.Ext(p))
				if filepath.Ext(p) == ".log" {
					other += ".seg"
				} else {
					other += ".log"
				}
				return mem.Rename(p, other)
			},
		}
		for name, fn := range damage {
			t.Run(filepath.Base(p)+" "+name, func(t *testing.T) {
				mem := fx.clone(t)
				require.NoError(t, fn(mem))
				s, err := Open("/db", seqOpts(mem))
				if err == nil {
					defer s.Close()
					t.Fatalf("Open accepted a store whose segment %s is %s: %d segments; %v", p, name, len(s.Segments()), fullDiff(s, fx.want, nil))
				}
				require.ErrorIs(t, err, ErrCorrupt)
				require.True(t, namesFile(err, p), "error must name %s: %v", p, err)
				// The refusal changed nothing: with the file restored, the
				// store opens whole.
				orig, rerr := fx.mem.ReadFile(p)
				require.NoError(t, rerr)
				require.NoError(t, mem.WriteFile(p, orig))
				for _, n := range mem.FileNames() {
					if strings.HasPrefix(n, strings.TrimSuffix(p, filepath.Ext(p))) && n != p && !strings.HasSuffix(n, ".idx") {
						require.NoError(t, mem.Remove(n))
					}
				}
				s, err = Open("/db", seqOpts(mem))
				require.NoError(t, err)
				defer s.Close()
				require.NoError(t, fullDiff(s, fx.want, nil))
				require.NoError(t, s.Check())
				cases++
			})
		}
	}
	t.Logf("missing or short segment cases refused with a typed error naming the file: %d (data files by kind %v)", cases, kinds)
}

// TestReliabilityMissingLiveFileOrManifest: the live file the manifest names,
// or the manifest itself, gone. Open must refuse rather than start empty.
func TestReliabilityMissingLiveFileOrManifest(t *testing.T) {
	fx := buildSeqFixture(t)
	live := fx.live
	for name, victim := range map[string]string{"live file": live, "manifest": fx.mani} {
		t.Run(name, func(t *testing.T) {
			mem := fx.clone(t)
			require.NoError(t, mem.Remove(victim))
			s, err := Open("/db", seqOpts(mem))
			if err == nil {
				defer s.Close()
				t.Fatalf("Open accepted a store without its %s %s: %d segments; %v", name, victim, len(s.Segments()), fullDiff(s, fx.want, nil))
			}
			t.Logf("refused: %v", err)
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist), "%v", err)
			// Nothing was removed by the refused Open.
			for _, p := range fx.data {
				_, err := mem.Stat(p)
				require.NoError(t, err, "refused Open removed %s", p)
			}
		})
	}
}

func truncateTo(mem *vfs.Mem, p string, n int64) error {
	b, err := mem.ReadFile(p)
	if err != nil {
		return err
	}
	return mem.WriteFile(p, b[:n])
}

// TestReliabilityManifestRepeatAfterCheckpoint: the only edit after a
// checkpoint (an import) repeats the checkpoint's sequence number. Replay
// skipped such an edit as "already covered by the checkpoint", and the store
// opened without the acknowledged import.
func TestReliabilityManifestRepeatAfterCheckpoint(t *testing.T) {
	mem := vfs.NewMem()
	o := seqOpts(mem)
	s := mustOpen(t, "/db", o)
	require.NoError(t, s.Put([]byte("k"), []byte("old")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.mlog.Checkpoint())
	ckpt := s.ManifestSeq()
	peer := mustOpen(t, "/peer", seqOpts(vfs.NewMem()))
	require.NoError(t, peer.Put([]byte("k"), []byte("imported")))
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())
	_, err := s.Import(t.Context(), readers([][]byte{stream})...)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	mani := currentManifest(t, mem)
	b, err := mem.ReadFile(mani)
	require.NoError(t, err)
	_, edits := manifestEdits(t, b)
	require.Len(t, edits, 1)
	require.Equal(t, ckpt+1, edits[0].seq)
	copy(b[edits[0].off:], reseq(t, edits[0], ckpt))
	require.NoError(t, mem.WriteFile(mani, b))

	st, err := Open("/db", o)
	if err == nil {
		defer st.Close()
		v, gerr := st.Get([]byte("k"))
		t.Fatalf("Open accepted an edit that repeats the checkpoint's seq %d: k = %q (%v), want the imported value or an error", ckpt, v, gerr)
	}
	require.ErrorIs(t, err, ErrCorrupt)
	require.True(t, namesFile(err, mani), "%v", err)
}

// seqOpts keeps live files small: the default 64 MiB preallocation would make
// copying a fixture file by file slow.
func seqOpts(mem *vfs.Mem) *Options {
	return &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
}
