package segstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// testdata/denseblockstore was written by 0f073d5 (the commit before block
// files got a sparse index) with a test in its segstore package that
// opened $SEGKV_OLD_DIR on vfs.NewOS() with SegmentSize 1 MiB and merges
// off, put k0000..k0599 = "r<round>-kNNNN-" + "v"*(N%50) in two rounds,
// sealing after each, compacted (segment 5: a block data file, version 3,
// whose index is DENSE, one entry per key, its checksum in the manifest),
// then put every 7th key = "new-kNNNN", sealed (segment 3) and closed. The
// LOCK file is left out.
func denseBlockWant() model {
	m := model{}
	for i := range 600 {
		k := fmt.Sprintf("k%04d", i)
		m[k] = fmt.Sprintf("r1-%s-%s", k, strings.Repeat("v", i%50))
		if i%7 == 0 {
			m[k] = "new-" + k
		}
	}
	return m
}

const denseBlockSeg = 5 // the block file of testdata/denseblockstore

// TestSparseBreakDenseBlockIndexLost: FORMAT.md says the index is a cache
// ("the data file carries every key, and the index can be rebuilt from it
// at any time") and that a dense index of a block file "is still read
// correctly". But a store written before the sparse index records the
// checksum of the dense index of its block files: once that index is
// lost (deleted, cut short, or damaged so that Open or a read must
// rebuild it), the rebuild now always writes the sparse layout, whose
// checksum is not the manifest's, and the segment can no longer be read.
func TestSparseBreakDenseBlockIndexLost(t *testing.T) {
	osfs := vfs.NewOS()
	o := &Options{FS: osfs, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}

	ip := func(dir string) string { return filepath.Join(dir, segment.IndexName(denseBlockSeg)) }
	for _, how := range []string{"as-written", "delete", "truncate", "flip-key-block"} {
		t.Run(how, func(t *testing.T) {
			dir := copyDir(t, "testdata/denseblockstore")
			switch how {
			case "as-written":
				// Nothing lost: the dense index reads correctly, and Check
				// (which compares the loaded index with a rebuild) must
				// not call the untouched store corrupt.
			case "delete":
				require.NoError(t, os.Remove(ip(dir)))
			case "truncate":
				require.NoError(t, os.Truncate(ip(dir), 100))
			case "flip-key-block":
				// A byte of the first key block: Open loads the index, the
				// first read of that block heals it.
				testutil.FlipByte(t, osfs, ip(dir), 200, 0xff)
			}
			s, err := Open(dir, o)
			require.NoError(t, err, "a store whose block file lost its dense index does not open")
			defer s.Close()
			require.NoError(t, fullDiff(s, denseBlockWant(), []string{"", "k9999"}))
			require.NoError(t, s.Check())
		})
	}
}
