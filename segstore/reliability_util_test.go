package segstore

// Helpers shared by the reliability suite (reliability_*_test.go): opening a
// store with its background held off, the orphan check, and a full
// comparison of a store with a model.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// gatedStore is a store whose background goroutine is held before it makes
// its first spare, so that the directory right after Open is exactly what
// recovery left. release lets the background run; it is idempotent.
type gatedStore struct {
	*Store
	gate     chan struct{}
	released bool
}

func (g *gatedStore) release() {
	if !g.released {
		g.released = true
		close(g.gate)
	}
}

// closeAll releases the background and closes the store.
func (g *gatedStore) closeAll() error {
	g.release()
	return g.Close()
}

// openGated opens dir with the background held (see gatedStore).
func openGated(dir string, o *Options) (*gatedStore, error) {
	gate := make(chan struct{})
	s, err := open(dir, o, testHooks{beforeJob: func(string) { <-gate }})
	if err != nil {
		return nil, err
	}
	return &gatedStore{Store: s, gate: gate}, nil
}

// orphans lists the files of the store's directory that nothing durable
// names: everything but LOCK, the manifest generations, the data files (and
// indexes) of the segments the manifest names, and the live file. It also
// reports a named data file that is missing. Call it before the background
// has made a spare (openGated).
func orphans(fsys vfs.FS, s *Store) ([]string, error) {
	names, err := fsys.List(s.dir)
	if err != nil {
		return nil, err
	}
	st := s.mlog.State()
	allowed := map[string]bool{lockName: true}
	var need []string
	for id, m := range st.Segments {
		d := segment.DataName(id, m.FileKind)
		allowed[d] = true
		allowed[segment.IndexName(id)] = true
		need = append(need, d)
	}
	if st.LiveID != 0 {
		d := segment.DataName(st.LiveID, segment.KindLog)
		allowed[d] = true
		need = append(need, d)
	}
	var out []string
	for _, n := range names {
		if !allowed[n] && !strings.HasPrefix(n, "MANIFEST-") {
			out = append(out, n)
		}
	}
	for _, n := range need {
		if !slices.Contains(names, n) {
			out = append(out, "missing:"+n)
		}
	}
	return out, nil
}

// fullDiff compares s with m: an ordered scan must yield exactly m, and a
// point read of every key of m and of every key in extra must agree with m.
func fullDiff(s *Store, m model, extra []string) error {
	it, err := s.NewIterator(nil)
	if err != nil {
		return fmt.Errorf("new iterator: %w", err)
	}
	got := model{}
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		if prev != nil && bytes.Compare(prev, it.Key()) >= 0 {
			it.Close()
			return fmt.Errorf("scan: %q after %q", it.Key(), prev)
		}
		prev = append(prev[:0], it.Key()...)
		v, err := it.Value()
		if err != nil {
			it.Close()
			return fmt.Errorf("scan: value of %q: %w", it.Key(), err)
		}
		got[string(it.Key())] = string(v)
	}
	if err := it.Err(); err != nil {
		it.Close()
		return fmt.Errorf("scan: %w", err)
	}
	it.Close()
	for _, k := range sortedKeys(m) {
		g, ok := got[k]
		switch {
		case !ok:
			return fmt.Errorf("scan: %s missing, want %.24q", k, m[k])
		case g != m[k]:
			return fmt.Errorf("scan: %s = %.24q, want %.24q", k, g, m[k])
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("scan: %s present (%.24q), want absent", k, got[k])
		}
	}
	keys := append(sortedKeys(m), extra...)
	for _, k := range keys {
		if err := checkGet(s, m, k); err != nil {
			return err
		}
	}
	return nil
}

// keyNames returns the keys key-000 .. key-(n-1) that randomOps draws from.
func keyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%03d", i)
	}
	return out
}

// exportNewest seals s and exports its newest segment; the segment's content
// is what was written to s since its previous seal.
func exportNewest(t testing.TB, s *Store) []byte {
	t.Helper()
	if err := s.Seal(); err != nil {
		t.Fatalf("seal: %v", err)
	}
	segs := s.Segments()
	if len(segs) == 0 {
		t.Fatalf("nothing to export")
	}
	var buf bytes.Buffer
	if _, err := s.Export(t.Context(), segs[len(segs)-1].ID, &buf); err != nil {
		t.Fatalf("export: %v", err)
	}
	return buf.Bytes()
}

// digestOf is the content digest SegmentInfo.Digest reports.
func digestOf(b []byte) uint64 { return xxhash.Sum64(b) }

// dataPaths returns the paths of the sealed data files and index files of s.
func dataPaths(s *Store) (data, idx []string) {
	st := s.mlog.State()
	for id, m := range st.Segments {
		data = append(data, filepath.Join(s.dir, segment.DataName(id, m.FileKind)))
		idx = append(idx, filepath.Join(s.dir, segment.IndexName(id)))
	}
	slices.Sort(data)
	slices.Sort(idx)
	return data, idx
}

// requireImageHolds opens a crash image (background held), and requires
// that it reads exactly want, holds no orphan file and passes Check.
func requireImageHolds(t *testing.T, img *vfs.Mem, o *Options, want model, keys []string, label string) {
	t.Helper()
	gs, err := openGated("/db", o)
	require.NoError(t, err, label)
	require.NoError(t, fullDiff(gs.Store, want, keys), label)
	orph, err := orphans(img, gs.Store)
	require.NoError(t, err, label)
	require.Empty(t, orph, label)
	require.NoError(t, gs.Check(), label)
	require.NoError(t, gs.closeAll(), label)
}

// dropSpare discards the spare the background made, if any, so that the
// next seal makes its live file inline.
func dropSpare(s *Store) {
	s.spare.Lock()
	sp := s.spare.file
	s.spare.file = nil
	s.spare.Unlock()
	if sp != nil {
		s.discardSpare(sp)
	}
}
