package segstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// DeleteRange of generation after generation, with writers putting keys
// into a generation after its truncation returned (they must survive:
// newer than the tombstone), and seals, merges, imports and ReplaceAll of
// the store's own sealed snapshot running beside them.
func TestBreak16RangeDropRaces(t *testing.T) {
	for round := 0; round < 3; round++ {
		runRangeDropRace(t, uint64(round), round == 2)
	}
}

func runRangeDropRace(t *testing.T, seed uint64, withReplace bool) {
	mem := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: mem, SegmentSize: 4 << 10, Merge: MergeOptions{MinRun: 2}})
	defer s.Close()
	// a foreign store to import from
	other := mustOpen(t, "/other", &Options{FS: mem, SegmentSize: 4 << 10, Merge: MergeOptions{Disable: true}})
	var foreign [][]byte
	for i := 0; i < 8; i++ {
		for j := 0; j < 30; j++ {
			require.NoError(t, other.Put([]byte(fmt.Sprintf("x/%02d/%03d", i, j)), bytes.Repeat([]byte{'x'}, 40)))
		}
		require.NoError(t, other.Seal())
	}
	for _, sg := range other.Segments() {
		var buf bytes.Buffer
		_, err := other.Export(context.Background(), sg.ID, &buf)
		require.NoError(t, err)
		foreign = append(foreign, buf.Bytes())
	}
	require.NoError(t, other.Close())

	gkey := func(g, i int) []byte { return []byte(fmt.Sprintf("g%04d/%05d", g, i)) }
	const gens = 60
	var truncated atomic.Int64 // generations [0, truncated) have had their DeleteRange return
	truncated.Store(0)
	var stop atomic.Bool
	var gate sync.RWMutex // ReplaceAll holds it exclusively
	type rec struct {
		key, val []byte
	}
	var recMu sync.Mutex
	_ = &recMu
	var recs []rec
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	bg := func(fn func(rng *rand.Rand) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(len(errc))+uint64(time.Now().UnixNano())))
			for !stop.Load() {
				if err := fn(rng); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	// writer of old data: fills generation g (ahead of truncation)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for g := 0; g < gens && !stop.Load(); g++ {
			for i := 0; i < 60; i++ {
				if err := s.Put(gkey(g, i), bytes.Repeat([]byte{'o'}, 30)); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	// truncator: head truncations [g0000/, g<g>0); before each, every key
	// a resurrector saw with its value since the last one began must still
	// hold that value.
	var seq atomic.Int64
	var drBegun atomic.Int64
	var phase sync.RWMutex
	type vis struct {
		val []byte
		seq int64
	}
	seen := map[string]vis{}
	var violations atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for g := 0; g < gens && !stop.Load(); g++ {
			time.Sleep(300 * time.Microsecond)
			gate.RLock() // a ReplaceAll must not discard the sentinel
			phase.Lock()
			cur := drBegun.Load()
			for k, v := range seen {
				if v.seq != cur {
					continue
				}
				got, err := s.Get([]byte(k))
				if err != nil || !bytes.Equal(got, v.val) {
					violations.Add(1)
					t.Errorf("key %s seen as %q during DeleteRange #%d is now %q, %v", k, v.val, cur, got, err)
				}
			}
			err := s.Put([]byte("g0000/sentinel"), []byte("x"))
			if err != nil {
				phase.Unlock()
				gate.RUnlock()
				errc <- err
				return
			}
			drBegun.Add(1)
			phase.Unlock()
			gate.RUnlock()
			if err := s.DeleteRange([]byte("g0000/"), []byte(fmt.Sprintf("g%04d0", g))); err != nil {
				errc <- err
				return
			}
			truncated.Store(int64(g + 1))
		}
		stop.Store(true)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 99))
		for !stop.Load() {
			g := int(truncated.Load()) // the generation being truncated next / now
			k := gkey(g, 2000+rng.IntN(50))
			v := []byte(fmt.Sprintf("vis-%d", seq.Add(1)))
			gate.RLock()
			phase.RLock()
			b0 := drBegun.Load()
			if _, err := s.Get([]byte("g0000/sentinel")); err == nil || b0 == 0 {
				phase.RUnlock() // the tombstone of the DeleteRange in flight is not applied yet
				gate.RUnlock()
				continue
			}
			if err := s.Put(k, v); err != nil {
				phase.RUnlock()
				gate.RUnlock()
				errc <- err
				return
			}
			b1 := drBegun.Load()
			got, err := s.Get(k)
			if err == nil && bytes.Equal(got, v) && drBegun.Load() == b1 && b1 == b0 {
				seen[string(k)] = vis{v, b1}
			} else {
				delete(seen, string(k))
			}
			phase.RUnlock()
			gate.RUnlock()
		}
	}()
	bg(func(rng *rand.Rand) error {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		return s.Seal()
	})
	bg(func(rng *rand.Rand) error { return s.Compact(context.Background()) })
	bg(func(rng *rand.Rand) error {
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		_, err := s.Import(context.Background(), bytes.NewReader(foreign[rng.IntN(len(foreign))]))
		return err
	})
	if withReplace {
		bg(func(rng *rand.Rand) error {
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			gate.Lock()
			defer gate.Unlock()
			sn, err := s.NewSealedSnapshot()
			if err != nil {
				return err
			}
			defer sn.Close()
			exp := exportSnap(t, sn)
			var n atomic.Int64
			_, err = s.ReplaceAll(context.Background(), replaceSegs(exp, &n))
			return err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	check := func(what string) {
		// last value per key
		last := map[string][]byte{}
		for _, r := range recs {
			last[string(r.key)] = r.val
		}
		bad := 0
		for k, v := range last {
			got, err := s.Get([]byte(k))
			if err != nil || !bytes.Equal(got, v) {
				bad++
				if bad < 5 {
					t.Errorf("%s: key %s: got %q, %v; want %q", what, k, got, err, v)
				}
			}
		}
		require.Zero(t, bad, "%s: %d of %d keys written after their tombstone are lost", what, bad, len(last))
	}
	require.Zero(t, violations.Load())
	check("in process")
	t.Logf("seed %d: %d keys checked after tombstones, %d dropped segments", seed, seq.Load(), s.Metrics().RangeDropped)
	require.NoError(t, s.Close())
	s = mustOpen(t, "/db", &Options{FS: mem, SegmentSize: 4 << 10, Merge: MergeOptions{MinRun: 2}})
	check("after reopen")
}
