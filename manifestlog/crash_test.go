package manifestlog

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

var crashModes = []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset, vfs.CrashGarbageTail, vfs.CrashTornSectors}

// crashImage is the file system a power loss would leave at one sync point,
// with the number of commits acknowledged at that moment.
type crashImage struct {
	fs    *vfs.Mem
	acked int
	label string
}

// TestCrashAtEverySyncPoint runs adds, removes, merges, live switches,
// background rotations and forced rotations on a strict in-memory FS, takes a
// crash image in every crash mode before and after every sync (file and
// directory), and checks that each image opens to the state after some prefix
// of the issued commits that contains every acknowledged one. The images
// include crashes in the middle of a rotation (checkpoint written, not yet
// activated) and between activating a new generation and removing the old.
func TestCrashAtEverySyncPoint(t *testing.T) {
	seeds := testutil.CrashSeeds(t, 3)
	var total crashCounts
	for seed := 0; seed < seeds; seed++ {
		total.add(runCrashWorkload(t, uint64(seed), 250))
	}
	t.Logf("crash points covered: %d (%d seeds, %d modes, before and after every sync); "+
		"%d mid-rotation (newest generation written but not activated); "+
		"%d with a new generation activated and an older one not yet retired; "+
		"%d kept an unacknowledged commit; %d needed a repair at Open, %d of them restored torn frames from a replica",
		total.points, seeds, len(crashModes), total.midRotation, total.beforeRetire, total.inFlight, total.repaired, total.restored)
	require.Greater(t, total.midRotation, 0)
	require.Greater(t, total.beforeRetire, 0)
}

type crashCounts struct{ points, midRotation, beforeRetire, inFlight, repaired, restored int }

func (c *crashCounts) add(o crashCounts) {
	c.points += o.points
	c.midRotation += o.midRotation
	c.beforeRetire += o.beforeRetire
	c.inFlight += o.inFlight
	c.repaired += o.repaired
	c.restored += o.restored
}

// classify reports whether the image holds an unactivated newest generation
// (a crash mid-rotation) and whether it holds two or more activated ones (a
// crash after activating a generation, before retiring its predecessor).
func classify(t *testing.T, fsys vfs.FS) (mid, beforeRetire bool) {
	gens, err := listGenerations(fsys, testDir)
	require.NoError(t, err)
	activated := 0
	for i, g := range gens {
		ld, err := loadGeneration(fsys, g.path, g.gen, nil)
		require.NoError(t, err)
		if ld.activated {
			activated++
		} else if i == len(gens)-1 && len(gens) > 1 {
			mid = true
		}
	}
	return mid, activated >= 2
}

func runCrashWorkload(t *testing.T, seed uint64, steps int) (c crashCounts) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	crashRng := rand.New(rand.NewPCG(seed, 2))
	mem := vfs.NewMem()
	opts := Options{MinCheckpointBytes: 1 << 10, PreallocateBytes: 4 << 10}
	l, _, _, err := Open(mem, testDir, opts)
	require.NoError(t, err)

	var acked atomic.Int64
	var mu sync.Mutex
	var images []crashImage
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		mu.Lock()
		defer mu.Unlock()
		// Read acked before cloning: everything acknowledged by now was
		// synced by an earlier sync, so it must be in the image.
		a := int(acked.Load())
		for _, mode := range crashModes {
			img := mem.CrashClone(mode, crashRng)
			images = append(images, crashImage{fs: img, acked: a, label: fmt.Sprintf("seed %d #%d %+v mode %v", seed, len(images), ev, mode)})
		}
	})

	// history[k] is the state after k commits.
	m := newModel()
	history := []State{m.clone()}
	var w workload
	for i := 0; i < steps; i++ {
		if rng.IntN(25) == 0 {
			require.NoError(t, l.Checkpoint())
			continue
		}
		e := w.edit()
		m.apply(e)
		// Publish before the commit can become durable.
		history = append(history, m.clone())
		_, err := l.Commit(e)
		require.NoError(t, err)
		acked.Add(1)
	}
	require.NoError(t, l.Close())
	mem.SetSyncHook(nil)

	for i, img := range images {
		mid, before := classify(t, img.fs)
		if mid {
			c.midRotation++
		}
		if before {
			c.beforeRetire++
		}
		l, st, rep, err := Open(img.fs, testDir, opts)
		require.NoError(t, err, img.label)
		if len(rep.Actions) > 0 {
			c.repaired++
		}
		if len(rep.RestoredFrames) > 0 {
			c.restored++ // a torn group completed from its replica
		}
		if st.Seq > uint64(img.acked) {
			c.inFlight++
		}
		require.GreaterOrEqual(t, st.Seq, uint64(img.acked), "%s: lost an acknowledged commit", img.label)
		require.Less(t, int(st.Seq), len(history), img.label)
		requireStateEqual(t, history[st.Seq], st, img.label)
		if i%5 != 0 {
			require.NoError(t, l.Close())
			continue
		}
		// The recovered log accepts commits and keeps them (checked on a
		// fifth of the images, which rotates through the modes).
		seq, err := l.Commit(Edit{})
		require.NoError(t, err, img.label)
		require.Equal(t, st.Seq+1, seq)
		require.NoError(t, l.Close())
		l2, st2, _, err := Open(img.fs, testDir, opts)
		require.NoError(t, err, img.label)
		require.Equal(t, seq, st2.Seq, img.label)
		require.NoError(t, l2.Close())
	}
	c.points = len(images)
	return c
}
