package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

var crashModes = []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset,
	vfs.CrashGarbageTail, vfs.CrashMetadataPrefix, vfs.CrashTornSectors}

type crashImg struct {
	fs     *vfs.Mem
	lo, hi int
	label  string
}

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

	var mu sync.Mutex
	var imgs []crashImg
	acked, begun := 0, 0
	rng := rand.New(rand.NewPCG(seed, 7))
	n := 0
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		mu.Lock()
		defer mu.Unlock()
		mode := crashModes[n%len(crashModes)]
		n++
		imgs = append(imgs, crashImg{fs: mem.CrashClone(mode, rng), lo: acked, hi: begun,
			label: fmt.Sprintf("#%d %v %v before=%v %s", n, mode, ev.Kind, ev.Before, ev.Name)})
	})
	history := []fsmState{stateOf(t, f)}
	do := func(op func() error) {
		mu.Lock()
		begun++
		mu.Unlock()
		require.NoError(t, op(), "seed %d op %d", seed, begun)
		history = append(history, stateOf(t, f))
		mu.Lock()
		acked++
		mu.Unlock()
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
	for _, im := range imgs {
		g, err := openOn(t, im.fs, "/dst")
		if err != nil {
			wrong++
			t.Errorf("seed %d %s: open: %v", seed, im.label, err)
			continue
		}
		got := stateOf(t, g)
		require.Equal(t, got.applied, g.AppliedIndex())
		ok := false
		for i := im.lo; i <= im.hi && i < len(history); i++ {
			if got.eq(history[i]) {
				ok = true
			}
		}
		if !ok {
			wrong++
			if wrong < 10 {
				t.Errorf("seed %d %s (acked %d begun %d): state with applied %d, %d keys matches none", seed, im.label, im.lo, im.hi, got.applied, len(got.kv))
			}
		}
		g.Close()
	}
	t.Logf("seed %d: %d crash images", seed, len(imgs))
}
