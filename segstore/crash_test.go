package segstore

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// TestCrashAtEverySyncPoint runs a randomized single-writer workload of puts,
// deletes, batches and seals under SyncAlways, takes a crash image at every
// sync point, and checks that each image opens to the model after exactly the
// acknowledged batches, or after those plus the one batch in flight: never a
// partial batch, never a lost acknowledged write.
func TestCrashAtEverySyncPoint(t *testing.T) {
	seeds := testutil.CrashSeeds(t, 3)
	total := 0
	for seed := 0; seed < seeds; seed++ {
		total += runCrashWorkload(t, uint64(seed), 150)
	}
	t.Logf("crash points covered: %d (seeds %d)", total, seeds)
	require.GreaterOrEqual(t, total, 300*seeds/3)
}

func runCrashWorkload(t *testing.T, seed uint64, steps int) int {
	t.Helper()
	const keySpace = 40
	rng := rand.New(rand.NewPCG(seed, 99))
	mem := vfs.NewMem()
	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, 7)))
	// history[i] is the model after i acknowledged batches.
	history := []model{{}}
	opts := &Options{FS: mem, SegmentSize: 4 << 10}
	s := mustOpen(t, "/db", opts)
	mem.SetSyncHook(rec.Hook)
	for i := 0; i < steps; i++ {
		if rng.IntN(12) == 0 {
			require.NoError(t, s.Seal())
			continue
		}
		ops := randomOps(rng, 1+rng.IntN(4), keySpace)
		next := history[len(history)-1].clone()
		next.apply(ops)
		// Publish the model before the write can become durable, so that a
		// crash image showing the batch finds it in history.
		history = append(history, next)
		require.NoError(t, applyOps(s, ops))
		rec.Acked.Add(1)
	}
	mem.SetSyncHook(nil)
	require.NoError(t, s.Close())

	points := rec.Points()
	for _, p := range points {
		st, err := Open("/db", &Options{FS: p.FS, SegmentSize: 4 << 10})
		require.NoError(t, err, "crash point %s", p.Label)
		matched := -1
		for k := p.Lo; k < len(history) && k <= p.Lo+1; k++ {
			if diff(st, history[k], keySpace) == nil {
				matched = k
				break
			}
		}
		if matched < 0 {
			t.Fatalf("seed %d crash point %s: state matches neither %d nor %d acknowledged batches: %v",
				seed, p.Label, p.Lo, p.Lo+1, diff(st, history[p.Lo], keySpace))
		}
		require.NoError(t, st.Check(), "crash point %s", p.Label)
		// The recovered store must accept writes and keep them.
		require.NoError(t, st.Put([]byte("after-crash"), []byte("ok")), "crash point %s", p.Label)
		require.NoError(t, st.Close())
		st, err = Open("/db", &Options{FS: p.FS, SegmentSize: 4 << 10})
		require.NoError(t, err)
		v, err := st.Get([]byte("after-crash"))
		require.NoError(t, err)
		require.Equal(t, "ok", string(v))
		require.NoError(t, diff(st, history[matched], keySpace))
		require.NoError(t, st.Close())
	}
	return len(points)
}
