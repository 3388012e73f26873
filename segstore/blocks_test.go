package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// Merge outputs are block data files (segment.BlockVersion): key-ordered
// blocks of whole records, compressed unless Options.DisableCompression.
// These tests hold a merged store to the same answers as the records it
// was written with, through every reader of block files: Get, iterators in
// both directions, a merge of merged segments, Check, Verify, an index
// rebuild, Export and Import.

// blockFixture writes rounds of compressible values (the same text with the
// key's number in it), seals after each round, and compacts: one merged
// segment. It returns the store, its model and the raw bytes of the
// records the model holds.
func blockFixture(t *testing.T, dir string, o *Options) (*Store, model, int64) {
	t.Helper()
	s := mustOpen(t, dir, o)
	m := model{}
	rng := rand.New(rand.NewPCG(1, 2))
	for r := 0; r < 3; r++ {
		for i := 0; i < 2000; i++ {
			k := fmt.Sprintf("key-%05d", rng.IntN(3000))
			if rng.IntN(8) == 0 {
				require.NoError(t, s.Delete([]byte(k)))
				delete(m, k)
				continue
			}
			v := fmt.Sprintf(`{"round":%d,"id":%d,"name":"user %s","tags":["alpha","beta","gamma"],"pad":"%s"}`,
				r, i, k, bytes.Repeat([]byte("z"), rng.IntN(300)))
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		require.NoError(t, s.Seal())
	}
	require.NoError(t, s.DeleteRange([]byte("key-00100"), []byte("key-00200")))
	m.deleteRange("key-00100", "key-00200")
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(context.Background()))
	var raw int64
	for k, v := range m {
		raw += int64(segment.EncodedLen(len(k), len(v)))
	}
	return s, m, raw
}

// dataHeaderVersion reads the format version of segment id's data file.
func dataHeaderVersion(t *testing.T, fsys vfs.FS, s *Store, id uint64) uint32 {
	t.Helper()
	kind := s.mlog.State().Segments[id].FileKind
	f, err := fsys.Open(filepath.Join(s.dir, segment.DataName(id, kind)))
	require.NoError(t, err)
	defer f.Close()
	h := make([]byte, segment.HeaderSize)
	_, err = f.ReadAt(h, 0)
	require.NoError(t, err)
	require.NoError(t, segment.CheckHeader("data", h))
	return segment.HeaderVersion(h)
}

func TestMergeWritesBlocks(t *testing.T) {
	for _, c := range []struct {
		name     string
		compress bool
	}{{"s2", true}, {"raw", false}} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, SegmentSize: 1 << 20, DisableCompression: !c.compress, Merge: MergeOptions{Disable: true}}
			s, m, raw := blockFixture(t, "/db", o)
			segs := s.Segments()
			require.Len(t, segs, 1)
			require.EqualValues(t, segment.BlockVersion, dataHeaderVersion(t, mem, s, segs[0].ID))
			if c.compress {
				// The values share most of their text: well under half.
				require.Less(t, segs[0].Size, raw/2, "compressed output of %d record bytes", raw)
			} else {
				require.Greater(t, segs[0].Size, raw, "raw output holds every record whole")
			}
			require.NoError(t, fullDiff(s, m, []string{"key-00100", "key-00199", "key-99999"}))
			requireReverseScan(t, s, m)
			for k, v := range m {
				got, err := s.Get([]byte(k))
				require.NoError(t, err, k)
				require.Equal(t, v, string(got), k)
			}
			rep, err := s.Verify(context.Background())
			require.NoError(t, err)
			require.Empty(t, rep.Damaged)
			checkAndClose(t, s)

			// The index is a cache: without it, Open rebuilds it from the
			// blocks, byte for byte, and the answers are the same.
			idxPath := filepath.Join("/db", segment.IndexName(segs[0].ID))
			idx, err := mem.ReadFile(idxPath)
			require.NoError(t, err)
			require.NoError(t, mem.Remove(idxPath))
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, nil))
			require.Len(t, s.RecoveryReport().RebuiltIndexes, 1)
			again, err := mem.ReadFile(idxPath)
			require.NoError(t, err)
			require.Equal(t, idx, again)
			// Sparse: an entry per block, far fewer than the keys, and
			// the file a few bytes per key (a dense one is above 30).
			ix := s.Segments()[0]
			sg := s.mu.segs[0]
			require.True(t, sg.index().BlockFile())
			require.Less(t, sg.index().Len(), int(ix.Keys)/4)
			require.Less(t, int64(len(idx)), 8*int64(ix.Keys), "index of %d keys", ix.Keys)

			// A merge of a block file with newer data reads the blocks.
			require.NoError(t, s.Put([]byte("key-00000"), []byte("newest")))
			m["key-00000"] = "newest"
			require.NoError(t, s.Seal())
			require.NoError(t, s.Compact(context.Background()))
			require.Len(t, s.Segments(), 1)
			require.NoError(t, fullDiff(s, m, nil))
			checkAndClose(t, s)
		})
	}
}

// requireReverseScan walks the store backward and compares with m.
func requireReverseScan(t *testing.T, s *Store, m model) {
	t.Helper()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	n := 0
	var prev []byte
	for ok := it.Last(); ok; ok = it.Prev() {
		k := it.Key()
		if prev != nil {
			require.Negative(t, bytes.Compare(k, prev))
		}
		prev = bytes.Clone(k)
		v, err := it.Value()
		require.NoError(t, err)
		require.Equal(t, m[string(k)], string(v), string(k))
		n++
	}
	require.NoError(t, it.Err())
	require.Equal(t, len(m), n)
}

// A damaged block is refused, never read as another answer: the keys it
// holds fail with ErrCorrupt on every path, the others still read, and
// Verify names the file.
func TestDamagedBlockIsRefused(t *testing.T) {
	for _, mmap := range []bool{true, false} {
		t.Run(fmt.Sprintf("mmap=%v", mmap), func(t *testing.T) {
			dir := t.TempDir()
			osfs := vfs.NewOS()
			o := &Options{FS: osfs, SegmentSize: 1 << 20, DisableMmap: !mmap, Merge: MergeOptions{Disable: true}}
			s, m, _ := blockFixture(t, dir, o)
			seg := s.Segments()[0]
			require.NoError(t, s.Close())

			// Flip one byte in the middle of the third block's payload.
			path := filepath.Join(dir, segment.DataName(seg.ID, segment.KindSeg))
			mem := osfs
			f, err := mem.Open(path)
			require.NoError(t, err)
			var frames []wal.Frame
			_, err = wal.ScanFrames(f, path, segment.HeaderSize, seg.Size, func(fr wal.Frame) error {
				frames = append(frames, wal.Frame{Off: fr.Off, Payload: bytes.Clone(fr.Payload)})
				return nil
			})
			require.NoError(t, f.Close())
			require.NoError(t, err)
			require.Greater(t, len(frames), 3)
			victim := frames[2]
			var victimKeys []string
			var walk segment.FrameWalk
			require.NoError(t, segment.ForEachFrameRecord(path, segment.BlockVersion, victim.Off, victim.Payload, segment.MaxBlockRecords, &walk,
				func(r segment.Record, _ int64, _ int) error {
					victimKeys = append(victimKeys, string(r.Key))
					return nil
				}))
			require.NotEmpty(t, victimKeys)
			testutil.FlipByte(t, mem, path, victim.Off+wal.HeaderSize+int64(len(victim.Payload)/2), 0xff)

			s = mustOpen(t, dir, o)
			defer s.Close()
			for _, k := range victimKeys {
				if _, live := m[k]; !live {
					continue
				}
				_, err := s.Get([]byte(k))
				require.ErrorIs(t, err, ErrCorrupt, k)
			}
			for k, v := range m {
				if !slices.Contains(victimKeys, k) {
					got, err := s.Get([]byte(k))
					require.NoError(t, err, k)
					require.Equal(t, v, string(got))
				}
			}
			// A scan reaches the damaged block and says so.
			it, err := s.NewIterator(nil)
			require.NoError(t, err)
			var scanErr error
			for ok := it.First(); ok && scanErr == nil; ok = it.Next() {
				v, err := it.Value()
				if err != nil {
					scanErr = err
					break
				}
				require.Equal(t, m[string(it.Key())], string(v))
			}
			if scanErr == nil {
				// The walk of the keys reached the block first.
				scanErr = it.Err()
			}
			require.NoError(t, it.Close())
			require.ErrorIs(t, scanErr, ErrCorrupt)
			rep, err := s.Verify(context.Background())
			require.NoError(t, err)
			require.Len(t, rep.Damaged, 1)
			require.ErrorIs(t, rep.Damaged[0], ErrCorrupt)
			// A merge must not launder the damage into a new file.
			require.NoError(t, s.Put([]byte("key-00000"), []byte("x")))
			require.NoError(t, s.Seal())
			err = s.Compact(context.Background())
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// Export streams a block file as it is; Import checks every block and
// record of it and answers the same.
func TestExportImportBlocks(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
	s, m, _ := blockFixture(t, "/db", o)
	defer s.Close()
	seg := s.Segments()[0]
	var buf bytes.Buffer
	_, err := s.Export(context.Background(), seg.ID, &buf)
	require.NoError(t, err)

	mem2 := vfs.NewMem()
	d := mustOpen(t, "/db", &Options{FS: mem2, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	infos, err := d.Import(context.Background(), bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, seg.Digest, infos[0].Digest)
	require.NoError(t, fullDiff(d, m, nil))
	checkAndClose(t, d)

	// A stream whose block does not decompress is refused whole.
	bad := bytes.Clone(buf.Bytes())
	var off int64 = segment.HeaderSize
	_, payload, err := wal.NewStreamReader(bytes.NewReader(bad[off:]), "x", off, 1<<30).Next()
	require.NoError(t, err)
	require.EqualValues(t, segment.CodecS2, payload[0])
	// Rewrite the first frame with a garbled body but a valid checksum.
	garbled := bytes.Clone(payload)
	for i := 1; i < len(garbled); i++ {
		garbled[i] ^= 0x5a
	}
	frame := wal.AppendFrame(nil, garbled, 0)
	bad = append(append(bytes.Clone(bad[:off]), frame...), bad[off+int64(wal.HeaderSize+len(payload)):]...)
	mem3 := vfs.NewMem()
	d = mustOpen(t, "/db", &Options{FS: mem3, Merge: MergeOptions{Disable: true}})
	_, err = d.Import(context.Background(), bytes.NewReader(bad))
	require.ErrorIs(t, err, ErrCorrupt)
	require.Empty(t, d.Segments())
	checkAndClose(t, d)
}

// A block file is never appended to: an Open that found one named as a
// live file would be a bug elsewhere, and UpgradeHeader refuses it.
func TestBlockFileRefusesAppends(t *testing.T) {
	mem := vfs.NewMem()
	f, err := mem.Create("/x.log")
	require.NoError(t, err)
	_, err = f.WriteAt(segment.HeaderVersioned(segment.BlockVersion), 0)
	require.NoError(t, err)
	_, err = segment.UpgradeHeader(f, "/x.log")
	require.True(t, errors.Is(err, ErrCorrupt), "%v", err)
	require.NoError(t, f.Close())
}
