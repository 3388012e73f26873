package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// rangeFaultStream exports from a peer a segment with keys key-030..039
// and a range tombstone over [key-030, key-040) written before them, and
// one more key: importing it drops a sealed segment that holds only keys
// of that range.
func rangeFaultStream(t *testing.T) ([]byte, model, string, string) {
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer peer.Close()
	require.NoError(t, peer.DeleteRange([]byte("key-030"), []byte("key-040")))
	d := model{}
	for i := 30; i < 40; i += 3 {
		k := fmt.Sprintf("key-%03d", i)
		require.NoError(t, peer.Put([]byte(k), []byte("peer-"+k)))
		d[k] = "peer-" + k
	}
	return exportNewest(t, peer), d, "key-030", "key-040"
}

type rfStep struct {
	name string
	// run performs the step on s; next is the model if it is acknowledged
	// (nil: the step changes no key).
	run func(s *Store, m model) (next model, err error)
}

func rfPut(k, v string) rfStep {
	return rfStep{"put " + k, func(s *Store, m model) (model, error) {
		n := m.clone()
		n[k] = v
		return n, s.Put([]byte(k), []byte(v))
	}}
}

func rfDeleteRange(a, b string) rfStep {
	return rfStep{"delete range " + a + ".." + b, func(s *Store, m model) (model, error) {
		n := m.clone()
		n.deleteRange(a, b)
		return n, s.DeleteRange([]byte(a), []byte(b))
	}}
}

var rfSeal = rfStep{"seal", func(s *Store, m model) (model, error) { return nil, s.Seal() }}
var rfCompact = rfStep{"compact", func(s *Store, m model) (model, error) { return nil, s.Compact(bgCtx()) }}

// rangeFaultWorkload: sealed segments of ten keys each; a DeleteRange
// that covers one of them whole, then a seal (the commit that drops it);
// an import with a range tombstone that drops another; Compact (merges
// of segments with range tombstones); then the same again on the merged
// state.
func rangeFaultWorkload(stream []byte, delta model) []rfStep {
	var steps []rfStep
	for i := range 40 {
		k := fmt.Sprintf("key-%03d", i)
		steps = append(steps, rfPut(k, "v1-"+k))
		if i%10 == 9 {
			steps = append(steps, rfSeal)
		}
	}
	steps = append(steps,
		rfPut("key-002", "v2"),
		rfDeleteRange("key-005", "key-025"), // key-010..019's segment dies
		rfPut("key-012", "v2-after"),
		rfSeal,
		rfStep{"import", func(s *Store, m model) (model, error) {
			n := m.clone()
			n.deleteRange("key-030", "key-040")
			for k, v := range delta {
				n[k] = v
			}
			_, err := s.Import(bgCtx(), bytes.NewReader(stream))
			return n, err
		}},
		rfPut("key-031", "v3"),
		rfCompact,
		rfDeleteRange("", "key-003"),
		rfPut("key-000", "v4"),
		rfSeal,
		rfDeleteRange("key-000", "key-039"),
		rfSeal,
		rfCompact,
		rfPut("key-020", "v5"),
	)
	return steps
}

// runRangeFault runs the workload on Faulty(Mem) with the n-th operation
// of kind o failing (n = MaxInt: never), then checks reopens with and
// without a crash. It returns how many operations of kind o it saw.
func runRangeFault(t *testing.T, o vfs.Op, n int, persistent bool) (int, error) {
	stream, delta, _, _ := rangeFaultStream(t)
	keys := keyNames(40)
	mem := vfs.NewMem()
	fty := vfs.NewFaulty(mem)
	opts := func(fs vfs.FS) *Options {
		return &Options{FS: fs, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}}
	}
	s, err := Open("/db", opts(fty))
	if err != nil {
		return 0, err
	}
	arm := &faultArm{n: n}
	require.NoError(t, fty.Inject(arm.fault(o, persistent, false)))
	m := model{}
	var pending model
	failed := false
	for i, st := range rangeFaultWorkload(stream, delta) {
		next, err := st.run(s, m)
		switch {
		case err == nil:
			if next != nil {
				m = next
			}
			continue
		case s.failed() != nil:
			if !errors.Is(err, ErrFailed) {
				// The step that failed the store may say why in its own
				// words; every later write must say ErrFailed.
				if e2 := s.Put([]byte("probe"), nil); !errors.Is(e2, ErrFailed) {
					s.Close()
					return 0, fmt.Errorf("step %d (%s): store failed, then a put says %v", i, st.name, e2)
				}
			}
			pending = next
			failed = true
		default:
			// A failure that did not fail the store changed nothing.
			var e error
			arm.checking(func() error { e = fullDiff(s, m, keys); return nil })
			if e != nil {
				s.Close()
				return 0, fmt.Errorf("step %d (%s) failed with %v without failing the store, yet changed state: %w", i, st.name, err, e)
			}
			continue
		}
		break
	}
	_ = failed
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	var imgs []*vfs.Mem
	for _, mode := range testutil.CrashModes() {
		imgs = append(imgs, mem.CrashClone(mode, rng))
	}
	s.Close()
	imgs = append(imgs, mem)
	arm.mu.Lock()
	seen := arm.seen
	arm.mu.Unlock()
	for i, img := range imgs {
		what := "no crash"
		if i < len(testutil.CrashModes()) {
			what = fmt.Sprint(testutil.CrashModes()[i])
		}
		gs, err := openGated("/db", opts(img))
		if err != nil {
			return seen, fmt.Errorf("reopen (%s): %w", what, err)
		}
		e := fullDiff(gs.Store, m, keys)
		if e != nil && pending != nil && fullDiff(gs.Store, pending, keys) == nil {
			e = nil
		}
		if e == nil {
			e = gs.Check()
		}
		if orph, err := orphans(img, gs.Store); e == nil && (err != nil || len(orph) > 0) {
			e = fmt.Errorf("orphans %v (%v)", orph, err)
		}
		gs.closeAll()
		if e != nil {
			return seen, fmt.Errorf("reopen (%s): %w", what, e)
		}
	}
	return seen, nil
}

// TestBreakRangeFaults: one I/O error at every point of a workload of
// range deletions, seals that drop covered segments, an import with a
// range tombstone and merges: the store fails cleanly or succeeds, and a
// reopen (with or without a crash) shows acknowledged history.
func TestBreakRangeFaults(t *testing.T) {
	kinds := []vfs.Op{vfs.OpFileSync, vfs.OpDirSync, vfs.OpWrite, vfs.OpRemove, vfs.OpCreate, vfs.OpTruncate, vfs.OpRead, vfs.OpOpen}
	bad := 0
	for _, o := range kinds {
		total, err := runRangeFault(t, o, math.MaxInt, false)
		require.NoError(t, err)
		for _, persistent := range []bool{false, true} {
			for n := 1; n <= total; n++ {
				if _, err := runRangeFault(t, o, n, persistent); err != nil {
					bad++
					if bad < 10 {
						t.Errorf("%v #%d/%d persistent=%v: %v", o, n, total, persistent, err)
					}
				}
			}
		}
	}
}

func bgCtx() context.Context { return context.Background() }
