package segstore

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// The crash test of DeleteRange: a randomized SyncAlways workload of puts,
// deletes, range deletions (alone and in batches with puts and deletes on
// either side of them), seals, Compact, background merges (MinRun 2),
// clean reopens and power losses it continues from. Every barrier the store
// issues, from any goroutine, is a crash point (rlRecorder, round-robin over
// the vfs crash modes); each image is opened and must read as the model
// after every acknowledged operation, plus at most the operations in flight,
// each entirely or not at all (checkCrashPoint).

// rdCrashOp is one operation of a batch: a put, a delete or a range
// deletion of [start, end).
type rdCrashOp struct {
	kind       byte // 'p', 'd' or 'r'
	key, value string
	start, end string
}

func (o rdCrashOp) String() string {
	switch o.kind {
	case 'p':
		return fmt.Sprintf("put %s", o.key)
	case 'd':
		return fmt.Sprintf("delete %s", o.key)
	}
	return fmt.Sprintf("deleteRange [%q, %q)", o.start, o.end)
}

func applyRangeOps(m model, ops []rdCrashOp) {
	for _, o := range ops {
		switch o.kind {
		case 'p':
			m[o.key] = o.value
		case 'd':
			delete(m, o.key)
		case 'r':
			m.deleteRange(o.start, o.end)
		}
	}
}

// writeRangeOps writes ops: one alone through Put, Delete or DeleteRange,
// several as one batch.
func writeRangeOps(s *Store, ops []rdCrashOp) error {
	if len(ops) == 1 {
		switch o := ops[0]; o.kind {
		case 'p':
			return s.Put([]byte(o.key), []byte(o.value))
		case 'd':
			return s.Delete([]byte(o.key))
		default:
			return s.DeleteRange([]byte(o.start), []byte(o.end))
		}
	}
	b := s.NewBatch()
	for _, o := range ops {
		var err error
		switch o.kind {
		case 'p':
			err = b.Put([]byte(o.key), []byte(o.value))
		case 'd':
			err = b.Delete([]byte(o.key))
		default:
			err = b.DeleteRange([]byte(o.start), []byte(o.end))
		}
		if err != nil {
			return err
		}
	}
	return s.Apply(b)
}

// randomRange draws a range of the key space: from the first key now and
// then, ends between keys now and then, past the last key now and then,
// and empty (start == end) now and then. Most cover a handful of keys.
func randomRange(rng *rand.Rand, keySpace int) (string, string) {
	i := rng.IntN(keySpace)
	j := min(keySpace, i+rng.IntN(8))
	start, end := fmt.Sprintf("key-%03d", i), fmt.Sprintf("key-%03d", j)
	switch rng.IntN(10) {
	case 0:
		start = ""
	case 1:
		start += "5" // between key i and key i+1
	case 2:
		end += "5"
	case 3:
		end = "l" // past every key
	case 4:
		end = start
	}
	if start > end {
		end = start // "key-0135" past "key-013": empty
	}
	return start, end
}

func randomRangeOps(rng *rand.Rand, n, keySpace int, value func() string) []rdCrashOp {
	ops := make([]rdCrashOp, n)
	for i := range ops {
		switch r := rng.IntN(10); {
		case r < 5:
			ops[i] = rdCrashOp{kind: 'p', key: fmt.Sprintf("key-%03d", rng.IntN(keySpace)), value: value()}
		case r < 7:
			ops[i] = rdCrashOp{kind: 'd', key: fmt.Sprintf("key-%03d", rng.IntN(keySpace))}
		default:
			start, end := randomRange(rng, keySpace)
			ops[i] = rdCrashOp{kind: 'r', start: start, end: end}
		}
	}
	return ops
}

type rdCrashStats struct {
	writes, rangeDels, batches, seals, compacts, reopens, crashReopens int
	merges, rangeDropped                                               int64
}

// count adds the metrics of a store about to be closed.
func (st *rdCrashStats) count(s *Store) {
	m := s.Metrics()
	st.merges += m.Merges
	st.rangeDropped += m.RangeDropped
}

func TestRangeDelCrashEverySyncPoint(t *testing.T) {
	seeds := testutil.CrashSeeds(t, 3)
	const steps = 160
	var points, wrong int
	var st rdCrashStats
	perMode := map[vfs.CrashMode]int{}
	for seed := 0; seed < seeds; seed++ {
		p, w := runRangeDelCrash(t, uint64(seed), steps, &st, perMode)
		points += p
		wrong += w
	}
	t.Logf("crash points covered: %d (seeds %d, steps %d); by mode: %v", points, seeds, steps, perMode)
	t.Logf("workload: %d writes (%d range deletions, %d batches), %d seals, %d compacts (%d merge steps in all), %d reopens, %d crash-reopens; %d segments dropped under a range tombstone",
		st.writes, st.rangeDels, st.batches, st.seals, st.compacts, st.merges, st.reopens, st.crashReopens, st.rangeDropped)
	require.Zero(t, wrong, "wrong crash images")
	require.GreaterOrEqual(t, points, 200*seeds)
}

// runRangeDelCrash runs one seed's workload and checks its crash points; it
// returns the points checked and how many were wrong.
func runRangeDelCrash(t *testing.T, seed uint64, steps int, st *rdCrashStats, perMode map[vfs.CrashMode]int) (int, int) {
	t.Helper()
	const keySpace = 40
	keys := append(keyNames(keySpace), "", "key-0005", "l")
	rng := rand.New(rand.NewPCG(seed, 0xde1))
	ctx := t.Context()
	mem := vfs.NewMem()
	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, 0xde2)))
	history := []model{{}} // history[i]: the state after i acknowledged operations
	cur := func() model { return history[len(history)-1] }
	n := 0
	value := func() string {
		n++
		return fmt.Sprintf("v%d-%d-%s", seed, n, strings.Repeat("x", rng.IntN(300)))
	}

	s := mustOpen(t, "/db", rlCrashOptions(mem))
	mem.SetSyncHook(rec.Hook)
	// A first state with keys to delete, in a sealed segment and live.
	for i := 0; i < keySpace; i += 2 {
		next := cur().clone()
		k := fmt.Sprintf("key-%03d", i)
		next[k] = value()
		history = append(history, next)
		rec.Started.Add(1)
		require.NoError(t, s.Put([]byte(k), []byte(next[k])))
		rec.Acked.Add(1)
		if i == keySpace/2 {
			require.NoError(t, s.Seal())
		}
	}
	for i := 0; i < steps; i++ {
		switch r := rng.IntN(100); {
		case r < 64:
			nops := 1
			if r >= 36 {
				nops = 2 + rng.IntN(4)
			}
			ops := randomRangeOps(rng, nops, keySpace, value)
			if r < 15 {
				// A range deletion alone.
				start, end := randomRange(rng, keySpace)
				ops = []rdCrashOp{{kind: 'r', start: start, end: end}}
			}
			next := cur().clone()
			applyRangeOps(next, ops)
			// Publish the state before the write can become durable, so
			// that a crash image showing it finds it in history.
			history = append(history, next)
			rec.Started.Add(1)
			require.NoError(t, writeRangeOps(s, ops), "%v", ops)
			rec.Acked.Add(1)
			st.writes++
			if len(ops) > 1 {
				st.batches++
			}
			for _, o := range ops {
				if o.kind == 'r' {
					st.rangeDels++
				}
			}
		case r < 78:
			require.NoError(t, s.Seal())
			st.seals++
		case r < 84:
			require.NoError(t, s.Compact(ctx))
			st.compacts++
		case r < 89:
			require.NoError(t, fullDiff(s, cur(), keys))
		case r < 96:
			st.count(s)
			require.NoError(t, s.Close())
			s = mustOpen(t, "/db", rlCrashOptions(mem))
			require.NoError(t, fullDiff(s, cur(), keys), "after a clean reopen")
			st.reopens++
		default:
			// Power loss now: continue on the image. Nothing is in flight,
			// so the image must show exactly the acknowledged history.
			img, mode := rec.Crash(rng)
			mem.SetSyncHook(nil)
			st.count(s)
			s.Close() // on the old file system, which is gone
			mem = img
			mem.SetSyncHook(rec.Hook)
			rec.SetMem(mem)
			s = mustOpen(t, "/db", rlCrashOptions(mem))
			require.NoError(t, fullDiff(s, cur(), keys), "after a crash (%v) with nothing in flight", mode)
			require.NoError(t, s.Check())
			st.crashReopens++
		}
	}
	require.NoError(t, fullDiff(s, cur(), keys))
	mem.SetSyncHook(nil)
	st.count(s)
	require.NoError(t, s.Close())

	points := rec.Points()
	wrong := 0
	for _, p := range points {
		perMode[p.Mode]++
		if err := checkCrashPoint(p, history, keys); err != nil {
			wrong++
			if wrong <= 10 {
				t.Errorf("seed %d crash point %s mode %v (acked %d, started %d): %v", seed, p.Label, p.Mode, p.Lo, p.Hi, err)
			}
		}
	}
	return len(points), wrong
}
