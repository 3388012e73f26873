package segstore

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// TestReplaceAllCrashEverySyncPoint: a store with sealed segments, imported
// segments (which ReplaceAll then keeps instead of copying) and live-file
// writes is replaced by another store's sealed snapshot, then written on.
// A power-loss image is taken before and after every barrier the store
// issues (its own and the background's), in every crash mode, round-robin.
// Each image must open to exactly one state of history: before the replace
// the old state (a prefix of it, under SyncManual), after the commit the
// new state with the writes acknowledged after it; never a mixture, never a
// write from the old live file brought back, no file left behind.
func TestReplaceAllCrashEverySyncPoint(t *testing.T) {
	seeds := testutil.CrashSeeds(t, 1)
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) {
			var points, inReplace, reused int
			for seed := range seeds {
				p, r, u := runReplaceCrash(t, uint64(seed), mode)
				points += p
				inReplace += r
				reused += u
			}
			t.Logf("crash points: %d, %d of them inside ReplaceAll; segments kept rather than copied: %d", points, inReplace, reused)
			require.Greater(t, inReplace, 0)
			require.Greater(t, reused, 0)
		})
	}
}

// replaceSource builds the store whose sealed snapshot is installed: keys
// "a-NNN" (disjoint from the target's "key-NNN", so that an import of some
// of its segments into the target has a simple model), a few seals, a range
// deletion, live writes. It returns the exported segments and the state
// they hold.
func replaceSource(t *testing.T, rng *rand.Rand) ([]exported, model) {
	t.Helper()
	a := mustOpen(t, "/a", &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	defer a.Close()
	m := model{}
	for round := range 4 {
		for range 6 + rng.IntN(6) {
			k := fmt.Sprintf("a-%03d", rng.IntN(30))
			if rng.IntN(6) == 0 {
				require.NoError(t, a.Delete([]byte(k)))
				delete(m, k)
				continue
			}
			v := fmt.Sprintf("a%d-%d-%s", round, rng.Uint32(), bytes.Repeat([]byte("y"), rng.IntN(120)))
			require.NoError(t, a.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		if round == 2 {
			lo, hi := fmt.Sprintf("a-%03d", rng.IntN(30)), fmt.Sprintf("a-%03d", rng.IntN(30))
			if lo > hi {
				lo, hi = hi, lo
			}
			require.NoError(t, a.DeleteRange([]byte(lo), []byte(hi)))
			m.deleteRange(lo, hi)
		}
		if round < 3 {
			require.NoError(t, a.Seal())
		}
	}
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	require.Equal(t, m, snapScan(t, sn))
	return exportSnap(t, sn), m
}

// importedModel is what a store holds after importing exp into an empty
// store: the target's "a-" keys after it imports the same streams.
func importedModel(t *testing.T, exp []exported) model {
	t.Helper()
	c := mustOpen(t, "/c", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer c.Close()
	var rs []*bytes.Reader
	for _, e := range exp {
		rs = append(rs, bytes.NewReader(e.data))
	}
	_, err := c.Import(t.Context(), readersOf(rs)...)
	require.NoError(t, err)
	return scanStore(t, c)
}

func readersOf(rs []*bytes.Reader) []io.Reader {
	out := make([]io.Reader, len(rs))
	for i, r := range rs {
		out[i] = r
	}
	return out
}

// runReplaceCrash runs one seed's workload and checks every crash image; it
// returns the images checked, how many were taken inside ReplaceAll, and
// how many segments ReplaceAll kept.
func runReplaceCrash(t *testing.T, seed uint64, mode SyncMode) (points, inReplace, reused int) {
	rng := rand.New(rand.NewPCG(seed, 0xbeef+uint64(mode)))
	exp, newModel := replaceSource(t, rng)
	// The target imports a prefix of the source's segments first: those
	// ReplaceAll keeps.
	nImp := 1 + rng.IntN(len(exp)-1)
	impModel := importedModel(t, exp[:nImp])

	const keySpace = 30
	keys := append(keyNames(keySpace), sortedKeys(newModel)...)
	for i := range 30 {
		keys = append(keys, fmt.Sprintf("a-%03d", i))
	}
	mem := vfs.NewMem()
	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, 5)))
	history := []model{{}}
	cur := func() model { return history[len(history)-1] }
	begin := func(next model) {
		history = append(history, next)
		rec.Started.Add(1)
	}
	ackAll := func() { rec.Acked.Store(int64(len(history) - 1)) }
	opts := func(fsys vfs.FS) *Options {
		return &Options{FS: fsys, Sync: mode, SegmentSize: 4 << 10, Merge: MergeOptions{Disable: true}}
	}
	b := mustOpen(t, "/db", opts(mem))
	mem.SetSyncHook(rec.Hook)
	writes := func(n int) {
		for range n {
			ops := randomOps(rng, 1+rng.IntN(3), keySpace)
			next := cur().clone()
			next.apply(ops)
			begin(next)
			require.NoError(t, applyOps(b, ops))
			if mode == SyncAlways {
				ackAll()
			}
			if rng.IntN(8) == 0 {
				require.NoError(t, b.Seal())
				ackAll() // a seal makes every write before it durable
			}
		}
	}
	writes(10 + rng.IntN(10))
	// The import: it syncs the live file first, then commits.
	next := cur().clone()
	for k, v := range impModel {
		next[k] = v
	}
	begin(next)
	var rs []*bytes.Reader
	for _, e := range exp[:nImp] {
		rs = append(rs, bytes.NewReader(e.data))
	}
	_, err := b.Import(t.Context(), readersOf(rs)...)
	require.NoError(t, err)
	ackAll()
	writes(5 + rng.IntN(10)) // live writes (unsynced under SyncManual) that the replace must drop

	var read atomic.Int64
	points0 := func() int {
		return len(rec.Points())
	}
	before := points0()
	begin(newModel.clone())
	infos, err := b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	require.NoError(t, err)
	ackAll()
	inReplace = points0() - before
	require.Len(t, infos, len(exp))
	var copiedBytes int64
	for _, e := range exp[nImp:] {
		copiedBytes += e.info.Size
	}
	require.Equal(t, copiedBytes, read.Load(), "the imported segments are kept, not read")
	reused = nImp

	writes(5 + rng.IntN(5))
	if mode == SyncManual {
		require.NoError(t, b.Sync())
		ackAll()
	}
	mem.SetSyncHook(nil)
	require.NoError(t, b.Close())
	rec.Add(testutil.CrashPoint{FS: mem, Lo: len(history) - 1, Hi: len(history) - 1, Label: "clean close"})

	all := rec.Points()
	for _, p := range all {
		gs, err := openGated("/db", opts(p.FS))
		require.NoError(t, err, "seed %d %s", seed, p.Label)
		matched := -1
		var first error
		for k := p.Lo; k <= p.Hi && k < len(history); k++ {
			err := fullDiff(gs.Store, history[k], keys)
			if err == nil {
				matched = k
				break
			}
			if first == nil {
				first = err
			}
		}
		if matched < 0 {
			gs.closeAll()
			t.Fatalf("seed %d %s (%v): state matches no history in [%d, %d]: %v", seed, p.Label, p.Mode, p.Lo, p.Hi, first)
		}
		orph, err := orphans(p.FS, gs.Store)
		require.NoError(t, err)
		require.Empty(t, orph, "seed %d %s: files left behind", seed, p.Label)
		require.NoError(t, gs.Check(), "seed %d %s", seed, p.Label)
		require.NoError(t, gs.closeAll())
	}
	return len(all), inReplace, reused
}
