package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestReplaceAllFaults fails the n-th operation of one kind (write, file
// sync, directory sync, read, create, open, preallocate) during a
// ReplaceAll, for every n the call reaches, once or from then on. Each
// trial checks: a ReplaceAll that returned nil installed the new state; one
// that failed without failing the store changed nothing, left no file
// behind and a retry succeeds; one that failed the store (only its
// manifest commit may) reports ErrFailed, reads still show the old state,
// and a reopen (with or without a crash) shows the old state or the new
// one, whole. No descriptor or mapping leaks and none is closed twice.
func TestReplaceAllFaults(t *testing.T) {
	exp, newModel := batchedSource(t)
	nImp := len(exp) / 2
	impModel := importedModel(t, exp[:nImp])
	ops := []vfs.Op{vfs.OpWrite, vfs.OpFileSync, vfs.OpDirSync, vfs.OpRead, vfs.OpCreate, vfs.OpOpen, vfs.OpPreallocate}
	var trials, failedStore, refused, passed int
	for _, op := range ops {
		// Every point once; from then on for the operations whose
		// repetition a ReplaceAll could retry into.
		modes := []bool{false}
		if op == vfs.OpWrite || op == vfs.OpFileSync {
			modes = append(modes, true)
		}
		for _, persistent := range modes {
			for n := 1; ; n++ {
				fired, outcome := replaceFaultTrial(t, exp, nImp, impModel, newModel, op, n, persistent)
				trials++
				switch outcome {
				case "failed":
					failedStore++
				case "refused":
					refused++
				default:
					passed++
				}
				if !fired || n > 40 {
					break
				}
			}
		}
	}
	t.Logf("%d trials: %d refused with nothing changed, %d failed the store, %d passed (fault elsewhere or absorbed)", trials, refused, failedStore, passed)
	require.Greater(t, refused, 0)
	require.Greater(t, failedStore, 0)
}

// batchedSource is a source store whose segments hold one batch each (a
// frame: few writes to fail), with a range deletion among them.
func batchedSource(t *testing.T) ([]exported, model) {
	t.Helper()
	a := mustOpen(t, "/a", &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	defer a.Close()
	m := model{}
	for round := range 4 {
		bt := a.NewBatch()
		if round == 2 {
			require.NoError(t, bt.DeleteRange([]byte("a-002"), []byte("a-005")))
			m.deleteRange("a-002", "a-005")
		}
		for k := range 8 {
			key, v := fmt.Sprintf("a-%03d", k+round*2), fmt.Sprintf("r%d-%d", round, k)
			require.NoError(t, bt.Put([]byte(key), []byte(v)))
			m[key] = v
		}
		require.NoError(t, a.Apply(bt))
		if round < 3 {
			require.NoError(t, a.Seal())
		}
	}
	sn, err := a.NewSealedSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	return exportSnap(t, sn), m
}

// replaceFaultTrial runs one trial and reports whether the fault fired and
// how ReplaceAll ended: "ok", "refused" or "failed".
func replaceFaultTrial(t *testing.T, exp []exported, nImp int, impModel, newModel model, op vfs.Op, n int, persistent bool) (bool, string) {
	label := fmt.Sprintf("%v #%d persistent=%v", op, n, persistent)
	mem := vfs.NewMem()
	ft := vfs.NewFaulty(mem)
	tfs := &trackFS{FS: ft}
	o := &Options{FS: tfs, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
	b := mustOpen(t, "/db", o)
	old := model{}
	putAll(t, b, old, "key-1", "sealed", "key-2", "sealed")
	require.NoError(t, b.Seal())
	var rs []io.Reader
	for _, e := range exp[:nImp] {
		rs = append(rs, bytes.NewReader(e.data))
	}
	_, err := b.Import(t.Context(), rs...)
	require.NoError(t, err)
	for k, v := range impModel {
		old[k] = v
	}
	putAll(t, b, old, "key-2", "live", "key-3", "live")
	require.Equal(t, old, scanStore(t, b))
	requireNoStrays(t, b, mem) // the background is idle: its spare is made
	seq := b.ManifestSeq()

	arm := &faultArm{n: n}
	require.NoError(t, ft.Inject(arm.fault(op, persistent, false)))
	var read atomic.Int64
	_, err = b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
	ft.Clear()

	outcome := "ok"
	want := newModel
	switch {
	case err == nil:
		require.Equal(t, newModel, scanStore(t, b), label)
	case errors.Is(err, ErrFailed):
		outcome = "failed"
		require.True(t, arm.fired, label)
		require.ErrorIs(t, b.failed(), ErrFailed, label)
		require.ErrorIs(t, b.Put([]byte("x"), []byte("y")), ErrFailed, label)
		require.Equal(t, old, scanStore(t, b), "%s: reads answer from the old state", label)
		want = nil // old or new, decided below
	default:
		outcome = "refused"
		require.True(t, arm.fired, "%s: %v", label, err)
		require.ErrorIs(t, err, vfs.ErrInjected, label)
		require.NoError(t, b.failed(), "%s: a refused ReplaceAll must not fail the store", label)
		require.Equal(t, seq, b.ManifestSeq(), label)
		require.Equal(t, old, scanStore(t, b), "%s: nothing changed", label)
		requireNoStrays(t, b, mem)
		read.Store(0)
		_, err := b.ReplaceAll(t.Context(), replaceSegs(exp, &read))
		require.NoError(t, err, "%s: the store goes on", label)
		require.Equal(t, newModel, scanStore(t, b), label)
	}
	images := []*vfs.Mem{mem}
	if outcome == "failed" {
		// Whether the failed commit is durable decides between the two
		// states: a power loss must not make a mixture of them.
		images = append(images, mem.CrashClone(vfs.CrashDropUnsynced, nil))
	}
	b.Close()
	require.NoError(t, tfs.held(), label)

	for i, img := range images {
		what := []string{"reopen", "reopen after a crash"}[i]
		gs, err := openGated("/db", &Options{FS: img, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
		require.NoError(t, err, "%s: %s", label, what)
		got := scanStore(t, gs.Store)
		if want != nil {
			require.Equal(t, want, got, "%s: %s", label, what)
		} else if !modelsEqual(got, old) {
			require.Equal(t, newModel, got, "%s: %s: neither the old state nor the new one", label, what)
		}
		orph, err := orphans(img, gs.Store)
		require.NoError(t, err)
		require.Empty(t, orph, "%s: %s", label, what)
		require.NoError(t, gs.Check(), "%s: %s", label, what)
		require.NoError(t, gs.closeAll())
	}
	return arm.fired, outcome
}

func modelsEqual(a, b model) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// closeGateReader hands out its data in small pieces; after the first
// piece it waits until Close has begun on s, so that Close races a
// ReplaceAll in the middle of its copy.
type closeGateReader struct {
	r     *bytes.Reader
	s     *Store
	reads int
}

func (g *closeGateReader) Read(p []byte) (int, error) {
	g.reads++
	if g.reads > 1 {
		for !g.s.closed.Load() {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return g.r.Read(p[:min(len(p), 64)])
}

// TestReplaceAllCloseRace: Close during a ReplaceAll (in the middle of its
// copy, and at random moments) makes it return ErrClosed with nothing
// changed, or lets it finish; either way Close returns nil, no descriptor
// or mapping is left open, and a reopen shows the old state or the new one,
// whole, with no file left behind.
func TestReplaceAllCloseRace(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	exp, newModel := replaceSource(t, rng)
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	var closedMid, finished int
	for round := range rounds {
		mem := vfs.NewMem()
		tfs := &trackFS{FS: mem}
		o := &Options{FS: tfs, SegmentSize: 1 << 20, Merge: MergeOptions{MinRun: 2}}
		b := mustOpen(t, "/db", o)
		old := model{}
		putAll(t, b, old, "key-1", "sealed")
		require.NoError(t, b.Seal())
		putAll(t, b, old, "key-2", "live")
		segs := make([]ReplaceSegment, len(exp))
		for i, e := range exp {
			segs[i] = ReplaceSegment{Digest: e.info.Digest, Size: e.info.Size, Data: bytes.NewReader(e.data)}
		}
		gated := round%2 == 0
		if gated {
			segs[len(segs)-1].Data = &closeGateReader{r: bytes.NewReader(exp[len(exp)-1].data), s: b}
		}
		done := make(chan error, 1)
		go func() {
			_, err := b.ReplaceAll(t.Context(), segs)
			done <- err
		}()
		if !gated {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
		}
		require.NoError(t, b.Close())
		err := <-done
		want := newModel
		if err != nil {
			require.ErrorIs(t, err, ErrClosed)
			want = old
			closedMid++
		} else {
			require.False(t, gated, "a ReplaceAll waiting in its reader finished")
			finished++
		}
		require.NoError(t, tfs.held(), "round %d", round)
		gs, err := openGated("/db", &Options{FS: mem, SegmentSize: 1 << 20})
		require.NoError(t, err)
		require.Equal(t, want, scanStore(t, gs.Store), "round %d", round)
		orph, err := orphans(mem, gs.Store)
		require.NoError(t, err)
		require.Empty(t, orph, "round %d", round)
		require.NoError(t, gs.closeAll())
	}
	t.Logf("%d rounds: %d stopped by Close, %d finished first", rounds, closedMid, finished)
	require.Greater(t, closedMid, 0)
}
