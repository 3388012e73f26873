package segstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// crashSeeds returns how many workload seeds the crash tests run: a few in
// make test, many more under make crash (SEGKV_CRASH_SEEDS).
func crashSeeds(t *testing.T, def int) int {
	if v := os.Getenv("SEGKV_CRASH_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return def
}

// crashPoint is the file system a power loss would leave at one sync point,
// with how much of history had been acknowledged at that moment.
type crashPoint struct {
	fs    *vfs.Mem
	acked int // batches acknowledged before the crash
	label string
}

// crashRecorder takes a crash image before and after every sync the store
// performs, in every crash mode, round-robin.
type crashRecorder struct {
	mem    *vfs.Mem
	rng    *rand.Rand
	acked  *atomic.Int64
	mu     sync.Mutex
	points []crashPoint
	n      int
}

var crashModes = []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset, vfs.CrashGarbageTail, vfs.CrashMetadataPrefix, vfs.CrashTornSectors}

func (r *crashRecorder) hook(ev vfs.SyncEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Read acked first: everything acknowledged by now was synced by an
	// earlier sync, so it must be in the image taken next.
	acked := int(r.acked.Load())
	mode := crashModes[r.n%len(crashModes)]
	r.n++
	img := r.mem.CrashClone(mode, r.rng)
	r.points = append(r.points, crashPoint{fs: img, acked: acked, label: fmt.Sprintf("%d:%v before=%v %s mode=%d", r.n, ev.Kind, ev.Before, ev.Name, mode)})
}

// TestCrashAtEverySyncPoint runs a randomized single-writer workload of puts,
// deletes, batches and seals under SyncAlways, takes a crash image at every
// sync point, and checks that each image opens to the model after exactly the
// acknowledged batches, or after those plus the one batch in flight: never a
// partial batch, never a lost acknowledged write.
func TestCrashAtEverySyncPoint(t *testing.T) {
	seeds := crashSeeds(t, 3)
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
	var acked atomic.Int64
	rec := &crashRecorder{mem: mem, rng: rand.New(rand.NewPCG(seed, 7)), acked: &acked}
	// history[i] is the model after i acknowledged batches.
	history := []model{{}}
	opts := &Options{FS: mem, SegmentSize: 4 << 10}
	s := mustOpen(t, "/db", opts)
	mem.SetSyncHook(rec.hook)
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
		acked.Add(1)
	}
	mem.SetSyncHook(nil)
	require.NoError(t, s.Close())

	for _, p := range rec.points {
		st, err := Open("/db", &Options{FS: p.fs, SegmentSize: 4 << 10})
		require.NoError(t, err, "crash point %s", p.label)
		matched := -1
		for k := p.acked; k < len(history) && k <= p.acked+1; k++ {
			if diff(st, history[k], keySpace) == nil {
				matched = k
				break
			}
		}
		if matched < 0 {
			t.Fatalf("seed %d crash point %s: state matches neither %d nor %d acknowledged batches: %v",
				seed, p.label, p.acked, p.acked+1, diff(st, history[p.acked], keySpace))
		}
		require.NoError(t, st.Check(), "crash point %s", p.label)
		// The recovered store must accept writes and keep them.
		require.NoError(t, st.Put([]byte("after-crash"), []byte("ok")), "crash point %s", p.label)
		require.NoError(t, st.Close())
		st, err = Open("/db", &Options{FS: p.fs, SegmentSize: 4 << 10})
		require.NoError(t, err)
		v, err := st.Get([]byte("after-crash"))
		require.NoError(t, err)
		require.Equal(t, "ok", string(v))
		require.NoError(t, diff(st, history[matched], keySpace))
		require.NoError(t, st.Close())
	}
	return len(rec.points)
}
