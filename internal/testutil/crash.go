package testutil

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

// CrashSeeds returns how many workload seeds a crash test runs: def in
// make test, SEGKV_CRASH_SEEDS under make crash.
func CrashSeeds(t testing.TB, def int) int {
	t.Helper()
	if v := os.Getenv("SEGKV_CRASH_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "SEGKV_CRASH_SEEDS")
		return n
	}
	return def
}

// CrashModes returns every crash mode of vfs.Mem, in the order recorders
// cycle through them.
func CrashModes() []vfs.CrashMode {
	return []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset,
		vfs.CrashGarbageTail, vfs.CrashMetadataPrefix, vfs.CrashTornSectors}
}

// CrashPoint is one crash image and the window of history it may show: at
// least Lo operations had been acknowledged before it was taken, at most Hi
// had begun.
type CrashPoint struct {
	FS     *vfs.Mem
	Lo, Hi int
	Mode   vfs.CrashMode
	Label  string
}

// CrashRecorder takes a power-loss image of a vfs.Mem before and after
// every sync (install Hook with SetSyncHook), cycling through the crash
// modes. The workload counts its logical operations in Acked (after each
// is acknowledged) and Started (before each begins).
type CrashRecorder struct {
	Acked   atomic.Int64 // logical operations acknowledged
	Started atomic.Int64 // logical operations begun (>= Acked)
	// Widen, if set, runs between the reading of Acked and the image.
	// A test sets it to a pause to make likely what a loaded machine does
	// now and then: a writer not waiting on this sync acknowledges more
	// operations and begins the next before the image is taken, so that a
	// checker bounding the image by Acked+1 rather than by Started is seen
	// to be wrong. Set it before installing Hook.
	Widen func()

	mu     sync.Mutex
	mem    *vfs.Mem // nil while the workload switches file systems
	rng    *rand.Rand
	n      int
	points []CrashPoint
}

// NewCrashRecorder returns a recorder of mem whose crash images draw their
// randomness from rng.
func NewCrashRecorder(mem *vfs.Mem, rng *rand.Rand) *CrashRecorder {
	return &CrashRecorder{mem: mem, rng: rng}
}

// Hook is the vfs.Mem sync hook that records the images.
func (r *CrashRecorder) Hook(ev vfs.SyncEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return
	}
	// Acked before the image: everything acknowledged by then was synced
	// by an earlier barrier. Started after it: nothing begun later can be
	// in the image.
	lo := int(r.Acked.Load())
	if r.Widen != nil {
		r.Widen()
	}
	modes := CrashModes()
	mode := modes[r.n%len(modes)]
	r.n++
	img := r.mem.CrashClone(mode, r.rng)
	hi := int(r.Started.Load())
	r.points = append(r.points, CrashPoint{FS: img, Lo: lo, Hi: hi, Mode: mode,
		Label: fmt.Sprintf("#%d %v %v before=%v %s", r.n, mode, ev.Kind, ev.Before, ev.Name)})
}

// SetMem changes the file system images are taken of; nil pauses the
// recorder (while a workload swaps file systems).
func (r *CrashRecorder) SetMem(mem *vfs.Mem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mem = mem
}

// Add records a point the workload made itself (a clean shutdown's image).
func (r *CrashRecorder) Add(p CrashPoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.points = append(r.points, p)
}

// Points returns the images recorded so far.
func (r *CrashRecorder) Points() []CrashPoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]CrashPoint(nil), r.points...)
}

// Crash takes a power-loss image now, in a mode drawn from pick, and pauses
// the recorder (the workload then continues on the image: SetMem). It
// returns the image and its mode.
func (r *CrashRecorder) Crash(pick *rand.Rand) (*vfs.Mem, vfs.CrashMode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	modes := CrashModes()
	mode := modes[pick.IntN(len(modes))]
	img := r.mem.CrashClone(mode, r.rng)
	r.mem = nil
	return img, mode
}
