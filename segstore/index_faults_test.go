package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

func fillSealedRounds(t *testing.T, s *Store, m model, rounds, perRound int, rng *rand.Rand) {
	for r := 0; r < rounds; r++ {
		for i := 0; i < perRound; i++ {
			k := fmt.Sprintf("key-%03d", rng.Intn(2000))
			v := fmt.Sprintf("v%d-%d-%s", r, i, strings.Repeat("x", rng.Intn(200)))
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		require.NoError(t, s.Seal())
	}
}

// Close while background merges, Gets and iterators run.
func TestCloseDuringMerges(t *testing.T) {
	for iter := 0; iter < 6; iter++ {
		dir := t.TempDir()
		o := &Options{SegmentSize: 64 << 10, Merge: MergeOptions{MinRun: 2}}
		s := mustOpen(t, dir, o)
		m := model{}
		var mu sync.Mutex
		rng := rand.New(rand.NewSource(int64(iter)))
		fillSealedRounds(t, s, m, 6, 300, rng)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var panics atomic.Int64
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				defer func() {
					if r := recover(); r != nil {
						panics.Add(1)
						t.Errorf("panic: %v", r)
					}
				}()
				r := rand.New(rand.NewSource(int64(g)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					if g == 0 {
						it, err := s.NewIterator(nil)
						if err != nil {
							return
						}
						for ok := it.First(); ok; ok = it.Next() {
							_, _ = it.Value()
						}
						_ = it.Close()
					} else if g == 1 {
						k := fmt.Sprintf("key-%03d", r.Intn(2000))
						v := fmt.Sprintf("w%d", r.Int())
						if err := s.Put([]byte(k), []byte(v)); err == nil {
							mu.Lock()
							m[k] = v
							mu.Unlock()
						} else {
							return
						}
						if r.Intn(100) == 0 {
							_ = s.Seal()
						}
					} else {
						_, _ = s.Get([]byte(fmt.Sprintf("key-%03d", r.Intn(2000))))
					}
				}
			}(g)
		}
		time.Sleep(time.Duration(50+rng.Intn(300)) * time.Millisecond)
		require.NoError(t, s.Sync())
		mu.Lock()
		snapshot := m.clone()
		mu.Unlock()
		_ = snapshot
		cerr := s.Close()
		close(stop)
		wg.Wait()
		require.NoError(t, cerr)
		s = mustOpen(t, dir, o)
		// every acknowledged write (Close syncs) must be there
		for k, v := range m {
			got, err := s.Get([]byte(k))
			require.NoError(t, err, k)
			require.Equal(t, v, string(got), k)
		}
		checkAndClose(t, s)
	}
}

// EIO while a merge writes its index (WriteOrdered).
func TestMergeIndexWriteFault(t *testing.T) {
	for nth := int64(1); nth <= 6; nth++ {
		t.Run(fmt.Sprint(nth), func(t *testing.T) {
			mem := vfs.NewMem()
			fy := vfs.NewFaulty(mem)
			o := &Options{FS: fy, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			m := model{}
			fillSealedRounds(t, s, m, 5, 400, rand.New(rand.NewSource(nth)))
			require.NoError(t, fy.Inject(vfs.Fault{Op: vfs.OpWrite, Nth: nth, Match: func(p string) bool { return strings.HasSuffix(p, ".idx") }}))
			cerr := s.Compact(context.Background())
			t.Logf("compact: %v", cerr)
			fy.Clear()
			require.NoError(t, diff(s, m, 2000))
			require.NoError(t, s.Compact(context.Background()))
			require.NoError(t, diff(s, m, 2000))
			require.NoError(t, s.Close())
			names, _ := mem.List("/db")
			for _, n := range names {
				require.False(t, strings.HasSuffix(n, ".rebuild"), n)
			}
			s = mustOpen(t, "/db", o)
			require.NoError(t, diff(s, m, 2000))
			require.Empty(t, s.RecoveryReport().RebuiltIndexes)
			checkAndClose(t, s)
		})
	}
}

// EIO while a heal writes the rebuilt index, and a read fault.
func TestHealWriteFault(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpRename, vfs.OpRead} {
		t.Run(op.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			fy := vfs.NewFaulty(mem)
			o := &Options{FS: fy, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			m := model{}
			fillSealedRounds(t, s, m, 4, 400, rand.New(rand.NewSource(3)))
			require.NoError(t, s.Compact(context.Background()))
			segs := s.Segments()
			require.NoError(t, s.Close())
			for _, sg := range segs {
				ix := filepath.Join("/db", segment.IndexName(sg.ID))
				b, err := mem.ReadFile(ix)
				require.NoError(t, err)
				b[100] ^= 0x40 // inside the first key block
				require.NoError(t, mem.WriteFile(ix, b))
			}
			s = mustOpen(t, "/db", o)
			match := func(p string) bool { return strings.Contains(p, ".idx") }
			if op == vfs.OpRead {
				match = func(p string) bool { return strings.Contains(p, ".seg") || strings.Contains(p, ".log") }
			}
			require.NoError(t, fy.Inject(vfs.Fault{Op: op, Nth: 1, Persistent: true, Match: match}))
			derr := diff(s, m, 2000)
			t.Logf("diff under fault: %v", derr)
			fy.Clear()
			if op != vfs.OpRead {
				require.NoError(t, derr)
			}
			require.NoError(t, s.Close())
			names, _ := mem.List("/db")
			for _, n := range names {
				require.False(t, strings.HasSuffix(n, ".rebuild"), n)
			}
			s = mustOpen(t, "/db", o)
			require.NoError(t, diff(s, m, 2000))
			checkAndClose(t, s)
		})
	}
}

// Damage a merged segment's index on the OS file system while it is mapped.
func TestMappedDamageHeals(t *testing.T) {
	dir := t.TempDir()
	o := &Options{SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, dir, o)
	m := model{}
	fillSealedRounds(t, s, m, 4, 400, rand.New(rand.NewSource(5)))
	require.NoError(t, s.Compact(context.Background()))
	segs := s.Segments()
	require.NoError(t, s.Close())
	intact := map[string][]byte{}
	for _, sg := range segs {
		p := filepath.Join(dir, segment.IndexName(sg.ID))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		intact[p] = b
	}
	s = mustOpen(t, dir, o)
	for p := range intact {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		require.NoError(t, err)
		var one [1]byte
		_, err = f.ReadAt(one[:], 200)
		require.NoError(t, err)
		one[0] ^= 0x10
		_, err = f.WriteAt(one[:], 200)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	require.NoError(t, diff(s, m, 2000))
	require.NoError(t, s.Close())
	for p, want := range intact {
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, want, got, "index %s not healed on disk", p)
	}
	names, _ := os.ReadDir(dir)
	for _, n := range names {
		require.False(t, strings.HasSuffix(n.Name(), ".rebuild"), n.Name())
	}
	s = mustOpen(t, dir, o)
	require.NoError(t, diff(s, m, 2000))
	checkAndClose(t, s)
}

// A transient read error on the data file while a heal runs must not poison
// the segment's index for the life of the store: once the device recovers,
// the next read heals it and answers.
func TestTransientHealFailureIsRetried(t *testing.T) {
	mem := vfs.NewMem()
	fy := vfs.NewFaulty(mem)
	o := &Options{FS: fy, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	m := model{}
	fillSealedRounds(t, s, m, 4, 400, rand.New(rand.NewSource(3)))
	require.NoError(t, s.Compact(context.Background()))
	segs := s.Segments()
	require.NoError(t, s.Close())
	for _, sg := range segs {
		ix := filepath.Join("/db", segment.IndexName(sg.ID))
		b, err := mem.ReadFile(ix)
		require.NoError(t, err)
		b[100] ^= 0x40 // inside the first key block
		require.NoError(t, mem.WriteFile(ix, b))
	}
	s = mustOpen(t, "/db", o)
	defer s.Close()
	// One failed read of a data file, exactly when the heal reads it.
	require.NoError(t, fy.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: func(p string) bool { return strings.HasSuffix(p, ".seg") }}))
	_, err := s.Get([]byte(sortedKeys(m)[0]))
	t.Logf("get under fault: %v", err)
	fy.Clear()
	// The device is fine again: every read must succeed now.
	require.NoError(t, diff(s, m, 2000), "a transient EIO during a heal must not make the segment unreadable for good")
}

// Logs whose records happen to be in key order take rebuildOrdered's
// streaming path on a rebuild.
func TestInOrderLogRebuild(t *testing.T) {
	shapes := map[string]func(s *Store, m model){
		"sequential puts": func(s *Store, m model) {
			for i := 0; i < 700; i++ {
				k := fmt.Sprintf("key-%04d", i)
				require.NoError(t, s.Put([]byte(k), []byte("v"+k)))
				m[k] = "v" + k
			}
		},
		"range delete first": func(s *Store, m model) {
			require.NoError(t, s.DeleteRange([]byte("a"), []byte("b")))
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("key-%04d", i)
				require.NoError(t, s.Put([]byte(k), []byte("v"+k)))
				m[k] = "v" + k
			}
		},
		"range delete covering later-added": func(s *Store, m model) {
			require.NoError(t, s.DeleteRange([]byte("key-"), []byte("key-9")))
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("key-%04d", i)
				require.NoError(t, s.Put([]byte(k), []byte("v"+k)))
				m[k] = "v" + k
			}
		},
		"puts and deletes in order": func(s *Store, m model) {
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("key-%04d", i)
				if i%3 == 0 {
					require.NoError(t, s.Delete([]byte(k)))
					continue
				}
				require.NoError(t, s.Put([]byte(k), []byte("v"+k)))
				m[k] = "v" + k
			}
		},
		"one batch in order": func(s *Store, m model) {
			b := s.NewBatch()
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("key-%04d", i)
				b.Put([]byte(k), []byte("v"+k))
				m[k] = "v" + k
			}
			require.NoError(t, s.Apply(b))
		},
	}
	for name, fill := range shapes {
		for _, how := range []string{"deleted", "damaged"} {
			t.Run(name+"/"+how, func(t *testing.T) {
				mem := vfs.NewMem()
				o := &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
				s := mustOpen(t, "/db", o)
				m := model{}
				fill(s, m)
				require.NoError(t, s.Seal())
				segs := s.Segments()
				require.NoError(t, s.Close())
				for _, sg := range segs {
					ix := filepath.Join("/db", segment.IndexName(sg.ID))
					if how == "deleted" {
						require.NoError(t, mem.Remove(ix))
					} else {
						b, err := mem.ReadFile(ix)
						require.NoError(t, err)
						b[40] ^= 1
						require.NoError(t, mem.WriteFile(ix, b))
					}
				}
				s = mustOpen(t, "/db", o)
				for i := 0; i < 800; i++ {
					require.NoError(t, checkGet(s, m, fmt.Sprintf("key-%04d", i)))
				}
				require.NoError(t, s.Close())
				s = mustOpen(t, "/db", o)
				require.Empty(t, s.RecoveryReport().RebuiltIndexes)
				checkAndClose(t, s)
			})
		}
	}
}

// Heals (index damage on disk) racing background merges, compactions,
// metrics, seals and Close.
func TestHealsDuringMerges(t *testing.T) {
	for iter := 0; iter < 3; iter++ {
		dir := t.TempDir()
		o := &Options{SegmentSize: 64 << 10, Merge: MergeOptions{MinRun: 2}}
		s := mustOpen(t, dir, o)
		m := model{}
		rng := rand.New(rand.NewSource(int64(iter) + 100))
		fillSealedRounds(t, s, m, 6, 300, rng)
		require.NoError(t, s.Close())
		// damage every index's first key block on disk
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".idx") {
				p := filepath.Join(dir, e.Name())
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				if len(b) > 300 {
					b[300] ^= 0x08
					require.NoError(t, os.WriteFile(p, b, 0o644))
				}
			}
		}
		s = mustOpen(t, dir, o)
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(g)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					switch g {
					case 0:
						it, err := s.NewIterator(nil)
						if err != nil {
							return
						}
						n := 0
						for ok := it.First(); ok; ok = it.Next() {
							if _, err := it.Value(); err != nil && !errors.Is(err, ErrClosed) {
								t.Errorf("value: %v", err)
							}
							n++
						}
						if err := it.Err(); err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("iter: %v", err)
						}
						_ = it.Close()
					case 1:
						k := fmt.Sprintf("key-%03d", r.Intn(2000))
						v := fmt.Sprintf("w%d", r.Int())
						mu.Lock()
						err := s.Put([]byte(k), []byte(v))
						if err == nil {
							m[k] = v
						}
						mu.Unlock()
						if err != nil {
							return
						}
					case 2:
						k := fmt.Sprintf("key-%03d", r.Intn(2000))
						mu.Lock()
						err := checkGet(s, m, k)
						mu.Unlock()
						if err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("%v", err)
							return
						}
					case 3:
						_ = s.Metrics()
						_ = s.Segments()
						if r.Intn(20) == 0 {
							ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
							_ = s.Compact(ctx)
							cancel()
						}
					}
				}
			}(g)
		}
		time.Sleep(time.Duration(200+rng.Intn(400)) * time.Millisecond)
		t.Logf("iter %d before close: rebuilds %d merges %d backlog %d", iter, s.Metrics().IndexRebuilds, s.Metrics().Merges, s.Metrics().MergeBacklog)
		cerr := s.Close()
		close(stop)
		wg.Wait()
		require.NoError(t, cerr)
		s = mustOpen(t, dir, o)
		for k, v := range m {
			got, err := s.Get([]byte(k))
			require.NoError(t, err, k)
			require.Equal(t, v, string(got), k)
		}
		t.Logf("iter %d: rebuilds %d merges %d", iter, s.Metrics().IndexRebuilds, s.Metrics().Merges)
		checkAndClose(t, s)
		ents, _ = os.ReadDir(dir)
		for _, e := range ents {
			require.False(t, strings.HasSuffix(e.Name(), ".rebuild"), e.Name())
		}
	}
}

// Merge outputs' streamed index files must be byte for byte what Build
// writes from the data file (the in-memory rebuild and Verify rely on it).
func TestMergeIndexEqualsBuild(t *testing.T) {
	for seed := int64(0); seed < 8; seed++ {
		mem := vfs.NewMem()
		o := &Options{FS: mem, SegmentSize: 32 << 10, Merge: MergeOptions{Disable: true}}
		s := mustOpen(t, "/db", o)
		rng := rand.New(rand.NewSource(seed))
		m := model{}
		for r := 0; r < 6; r++ {
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("key-%03d", rng.Intn(1000))
				switch rng.Intn(10) {
				case 0:
					require.NoError(t, s.Delete([]byte(k)))
					delete(m, k)
				case 1:
					e := fmt.Sprintf("key-%03d", rng.Intn(1000))
					if e > k {
						require.NoError(t, s.DeleteRange([]byte(k), []byte(e)))
						for mk := range m {
							if mk >= k && mk < e {
								delete(m, mk)
							}
						}
					}
				default:
					v := fmt.Sprintf("v%d", rng.Int())
					require.NoError(t, s.Put([]byte(k), []byte(v)))
					m[k] = v
				}
			}
			require.NoError(t, s.Seal())
			if r == 3 {
				require.NoError(t, s.Compact(context.Background()))
			}
		}
		require.NoError(t, s.Compact(context.Background()))
		require.NoError(t, diff(s, m, 1000))
		segs := s.Segments()
		require.NoError(t, s.Close())
		for _, sg := range segs {
			ixp := filepath.Join("/db", segment.IndexName(sg.ID))
			got, err := mem.ReadFile(ixp)
			require.NoError(t, err)
			var dp string
			for _, kind := range []segment.FileKind{segment.KindSeg, segment.KindLog} {
				p := filepath.Join("/db", segment.DataName(sg.ID, kind))
				if _, err := mem.Stat(p); err == nil {
					dp = p
				}
			}
			built, err := index.Build(mem, dp, sg.Size)
			require.NoError(t, err)
			require.Equal(t, built.Data, got, "seed %d segment %d (%s): streamed index differs from Build", seed, sg.ID, dp)
		}
		// rebuild all from scratch: must open
		for _, sg := range segs {
			require.NoError(t, mem.Remove(filepath.Join("/db", segment.IndexName(sg.ID))))
		}
		s = mustOpen(t, "/db", o)
		require.NoError(t, diff(s, m, 1000))
		checkAndClose(t, s)
	}
}

// Adversarial keys (empty key, prefixes, long shared prefixes, ties of the
// 8-byte search word) through merges, streamed rebuilds and heals.
func TestAdversarialKeysMergeRebuild(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 32 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	m := map[string]string{}
	var all []string
	long := strings.Repeat("p", 900)
	rng := rand.New(rand.NewSource(9))
	for r := 0; r < 5; r++ {
		for i := 0; i < 200; i++ {
			var k string
			switch rng.Intn(5) {
			case 0:
				k = strings.Repeat("\x00", rng.Intn(12))
			case 1:
				k = long + "12345678" + fmt.Sprint(rng.Intn(300))
			case 2:
				k = long[:rng.Intn(len(long))]
			case 3:
				k = "\xff\xff\xff" + string(rune('a'+rng.Intn(3)))
			default:
				k = fmt.Sprintf("k%d", rng.Intn(50))
			}
			v := fmt.Sprintf("v%d", rng.Int())
			require.NoError(t, s.Put([]byte(k), []byte(v)), "%q", k)
			if _, ok := m[k]; !ok {
				all = append(all, k)
			}
			m[k] = v
		}
		require.NoError(t, s.Seal())
	}
	require.NoError(t, s.Compact(context.Background()))
	check := func(s *Store) {
		for _, k := range all {
			got, err := s.Get([]byte(k))
			require.NoError(t, err, "%q", k)
			require.Equal(t, m[k], string(got), "%q", k)
		}
		for _, k := range []string{"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", long + "1234567", long + "x", "\xff\xff\xff\xff", "k"} {
			if _, ok := m[k]; ok {
				continue
			}
			_, err := s.Get([]byte(k))
			require.ErrorIs(t, err, ErrNotFound, "%q", k)
		}
		it, err := s.NewIterator(nil)
		require.NoError(t, err)
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		require.NoError(t, it.Err())
		require.NoError(t, it.Close())
		require.Equal(t, len(m), n)
	}
	check(s)
	segs := s.Segments()
	require.NoError(t, s.Close())
	for _, sg := range segs {
		ix := filepath.Join("/db", segment.IndexName(sg.ID))
		b, err := mem.ReadFile(ix)
		require.NoError(t, err)
		b[20] ^= 1
		require.NoError(t, mem.WriteFile(ix, b))
	}
	s = mustOpen(t, "/db", o)
	check(s)
	require.NoError(t, s.Close())
	for _, sg := range segs {
		require.NoError(t, mem.Remove(filepath.Join("/db", segment.IndexName(sg.ID))))
	}
	s = mustOpen(t, "/db", o)
	check(s)
	checkAndClose(t, s)
}

// Faults while Open rebuilds missing indexes: nothing half-written may stay.
func TestOpenRebuildFaults(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpRename, vfs.OpCreate} {
		for _, merged := range []bool{false, true} {
			t.Run(fmt.Sprint(op, merged), func(t *testing.T) {
				mem := vfs.NewMem()
				fy := vfs.NewFaulty(mem)
				o := &Options{FS: fy, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
				s := mustOpen(t, "/db", o)
				m := model{}
				fillSealedRounds(t, s, m, 3, 400, rand.New(rand.NewSource(1)))
				if merged {
					require.NoError(t, s.Compact(context.Background()))
				}
				segs := s.Segments()
				require.NoError(t, s.Close())
				for _, sg := range segs {
					require.NoError(t, mem.Remove(filepath.Join("/db", segment.IndexName(sg.ID))))
				}
				require.NoError(t, fy.Inject(vfs.Fault{Op: op, Nth: 1, Persistent: true, Match: func(p string) bool { return strings.Contains(p, ".idx") }}))
				s2, err := Open("/db", o)
				t.Logf("open under fault: %v", err)
				if err == nil {
					require.NoError(t, diff(s2, m, 2000))
					_ = s2.Close()
				}
				fy.Clear()
				names, _ := mem.List("/db")
				for _, n := range names {
					require.False(t, strings.HasSuffix(n, ".rebuild"), n)
				}
				s = mustOpen(t, "/db", o)
				require.NoError(t, diff(s, m, 2000))
				checkAndClose(t, s)
			})
		}
	}
}

// A gated device: once armed, every large ReadAt of a data file waits for
// the test to let it through, so the test counts how much a merge reads
// instead of timing it.
type gatedFS struct {
	vfs.FS
	armed   atomic.Bool
	waiting chan struct{} // a gated read is waiting
	gate    chan struct{} // one receive lets one read through
}

type gatedFile struct {
	vfs.File
	fs *gatedFS
}

func (f gatedFile) ReadAt(b []byte, off int64) (int, error) {
	if f.fs.armed.Load() && len(b) >= 64<<10 {
		select {
		case f.fs.waiting <- struct{}{}:
		default:
		}
		<-f.fs.gate
	}
	return f.File.ReadAt(b, off)
}

func (s *gatedFS) Open(name string) (vfs.File, error) {
	f, err := s.FS.Open(name)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return gatedFile{File: f, fs: s}, nil
}

// Close must stop a background merge promptly, including the index pass
// over the merge output (index.WriteOrdered): once the merge's context is
// cancelled it may read only a few more windows of data, not the whole
// output.
func TestCloseStopsMergeIndexPass(t *testing.T) {
	gfs := &gatedFS{FS: vfs.NewMem(), waiting: make(chan struct{}, 1), gate: make(chan struct{})}
	o := &Options{FS: gfs, SegmentSize: 4 << 20, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	// Random values: the merge output does not compress, so its index pass
	// reads about as much as the inputs hold.
	rng := rand.New(rand.NewSource(1))
	val := make([]byte, 4000)
	for r := 0; r < 2; r++ {
		for i := 0; i < 1000; i++ {
			rng.Read(val)
			require.NoError(t, s.Put([]byte(fmt.Sprintf("key-%02d-%05d", r, i)), val))
		}
		require.NoError(t, s.Seal())
	}
	gfs.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	compacted := make(chan error, 1)
	go func() { compacted <- s.Compact(ctx) }()
	// Let the merge through until it is well into its reads, then cancel.
	for i := 0; i < 3; i++ {
		<-gfs.waiting
		gfs.gate <- struct{}{}
	}
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	after := 0
	for done := false; !done; {
		select {
		case gfs.gate <- struct{}{}:
			after++
		case err := <-closed:
			require.NoError(t, err)
			done = true
		}
	}
	require.Error(t, <-compacted, "a cancelled Compact reports it")
	// Without the index pass looking at its context this is 12: the rest
	// of the output file.
	require.LessOrEqual(t, after, 3, "Close (and a cancelled Compact) waited for the merge's whole index pass")
}

// Stale rebuild files left by a crash are removed at Open and never trusted.
func TestStaleRebuildFiles(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	m := model{}
	fillSealedRounds(t, s, m, 3, 300, rand.New(rand.NewSource(2)))
	require.NoError(t, s.Compact(context.Background()))
	segs := s.Segments()
	require.NoError(t, s.Close())
	id := segs[0].ID
	good, err := mem.ReadFile(filepath.Join("/db", segment.IndexName(id)))
	require.NoError(t, err)
	require.NoError(t, mem.WriteFile(filepath.Join("/db", segment.IndexName(id)+".rebuild"), good[:len(good)/2]))
	require.NoError(t, mem.WriteFile(filepath.Join("/db", segment.IndexName(id+50)+".rebuild"), []byte("junk")))
	require.NoError(t, mem.Remove(filepath.Join("/db", segment.IndexName(id))))
	s = mustOpen(t, "/db", o)
	require.NoError(t, diff(s, m, 2000))
	// new segments get fresh ids
	fillSealedRounds(t, s, m, 2, 300, rand.New(rand.NewSource(3)))
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, diff(s, m, 2000))
	require.NoError(t, s.Close())
	names, _ := mem.List("/db")
	for _, n := range names {
		require.False(t, strings.HasSuffix(n, ".rebuild"), n)
	}
	s = mustOpen(t, "/db", o)
	require.NoError(t, diff(s, m, 2000))
	checkAndClose(t, s)
}

// A merge or an import whose output file was written, synced and closed, and
// whose index build then fails, closes that file once and removes it: the
// error path after digestWriter.finish must not close it again.
func TestOutputClosedOnceAfterBuildFailure(t *testing.T) {
	fsys := &trackFS{FS: vfs.NewMem()}
	var failBuilds atomic.Bool
	errBuild := errors.New("injected build failure")
	o := &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	s, err := open("/db", o, testHooks{beforeBuild: func(p string) error {
		if failBuilds.Load() && strings.HasSuffix(p, ".seg") {
			return errBuild
		}
		return nil
	}})
	require.NoError(t, err)
	for i := range 3 {
		for k := range 10 {
			key := fmt.Sprintf("k%03d", i*10+k)
			require.NoError(t, s.Put([]byte(key), []byte(key+"|v")))
		}
		require.NoError(t, s.Seal())
	}
	segs := s.Segments()
	var export bytes.Buffer
	_, err = s.Export(context.Background(), segs[0].ID, &export)
	require.NoError(t, err)

	failBuilds.Store(true)
	require.ErrorIs(t, s.Compact(context.Background()), errBuild)
	_, err = s.Import(context.Background(), bytes.NewReader(export.Bytes()))
	require.ErrorIs(t, err, errBuild)
	require.Zero(t, fsys.doubleCloses.Load(), "files closed twice")
	names, err := fsys.List("/db")
	require.NoError(t, err)
	for _, name := range names {
		require.False(t, strings.HasSuffix(name, ".seg"), "failed output %s left behind", name)
	}

	failBuilds.Store(false)
	v, err := s.Get([]byte("k015"))
	require.NoError(t, err)
	require.Equal(t, "k015|v", string(v))
	require.NoError(t, s.Close())
	require.NoError(t, fsys.held())
}
