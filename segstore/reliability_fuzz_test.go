package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// FuzzImport feeds arbitrary bytes to Store.Import as a peer's segment
// stream. It must never panic. Either the stream imports cleanly (the store
// then holds exactly those bytes as a new segment, passes Check and reads
// the same after a reopen), or Import fails with an *ImportError and the
// store is unchanged: same manifest sequence, same segments, same files,
// same answers. The committed seed corpus (testdata/fuzz/FuzzImport) holds
// real exported segments (a sealed live file with its link record, a merge
// output) and damaged variants; SEGKV_WRITE_FUZZ_SEEDS=1 rewrites it.
func FuzzImport(f *testing.F) {
	for _, s := range importSeeds(f) {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := vfs.NewMem()
		o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}, MaxKeySize: 64, MaxValueSize: 1 << 10}
		gs, err := openGated("/db", o)
		require.NoError(t, err)
		defer gs.closeAll()
		want := model{}
		for i := range 8 {
			k, v := fmt.Sprintf("key-%03d", i), fmt.Sprintf("local-%d", i)
			require.NoError(t, gs.Put([]byte(k), []byte(v)))
			want[k] = v
		}
		require.NoError(t, gs.Seal())
		require.NoError(t, gs.Put([]byte("live"), []byte("x")))
		want["live"] = "x"
		seq, segs, files := gs.ManifestSeq(), gs.Segments(), mem.FileNames()

		infos, err := gs.Import(t.Context(), bytes.NewReader(data))
		if err != nil {
			var ie *ImportError
			require.True(t, errors.As(err, &ie), "import error is not an *ImportError: %v", err)
			t.Logf("refused: %v", err)
			require.Equal(t, 0, ie.Stream)
			require.Equal(t, seq, gs.ManifestSeq(), "a refused import committed")
			require.Equal(t, segs, gs.Segments(), "a refused import changed the segments")
			require.Equal(t, files, mem.FileNames(), "a refused import left files behind")
			require.NoError(t, fullDiff(gs.Store, want, nil))
			return
		}
		if len(infos) == 0 {
			// Skipped: a segment with the same digest is already present.
			require.NoError(t, fullDiff(gs.Store, want, nil))
			return
		}
		// Accepted: the new segment is exactly the stream.
		require.Len(t, infos, 1)
		t.Logf("imported: %d bytes, %d records", infos[0].Size, infos[0].Records)
		require.Equal(t, int64(len(data)), infos[0].Size)
		require.Equal(t, digestOf(data), infos[0].Digest)
		require.NoError(t, gs.Check())
		before := scanAll(t, gs.Store)
		require.Equal(t, "x", before["live"], "an import goes below the live file")
		require.NoError(t, gs.closeAll())
		s, err := Open("/db", o)
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, fullDiff(s, before, nil))
		require.NoError(t, s.Check())
	})
}

func scanAll(t *testing.T, s *Store) model {
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	return scan(t, it)
}

type importSeed struct {
	name string
	data []byte
}

// importSeeds builds real exported segments and damaged variants, and
// (with SEGKV_WRITE_FUZZ_SEEDS=1) writes them as the committed corpus.
func importSeeds(tb testing.TB) []importSeed {
	peer := mustOpen(tb, "/peer", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	defer peer.Close()
	for i := range 12 {
		require.NoError(tb, peer.Put([]byte(fmt.Sprintf("key-%03d", i%7)), []byte(fmt.Sprintf("peer-%d", i))))
	}
	require.NoError(tb, peer.Delete([]byte("key-003")))
	b := peer.NewBatch()
	b.Put([]byte("batch-a"), []byte("1"))
	b.Put([]byte("batch-b"), []byte("2"))
	require.NoError(tb, peer.Apply(b))
	sealed := exportNewest(tb, peer) // a sealed live file: starts with a link record
	require.NoError(tb, peer.Put([]byte("key-010"), []byte("second")))
	require.NoError(tb, peer.Seal())
	require.NoError(tb, peer.Compact(tb.Context()))
	segs := peer.Segments()
	var merged bytes.Buffer
	_, err := peer.Export(tb.Context(), segs[len(segs)-1].ID, &merged)
	require.NoError(tb, err)

	flip := func(b []byte, i int) []byte { c := slices.Clone(b); c[i] ^= 0x04; return c }
	seeds := []importSeed{
		{"sealed-live-file", sealed},
		{"merged", merged.Bytes()},
		{"header-only", sealed[:16]},
		{"empty", nil},
		{"short-header", sealed[:9]},
		{"flipped-header", flip(sealed, 3)},
		{"flipped-frame-header", flip(sealed, 16+9)},
		{"flipped-record", flip(sealed, len(sealed)-5)},
		{"torn-last-frame", sealed[:len(sealed)-3]},
		{"trailing-zeros", append(slices.Clone(sealed), make([]byte, 40)...)},
		{"two-segments", append(slices.Clone(sealed), merged.Bytes()...)},
		{"garbage", bytes.Repeat([]byte{0xa5, 0x5a, 0x01}, 40)},
	}
	if os.Getenv("SEGKV_WRITE_FUZZ_SEEDS") != "" {
		dir := filepath.Join("testdata", "fuzz", "FuzzImport")
		require.NoError(tb, os.MkdirAll(dir, 0o755))
		for _, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
			require.NoError(tb, os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644))
		}
	}
	return seeds
}
