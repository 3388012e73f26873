package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// rangeStreams exports a segment from a scratch store holding keys "imp/NN"
// and a range tombstone over part of "imp/", as an import stream, with the
// state it leaves.
func rangeStreams(t *testing.T) ([]byte, map[string]string) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/src", &Options{FS: mem, Merge: MergeOptions{Disable: true}})
	defer s.Close()
	want := map[string]string{}
	for i := range 40 {
		k := fmt.Sprintf("imp/%02d", i)
		require.NoError(t, s.Put([]byte(k), []byte("iv"+k)))
		want[k] = "iv" + k
	}
	require.NoError(t, s.DeleteRange([]byte("imp/10"), []byte("imp/20")))
	for i := 10; i < 20; i++ {
		delete(want, fmt.Sprintf("imp/%02d", i))
	}
	require.NoError(t, s.Put([]byte("imp/15"), []byte("late")))
	want["imp/15"] = "late"
	require.NoError(t, s.Seal())
	segs := s.Segments()
	var buf bytes.Buffer
	_, err := s.Export(context.Background(), segs[0].ID, &buf)
	require.NoError(t, err)
	return buf.Bytes(), want
}

// TestBreakShutdownUnderLoadWithRanges: writers (each alone on its own key
// prefix, so each knows exactly what its prefix must read) put, delete and
// delete ranges, and check their prefix by Get, by iterators forward and
// backward and by a snapshot after every few writes; meanwhile other
// goroutines seal, compact, import a stream with a range tombstone, export,
// and hold snapshots; then Close races all of it. Every acknowledged write
// must be there after a reopen, on the OS file system (the live file is
// read through a shared mapping there).
func TestBreakShutdownUnderLoadWithRanges(t *testing.T) {
	stream, impWant := rangeStreams(t)
	rounds := 12
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		dir := t.TempDir()
		o := &Options{FS: vfs.NewOS(), SegmentSize: 32 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}}
		s := mustOpen(t, dir, o)
		const writers = 3
		models := make([]map[string]string, writers)
		imported := false
		var impMu sync.Mutex
		var wg sync.WaitGroup
		stop := make(chan struct{})
		okErr := func(err error) bool { return err == nil || errors.Is(err, ErrClosed) }
		for w := range writers {
			models[w] = map[string]string{}
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				m := models[w]
				pfx := fmt.Sprintf("w%d/", w)
				key := func() string { return fmt.Sprintf("%s%03d", pfx, rng.IntN(200)) }
				for n := 0; ; n++ {
					var err error
					switch r := rng.IntN(10); {
					case r < 6:
						k, v := key(), fmt.Sprintf("v%d-%d-%s", w, n, bytes.Repeat([]byte("x"), rng.IntN(300)))
						if err = s.Put([]byte(k), []byte(v)); err == nil {
							m[k] = v
						}
					case r < 7:
						k := key()
						if err = s.Delete([]byte(k)); err == nil {
							delete(m, k)
						}
					default:
						a, b := key(), key()
						if a > b {
							a, b = b, a
						}
						b2 := s.NewBatch()
						require.NoError(t, b2.DeleteRange([]byte(a), []byte(b)))
						k, v := key(), fmt.Sprintf("b%d-%d", w, n)
						require.NoError(t, b2.Put([]byte(k), []byte(v)))
						if err = s.Apply(b2); err == nil {
							for mk := range m {
								if a <= mk && mk < b {
									delete(m, mk)
								}
							}
							m[k] = v
						}
					}
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("writer %d: %v", w, err)
						}
						return
					}
					if n%7 == 0 {
						if !checkPrefix(t, s, pfx, m) {
							return
						}
					}
				}
			})
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.Seal(); !okErr(err) {
					t.Errorf("seal: %v", err)
				}
				if err := s.Compact(context.Background()); !okErr(err) {
					t.Errorf("compact: %v", err)
				}
			}
		})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := s.Import(context.Background(), bytes.NewReader(stream))
				if err == nil {
					impMu.Lock()
					imported = true
					impMu.Unlock()
				} else if !okErr(err) {
					t.Errorf("import: %v", err)
				}
				for _, sg := range s.Segments() {
					if _, err := s.Export(context.Background(), sg.ID, discard{}); err != nil && !okErr(err) && !errors.Is(err, ErrNoSegment) {
						t.Errorf("export: %v", err)
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				sn, err := s.NewSnapshot()
				if err != nil {
					if !okErr(err) {
						t.Errorf("snapshot: %v", err)
					}
					continue
				}
				it, err := sn.NewIterator(nil)
				if err == nil {
					for ok := it.Last(); ok; ok = it.Prev() {
						if _, err := it.Value(); err != nil && !okErr(err) {
							t.Errorf("snapshot value: %v", err)
						}
					}
					it.Close()
				}
				time.Sleep(time.Millisecond)
				sn.Close()
			}
		})
		time.Sleep(time.Duration(20+round*7) * time.Millisecond)
		require.NoError(t, s.Close())
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}
		s = mustOpen(t, dir, o)
		for w := range writers {
			require.True(t, checkPrefix(t, s, fmt.Sprintf("w%d/", w), models[w]), "round %d writer %d after reopen", round, w)
		}
		if imported {
			require.True(t, checkPrefix(t, s, "imp/", impWant), "round %d imported keys after reopen", round)
		}
		checkAndClose(t, s)
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// checkPrefix compares the keys under pfx with m: by Get, forward and
// backward iteration and a Prefix iterator. false: the store was closed
// (or a check failed, which it reports).
func checkPrefix(t *testing.T, s *Store, pfx string, m map[string]string) bool {
	t.Helper()
	want := make([]string, 0, len(m))
	for k := range m {
		want = append(want, k)
	}
	slices.Sort(want)
	for k, v := range m {
		got, err := s.Get([]byte(k))
		if errors.Is(err, ErrClosed) {
			return false
		}
		if err != nil || string(got) != v {
			t.Errorf("Get(%q) = %q, %v; want %q", k, got, err, v)
			return false
		}
	}
	it, err := s.NewIterator(&IterOptions{Prefix: []byte(pfx)})
	if err != nil {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("iterator: %v", err)
		}
		return false
	}
	defer it.Close()
	var fwd, back []string
	var buf []byte
	for ok := it.First(); ok; ok = it.Next() {
		buf, err = it.AppendValue(buf[:0])
		if err != nil {
			break
		}
		if string(buf) != m[string(it.Key())] {
			t.Errorf("iterator value of %q = %q, want %q", it.Key(), buf, m[string(it.Key())])
			return false
		}
		fwd = append(fwd, string(it.Key()))
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		back = append(back, string(it.Key()))
	}
	if err := it.Err(); err != nil {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("iterator: %v", err)
		}
		return false
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, want) || !slices.Equal(back, want) {
		t.Errorf("prefix %q: forward %d keys, backward %d, want %d\n fwd %q\n want %q", pfx, len(fwd), len(back), len(want), fwd, want)
		return false
	}
	return true
}
