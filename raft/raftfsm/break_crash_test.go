package raftfsm

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

func TestBreakFSMCrashEverySyncPoint(t *testing.T) {
	for seed := uint64(0); seed < 3; seed++ {
		runFSMCrash(t, seed)
	}
}

func runFSMCrash(t *testing.T, seed uint64) {
	srcMem := vfs.NewMem()
	setupFSM(t, srcMem, "/src", 100+seed, 150)
	src, err := openOn(t, srcMem, "/src")
	require.NoError(t, err)
	container := persist(t, src)
	require.NoError(t, src.Close())

	mem := vfs.NewMem()
	setupFSM(t, mem, "/dst", 200+seed, 60)
	f, err := openOn(t, mem, "/dst")
	require.NoError(t, err)

	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, 7)))
	mem.SetSyncHook(rec.Hook)
	history := []fsmState{stateOf(t, f)}
	do := func(op func() error) {
		begun := rec.Started.Add(1)
		require.NoError(t, op(), "seed %d op %d", seed, begun)
		history = append(history, stateOf(t, f))
		rec.Acked.Add(1)
	}
	do(func() error { return applyOp(f) })
	do(func() error { return f.Restore(io.NopCloser(bytes.NewReader(container))) })
	do(func() error { return applyOp(f) })
	own := persist(t, f)
	do(func() error { return applyOp(f) })
	do(func() error { return f.Restore(io.NopCloser(bytes.NewReader(own))) })
	do(func() error { return applyOp(f) })
	mem.SetSyncHook(nil)
	require.NoError(t, f.Close())

	wrong := 0
	imgs := rec.Points()
	for _, im := range imgs {
		g, err := openOn(t, im.FS, "/dst")
		if err != nil {
			wrong++
			t.Errorf("seed %d %s: open: %v", seed, im.Label, err)
			continue
		}
		got := stateOf(t, g)
		require.Equal(t, got.applied, g.AppliedIndex())
		ok := false
		for i := im.Lo; i <= im.Hi && i < len(history); i++ {
			if got.eq(history[i]) {
				ok = true
			}
		}
		if !ok {
			wrong++
			if wrong < 10 {
				t.Errorf("seed %d %s (acked %d begun %d): state with applied %d, %d keys matches none", seed, im.Label, im.Lo, im.Hi, got.applied, len(got.kv))
			}
		}
		g.Close()
	}
	t.Logf("seed %d: %d crash images", seed, len(imgs))
}
