package segstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestBreakHeadTruncationRacingMerges: one writer appends a log (keys in
// order) and truncates its head with DeleteRange("", cursor), sealing
// often, so that seal commits drop whole segments; Compact and the
// background merge run all the while (merges claim their inputs while
// seals drop segments); readers take snapshots and iterators. Every
// consistent view of such a log is one contiguous run of keys [head,
// tail): a gap, or a key below a head, is a resurrected or lost key.
func TestBreakHeadTruncationRacingMerges(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/db"
			if fsName == "os" {
				fsys, dir = vfs.NewOS(), t.TempDir()
			}
			o := &Options{FS: fsys, SegmentSize: 8 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}}
			s := mustOpen(t, dir, o)
			const total = 6000
			key := func(i int) string { return fmt.Sprintf("log-%08d", i) }
			var head, tail atomic.Int64  // acknowledged: keys [head, tail)
			var headStarted atomic.Int64 // the newest head a DeleteRange was begun for
			var wg sync.WaitGroup
			done := make(chan struct{})
			wg.Go(func() {
				defer close(done)
				for i := range total {
					if err := s.Put([]byte(key(i)), []byte(fmt.Sprintf("value-%d-%0100d", i, i))); err != nil {
						t.Errorf("put: %v", err)
						return
					}
					tail.Store(int64(i + 1))
					if i%50 == 49 {
						h := i - 20
						headStarted.Store(int64(h))
						if err := s.DeleteRange(nil, []byte(key(h))); err != nil {
							t.Errorf("delete range: %v", err)
							return
						}
						head.Store(int64(h))
						if i%200 == 199 {
							if err := s.Seal(); err != nil {
								t.Errorf("seal: %v", err)
								return
							}
						}
					}
				}
			})
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if err := s.Compact(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("compact: %v", err)
						return
					}
				}
			})
			for r := range 2 {
				wg.Go(func() {
					for n := 0; ; n++ {
						select {
						case <-done:
							return
						default:
						}
						lo, hi := head.Load(), tail.Load()
						it, err := s.NewIterator(nil)
						if err != nil {
							t.Errorf("iterator: %v", err)
							return
						}
						var first, prev int = -1, -1
						count := 0
						bad := ""
						step := it.First
						if (n+r)%2 == 1 {
							step = it.Last
						}
						for ok := step(); ok; {
							var i int
							fmt.Sscanf(string(it.Key()), "log-%08d", &i)
							if first < 0 {
								first = i
							} else if (n+r)%2 == 0 && i != prev+1 || (n+r)%2 == 1 && i != prev-1 {
								bad = fmt.Sprintf("gap: %d after %d", i, prev)
								break
							}
							if n%5 == 0 {
								v, err := it.Value()
								if err != nil || string(v) != fmt.Sprintf("value-%d-%0100d", i, i) {
									bad = fmt.Sprintf("value of %d: %q %v", i, v, err)
									break
								}
							}
							prev = i
							count++
							if (n+r)%2 == 0 {
								ok = it.Next()
							} else {
								ok = it.Prev()
							}
						}
						require.NoError(t, it.Err())
						it.Close()
						if bad != "" {
							t.Errorf("view %d: %s", n, bad)
							return
						}
						if (n+r)%2 == 1 {
							first, prev = prev, first
						}
						// The view was taken after lo/hi were read: its head is
						// at least lo's, its tail at least hi.
						if count > 0 && (int64(first) < lo || int64(first) > headStarted.Load() && int64(first) > lo || int64(prev+1) < hi) {
							t.Errorf("view %d: keys [%d, %d], acknowledged before it [%d, %d)", n, first, prev, lo, hi)
							return
						}
						if count == 0 && hi > lo {
							t.Errorf("view %d: empty, acknowledged [%d, %d)", n, lo, hi)
							return
						}
					}
				})
			}
			wg.Wait()
			m := s.Metrics()
			t.Logf("seals %d merges %d dropped under a range %d", m.Seals, m.Merges, m.RangeDropped)
			require.NoError(t, s.Check())
			require.NoError(t, s.Close())
			s = mustOpen(t, dir, o)
			want := model{}
			for i := head.Load(); i < tail.Load(); i++ {
				want[key(int(i))] = fmt.Sprintf("value-%d-%0100d", i, i)
			}
			require.NoError(t, fullDiff(s, want, nil))
			checkAndClose(t, s)
		})
	}
}

// TestBreakViewsSeeWholeBatches: a writer replaces a group of 50 keys in
// one batch (a DeleteRange over the group, then 50 puts of a new version,
// with the group's key set changing each time), while readers create
// iterators and snapshots concurrently (sharing the live directory's
// frozen copy) and seals switch live files: every view shows exactly one
// batch's group, whole.
func TestBreakViewsSeeWholeBatches(t *testing.T) {
	s := mustOpen(t, t.TempDir(), &Options{FS: vfs.NewOS(), SegmentSize: 16 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}})
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for n := 1; n <= 1500; n++ {
			b := s.NewBatch()
			require.NoError(t, b.DeleteRange([]byte("g/"), []byte("g0")))
			for i := range 50 {
				require.NoError(t, b.Put([]byte(fmt.Sprintf("g/%03d", i*(1+n%3))), []byte(fmt.Sprint(n))))
			}
			if err := s.Apply(b); err != nil {
				t.Errorf("apply: %v", err)
				return
			}
			if n%97 == 0 {
				require.NoError(t, s.Seal())
			}
		}
	})
	for r := range 3 {
		wg.Go(func() {
			for v := 0; ; v++ {
				select {
				case <-done:
					return
				default:
				}
				var it *Iterator
				var err error
				var sn *Snapshot
				if (v+r)%2 == 0 {
					it, err = s.NewIterator(&IterOptions{Prefix: []byte("g/")})
				} else {
					sn, err = s.NewSnapshot()
					require.NoError(t, err)
					it, err = sn.NewIterator(&IterOptions{Prefix: []byte("g/")})
				}
				require.NoError(t, err)
				var ver string
				count := 0
				for ok := it.First(); ok; ok = it.Next() {
					val, err := it.Value()
					require.NoError(t, err)
					if ver == "" {
						ver = string(val)
					} else if string(val) != ver {
						t.Errorf("view %d/%d: %s = %s, another key has %s", r, v, it.Key(), val, ver)
						return
					}
					var i, n int
					fmt.Sscanf(string(it.Key()), "g/%03d", &i)
					fmt.Sscan(ver, &n)
					if i%(1+n%3) != 0 {
						t.Errorf("view %d/%d: key %s is not one of version %s's", r, v, it.Key(), ver)
						return
					}
					count++
				}
				it.Close()
				if sn != nil {
					sn.Close()
				}
				if count != 0 && count != 50 {
					t.Errorf("view %d/%d: %d keys of version %s", r, v, count, ver)
					return
				}
			}
		})
	}
	wg.Wait()
	checkAndClose(t, s)
}
