package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// Polling bounds for conditions that background work makes true.
const (
	timeout = 10 * time.Second
	tick    = time.Millisecond
)

// smallOpts keeps files small so that seals happen often and the in-memory
// file system stays light.
func smallOpts(fsys vfs.FS) *Options {
	return &Options{FS: fsys, SegmentSize: 16 << 10}
}

func mustOpen(t testing.TB, dir string, o *Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	require.NoError(t, err)
	return s
}

// checkAndClose verifies the store's internal consistency and closes it.
func checkAndClose(t testing.TB, s *Store) {
	t.Helper()
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
}

func TestPutGetDeleteRoundTrip(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/db"
			if fsName == "os" {
				fsys, dir = vfs.NewOS(), t.TempDir()
			}
			s := mustOpen(t, dir, smallOpts(fsys))
			require.NoError(t, s.Put([]byte("a"), []byte("1")))
			require.NoError(t, s.Put([]byte(""), []byte("empty key")))
			require.NoError(t, s.Put([]byte("b"), nil))
			v, err := s.Get([]byte("a"))
			require.NoError(t, err)
			require.Equal(t, []byte("1"), v)
			v[0] = 'x' // the caller owns the copy
			v, _ = s.Get([]byte("a"))
			require.Equal(t, []byte("1"), v)
			v, err = s.Get([]byte(""))
			require.NoError(t, err)
			require.Equal(t, []byte("empty key"), v)
			v, err = s.Get([]byte("b"))
			require.NoError(t, err)
			require.Empty(t, v)
			require.NoError(t, s.Delete([]byte("a")))
			_, err = s.Get([]byte("a"))
			require.ErrorIs(t, err, ErrNotFound)
			_, err = s.Get([]byte("never"))
			require.ErrorIs(t, err, ErrNotFound)
			require.NoError(t, s.Seal())
			_, err = s.Get([]byte("a"))
			require.ErrorIs(t, err, ErrNotFound)
			v, err = s.Get([]byte(""))
			require.NoError(t, err)
			require.Equal(t, []byte("empty key"), v)
			checkAndClose(t, s)

			s = mustOpen(t, dir, smallOpts(fsys))
			v, err = s.Get([]byte(""))
			require.NoError(t, err)
			require.Equal(t, []byte("empty key"), v)
			_, err = s.Get([]byte("a"))
			require.ErrorIs(t, err, ErrNotFound)
			checkAndClose(t, s)
		})
	}
}

func TestInputValidation(t *testing.T) {
	fsys := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: fsys, MaxKeySize: 8, MaxValueSize: 16, SegmentSize: 64 << 10})
	require.ErrorIs(t, s.Put(bytes.Repeat([]byte("k"), 9), nil), ErrKeyTooLarge)
	require.ErrorIs(t, s.Put([]byte("k"), bytes.Repeat([]byte("v"), 17)), ErrValueTooLarge)
	require.ErrorIs(t, s.Delete(bytes.Repeat([]byte("k"), 9)), ErrKeyTooLarge)
	_, err := s.Get(bytes.Repeat([]byte("k"), 9))
	require.ErrorIs(t, err, ErrKeyTooLarge)

	// A batch with one bad operation writes nothing.
	b := s.NewBatch()
	require.NoError(t, b.Put([]byte("ok"), []byte("v")))
	require.ErrorIs(t, b.Put([]byte("ok2"), bytes.Repeat([]byte("v"), 17)), ErrValueTooLarge)
	require.ErrorIs(t, s.Apply(b), ErrValueTooLarge)
	_, err = s.Get([]byte("ok"))
	require.ErrorIs(t, err, ErrNotFound)

	require.ErrorIs(t, s.Apply(nil), ErrInvalidBatch)
	other := mustOpen(t, "/other", smallOpts(fsys))
	ob := other.NewBatch()
	require.NoError(t, ob.Put([]byte("x"), nil))
	require.ErrorIs(t, s.Apply(ob), ErrInvalidBatch)
	require.NoError(t, other.Apply(ob))
	require.ErrorIs(t, other.Apply(ob), ErrInvalidBatch, "a batch applies once")
	checkAndClose(t, other)

	_, err = Open("/bad", &Options{FS: fsys, Sync: SyncMode(42)})
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = Open("/bad", &Options{FS: fsys, MaxKeySize: -1})
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = Open("/bad", &Options{FS: fsys, SegmentSize: 10})
	require.ErrorIs(t, err, ErrInvalidOption)

	checkAndClose(t, s)
	require.ErrorIs(t, s.Put([]byte("a"), nil), ErrClosed)
	_, err = s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Close(), ErrClosed)
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, nil)
	_, err := Open(dir, nil)
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, s.Close())
	s = mustOpen(t, dir, nil)
	require.NoError(t, s.Close())

	mem := vfs.NewMem()
	s = mustOpen(t, "/db", smallOpts(mem))
	_, err = Open("/db", smallOpts(mem))
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, s.Close())
}

// model is the reference the store is compared with: a map.
type model map[string]string

func (m model) apply(ops []op) {
	for _, o := range ops {
		if o.del {
			delete(m, o.key)
		} else {
			m[o.key] = o.value
		}
	}
}

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

type op struct {
	key, value string
	del        bool
}

func randomOps(rng *rand.Rand, n, keySpace int) []op {
	ops := make([]op, n)
	for i := range ops {
		ops[i].key = fmt.Sprintf("key-%03d", rng.IntN(keySpace))
		if rng.IntN(5) == 0 {
			ops[i].del = true
		} else {
			ops[i].value = fmt.Sprintf("v%d-%s", rng.Uint32(), bytes.Repeat([]byte("x"), rng.IntN(200)))
		}
	}
	return ops
}

func applyOps(s *Store, ops []op) error {
	if len(ops) == 1 {
		if ops[0].del {
			return s.Delete([]byte(ops[0].key))
		}
		return s.Put([]byte(ops[0].key), []byte(ops[0].value))
	}
	b := s.NewBatch()
	for _, o := range ops {
		var err error
		if o.del {
			err = b.Delete([]byte(o.key))
		} else {
			err = b.Put([]byte(o.key), []byte(o.value))
		}
		if err != nil {
			return err
		}
	}
	return s.Apply(b)
}

// diff returns a description of the first difference between s and m over
// every key of the key space.
func diff(s *Store, m model, keySpace int) error {
	for i := 0; i < keySpace; i++ {
		if err := checkGet(s, m, fmt.Sprintf("key-%03d", i)); err != nil {
			return err
		}
	}
	return nil
}

// checkGet compares one Get of key k with the model.
func checkGet(s *Store, m model, k string) error {
	v, err := s.Get([]byte(k))
	want, ok := m[k]
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		return fmt.Errorf("get %s: %w", k, err)
	case err != nil && ok:
		return fmt.Errorf("get %s: missing, want %.24q", k, want)
	case err == nil && !ok:
		return fmt.Errorf("get %s: %.24q, want absent", k, v)
	case err == nil && string(v) != want:
		return fmt.Errorf("get %s: %.24q, want %.24q", k, v, want)
	}
	return nil
}

func TestModelRandomized(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(mode)))
			fsys := vfs.NewMem()
			o := smallOpts(fsys)
			o.Sync = mode
			s := mustOpen(t, "/db", o)
			m := model{}
			const keySpace = 300
			for i := 0; i < 4000; i++ {
				switch r := rng.IntN(100); {
				case r < 70:
					ops := randomOps(rng, 1+rng.IntN(3)*rng.IntN(4), keySpace)
					require.NoError(t, applyOps(s, ops))
					m.apply(ops)
				case r < 90:
					k := fmt.Sprintf("key-%03d", rng.IntN(keySpace))
					v, err := s.Get([]byte(k))
					if want, ok := m[k]; ok {
						require.NoError(t, err)
						require.Equal(t, want, string(v))
					} else {
						require.ErrorIs(t, err, ErrNotFound)
					}
				case r < 96:
					require.NoError(t, s.Seal())
				case r < 98:
					require.NoError(t, s.Sync())
				default:
					checkAndClose(t, s)
					s = mustOpen(t, "/db", o)
					require.NoError(t, diff(s, m, keySpace))
				}
			}
			require.NoError(t, diff(s, m, keySpace))
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, diff(s, m, keySpace))
			checkAndClose(t, s)
		})
	}
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, &Options{SegmentSize: 64 << 10})
	const writers, perWriter = 16, 200
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				k := fmt.Sprintf("w%02d-%04d", w, i)
				if err := s.Put([]byte(k), []byte(k)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				k := fmt.Sprintf("w%02d-%04d", w, i)
				v, err := s.Get([]byte(k))
				if err == nil && string(v) != k {
					t.Errorf("get %s = %q", k, v)
				}
			}
		}()
	}
	wg.Wait()
	require.Greater(t, s.Metrics().Seals, int64(0), "the size threshold should have sealed")
	checkAndClose(t, s)
	s = mustOpen(t, dir, nil)
	keys := 0
	for w := 0; w < writers; w++ {
		for i := 0; i < perWriter; i++ {
			k := fmt.Sprintf("w%02d-%04d", w, i)
			v, err := s.Get([]byte(k))
			require.NoError(t, err)
			require.Equal(t, k, string(v))
			keys++
		}
	}
	require.Equal(t, writers*perWriter, keys)
	checkAndClose(t, s)
}

func sortedKeys(m model) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestLostManifestIsRefused: data files without a manifest must not be taken
// for orphans and removed.
func TestLostManifestIsRefused(t *testing.T) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", smallOpts(mem))
	require.NoError(t, s.Put([]byte("k"), []byte("v")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Close())
	names, err := mem.List("/db")
	require.NoError(t, err)
	for _, n := range names {
		if len(n) > 9 && n[:9] == "MANIFEST-" {
			require.NoError(t, mem.Remove("/db/"+n))
		}
	}
	for range 2 { // and again: the refusal must not leave a fresh manifest behind
		_, err = Open("/db", smallOpts(mem))
		require.ErrorIs(t, err, ErrCorrupt)
	}
	after, err := mem.List("/db")
	require.NoError(t, err)
	for _, n := range names {
		if len(n) > 9 && n[:9] == "MANIFEST-" {
			continue
		}
		require.Contains(t, after, n, "nothing removed")
	}
}

// TestBatchBuffersReused applies batches whose buffers come back from the
// store's pool: each batch's writes must read back as written, not as the
// bytes of a batch that reused its buffer afterwards.
func TestBatchBuffersReused(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Sync: SyncManual})
	defer checkAndClose(t, s)

	want := map[string]string{}
	first := s.NewBatch()
	for i := range 100 {
		k, v := fmt.Sprintf("a%03d", i), fmt.Sprintf("first-%d", i)
		require.NoError(t, first.Put([]byte(k), []byte(v)))
		want[k] = v
	}
	require.NoError(t, s.Apply(first))
	require.Equal(t, 100, first.Len(), "Len counts the applied operations")
	require.ErrorIs(t, s.Apply(first), ErrInvalidBatch, "a batch applies once")

	reused := 0
	for round := range 20 {
		b := s.NewBatch()
		if cap(b.buf) > 0 {
			reused++
		}
		for i := range 50 + round*10 {
			k, v := fmt.Sprintf("b%03d", i), fmt.Sprintf("round-%d-%d", round, i)
			require.NoError(t, b.Put([]byte(k), []byte(v)))
			want[k] = v
		}
		require.NoError(t, b.Delete([]byte(fmt.Sprintf("a%03d", round))))
		delete(want, fmt.Sprintf("a%03d", round))
		require.NoError(t, s.Apply(b))
	}
	// sync.Pool may drop any item (the race detector drops a quarter on
	// purpose), so only require that reuse happened.
	require.Positive(t, reused, "no batch took its buffers from the pool")

	// A reset batch works again, with buffers of its own.
	first.Reset()
	require.Equal(t, 0, first.Len())
	require.NoError(t, first.Put([]byte("c"), []byte("after reset")))
	want["c"] = "after reset"
	require.NoError(t, s.Apply(first))

	for k, v := range want {
		got, err := s.Get([]byte(k))
		require.NoError(t, err, k)
		require.Equal(t, v, string(got), k)
	}
	for i := range 20 {
		_, err := s.Get([]byte(fmt.Sprintf("a%03d", i)))
		require.ErrorIs(t, err, ErrNotFound)
	}
}
