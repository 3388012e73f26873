package compat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/segstore"
)

// storesDir holds one store directory per format version and, beside each,
// <name>.dump: what the writing (old) code's Get and a full scan returned
// just before it closed the store.
const storesDir = "../../testdata/stores"

// candidates is the number of keys the generator (testdata/gen) dumps.
const candidates = 120

func key(i int) []byte { return fmt.Appendf(nil, "k%03d", i) }

// dump renders the store's contents in the generator's format: Get of every
// candidate key ("-" for not found), then every key of a full scan in order.
func dump(t *testing.T, s *segstore.Store) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# get: every candidate key\n")
	for i := range candidates {
		v, err := s.Get(key(i))
		switch {
		case errors.Is(err, segstore.ErrNotFound):
			fmt.Fprintf(&b, "get %x -\n", key(i))
		default:
			require.NoError(t, err, "Get(%s)", key(i))
			fmt.Fprintf(&b, "get %x %x\n", key(i), v)
		}
	}
	b.WriteString("# scan: every key in order\n")
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		fmt.Fprintf(&b, "scan %x %x\n", it.Key(), v)
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	return b.String()
}

func open(t *testing.T, dir string) *segstore.Store {
	t.Helper()
	s, err := segstore.Open(dir, &segstore.Options{Merge: segstore.MergeOptions{Disable: true}})
	require.NoError(t, err)
	return s
}

// TestOldStores opens a copy of each stored format version with today's
// code: it must read exactly what the old code read, pass Check, and keep
// doing so after today's code sealed the live tail, merged everything into
// one segment of today's format, and reopened the store.
func TestOldStores(t *testing.T) {
	entries, err := os.ReadDir(storesDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	// One per format version so far; a missing directory must fail, not
	// shrink the test.
	require.ElementsMatch(t, []string{"data1-idx1-mnf2", "data2-idx2-mnf2", "data2-idx3-mnf2"}, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(storesDir, name+".dump"))
			require.NoError(t, err)
			dir := filepath.Join(t.TempDir(), name)
			require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join(storesDir, name))))

			s := open(t, dir)
			require.Equal(t, string(want), dump(t, s), "as opened")
			require.NoError(t, s.Check())
			require.NoError(t, s.Seal())
			require.NoError(t, s.Compact(context.Background()))
			require.Equal(t, string(want), dump(t, s), "after Seal and Compact")
			segs := s.Segments()
			require.Len(t, segs, 1, "Compact merges every sealed segment into one")
			// ... of today's format: a block data file.
			h := make([]byte, segment.HeaderSize)
			f, err := os.Open(filepath.Join(dir, segment.DataName(segs[0].ID, segment.KindSeg)))
			require.NoError(t, err)
			_, err = f.ReadAt(h, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			require.EqualValues(t, segment.BlockVersion, segment.HeaderVersion(h))
			require.NoError(t, s.Close())

			s = open(t, dir)
			require.Equal(t, string(want), dump(t, s), "after reopening")
			require.NoError(t, s.Check())
			require.NoError(t, s.Close())
		})
	}
}
