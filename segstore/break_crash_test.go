package segstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// TestBreakRangeCrashEverySyncPoint: a power cut at every barrier of the
// range workload (a DeleteRange followed at once by the seal that drops a
// covered segment, an import with a range tombstone that drops another,
// merges of segments holding range tombstones), with background merges on
// (MinRun 2) so that merges race the seals that drop segments.
func TestBreakRangeCrashEverySyncPoint(t *testing.T) {
	stream, delta, _, _ := rangeFaultStream(t)
	keys := append(keyNames(40), "", "probe")
	for round := range 3 {
		mem := vfs.NewMem()
		rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(uint64(round), 9)))
		s := mustOpen(t, "/db", rlCrashOptions(mem))
		mem.SetSyncHook(rec.Hook)
		history := []model{{}}
		for i, st := range rangeFaultWorkload(stream, delta) {
			cur := history[len(history)-1]
			rec.Started.Add(1)
			next, err := st.run(s, cur)
			require.NoError(t, err, "step %d %s", i, st.name)
			if next != nil {
				history = append(history, next)
			} else {
				history = append(history, cur)
			}
			rec.Acked.Add(1)
		}
		mem.SetSyncHook(nil)
		require.NoError(t, fullDiff(s, history[len(history)-1], keys))
		require.NoError(t, s.Close())
		points := rec.Points()
		wrong := 0
		for _, p := range points {
			if err := checkCrashPoint(p, history, keys); err != nil {
				wrong++
				if wrong < 5 {
					t.Errorf("round %d crash point %s mode %v (acked %d, started %d): %v", round, p.Label, p.Mode, p.Lo, p.Hi, err)
				}
			}
		}
		t.Logf("round %d: %d crash points, %d wrong", round, len(points), wrong)
	}
}

var _ = fmt.Sprint

// TestBreakRangeCrashSyncManual: the same workload under SyncManual, where
// only a seal, an import (which syncs the live file first) or Sync make
// writes durable: a crash at any barrier shows a prefix of history that
// holds everything before the last such point.
func TestBreakRangeCrashSyncManual(t *testing.T) {
	stream, delta, _, _ := rangeFaultStream(t)
	keys := append(keyNames(40), "", "probe")
	for round := range 2 {
		mem := vfs.NewMem()
		rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(uint64(round), 10)))
		o := rlCrashOptions(mem)
		o.Sync = SyncManual
		s := mustOpen(t, "/db", o)
		mem.SetSyncHook(rec.Hook)
		history := []model{{}}
		for i, st := range rangeFaultWorkload(stream, delta) {
			cur := history[len(history)-1]
			rec.Started.Add(1)
			next, err := st.run(s, cur)
			require.NoError(t, err, "step %d %s", i, st.name)
			if next != nil {
				history = append(history, next)
			} else {
				history = append(history, cur)
			}
			if st.name == "seal" || st.name == "import" || i%5 == 0 {
				if st.name != "seal" && st.name != "import" {
					require.NoError(t, s.Sync())
				}
				rec.Acked.Store(rec.Started.Load())
			}
		}
		mem.SetSyncHook(nil)
		require.NoError(t, s.Close())
		points := rec.Points()
		wrong := 0
		for _, p := range points {
			if err := checkCrashPointOpts(p, history, keys, func(fs vfs.FS) *Options {
				o := rlCrashOptions(fs)
				o.Sync = SyncManual
				return o
			}); err != nil {
				wrong++
				if wrong < 5 {
					t.Errorf("round %d crash point %s mode %v (acked %d, started %d): %v", round, p.Label, p.Mode, p.Lo, p.Hi, err)
				}
			}
		}
		t.Logf("round %d: %d crash points, %d wrong", round, len(points), wrong)
	}
}

// checkCrashPointOpts is checkCrashPoint with the options to open with.
func checkCrashPointOpts(p testutil.CrashPoint, history []model, keys []string, opts func(vfs.FS) *Options) error {
	gs, err := openGated("/db", opts(p.FS))
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer gs.closeAll()
	for k := p.Lo; k <= p.Hi && k < len(history); k++ {
		if fullDiff(gs.Store, history[k], keys) == nil {
			return gs.Check()
		}
	}
	return fmt.Errorf("state is no acknowledged prefix: vs %d ops: %v", p.Lo, fullDiff(gs.Store, history[p.Lo], keys))
}
