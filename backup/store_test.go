package backup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/backup/internal/buckettest"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// scenario is a real store being written, sealed and merged, with a model
// of what its sealed segments hold (what a backup can see) at each
// recorded seq.
type scenario struct {
	t        *testing.T
	s        *segstore.Store
	live     map[string]string // every write
	sealed   map[string]string // writes in sealed segments
	recorded map[uint64]map[string]string
	n        int
}

// newScenario opens the store with background merges off (so tests that
// count objects are deterministic); newMergingScenario leaves them on.
func newScenario(t *testing.T) *scenario { return openScenario(t, true) }

func newMergingScenario(t *testing.T) *scenario { return openScenario(t, false) }

func openScenario(t *testing.T, noMerge bool) *scenario {
	s, err := segstore.Open(t.TempDir(), &segstore.Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: segstore.MergeOptions{Disable: noMerge}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &scenario{t: t, s: s, live: map[string]string{}, sealed: map[string]string{}, recorded: map[uint64]map[string]string{}}
}

func (sc *scenario) put(k, v string) {
	if err := sc.s.Put([]byte(k), []byte(v)); err != nil {
		sc.t.Fatal(err)
	}
	sc.live[k] = v
}

func (sc *scenario) del(k string) {
	if err := sc.s.Delete([]byte(k)); err != nil {
		sc.t.Fatal(err)
	}
	delete(sc.live, k)
}

func (sc *scenario) seal() {
	if err := sc.s.Seal(); err != nil {
		sc.t.Fatal(err)
	}
	sc.sealed = maps.Clone(sc.live)
}

func (sc *scenario) compact() {
	if err := sc.s.Compact(context.Background()); err != nil {
		sc.t.Fatal(err)
	}
}

// round writes a few keys (some overwritten, some deleted) and seals.
func (sc *scenario) round() {
	for range 5 {
		sc.n++
		sc.put(fmt.Sprintf("k%03d", sc.n%17), fmt.Sprintf("v%d", sc.n))
	}
	sc.del(fmt.Sprintf("k%03d", (sc.n*7)%17))
	sc.seal()
}

// record notes the model at the loop's latest recorded seq.
func (sc *scenario) record(l *Loop) {
	if seq := l.Stats().Seq; seq > 0 { // 0: nothing recorded yet
		sc.recorded[seq] = maps.Clone(sc.sealed)
	}
}

func (sc *scenario) once(l *Loop) {
	if err := l.Once(context.Background()); err != nil {
		sc.t.Fatal(err)
	}
	sc.record(l)
}

// checkAll restores every recorded seq, and the latest, and compares.
func (sc *scenario) checkAll(b bucket.Bucket) {
	t := sc.t
	ctx := context.Background()
	var latest uint64
	if len(sc.recorded) == 0 {
		return
	}
	for seq, want := range sc.recorded {
		latest = max(latest, seq)
		dir := filepath.Join(t.TempDir(), "r")
		res, err := Restore(ctx, b, dir, &RestoreOptions{Seq: seq})
		if err != nil {
			t.Fatalf("restore seq %d: %v", seq, err)
		}
		if res.Seq != seq {
			t.Fatalf("restore seq %d gave seq %d", seq, res.Seq)
		}
		if got := readStore(t, dir); !maps.Equal(got, want) {
			t.Fatalf("restore seq %d: got %v, want %v", seq, got, want)
		}
	}
	dir := filepath.Join(t.TempDir(), "latest")
	res, err := Restore(ctx, b, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Seq != latest {
		t.Fatalf("latest restore at %d, recorded up to %d", res.Seq, latest)
	}
	if got := readStore(t, dir); !maps.Equal(got, sc.recorded[latest]) {
		t.Fatalf("latest: got %v, want %v", got, sc.recorded[latest])
	}
}

// TestRestoreEverySeq backs a real store up through seals and merges on
// each bucket kind and restores every recorded seq.
func TestRestoreEverySeq(t *testing.T) {
	for _, k := range bucketKinds() {
		t.Run(k.name, func(t *testing.T) {
			b := k.open(t)
			sc := newMergingScenario(t)
			l := NewLoop(StoreSource(sc.s), b, nil)
			for i := range 8 {
				sc.round()
				if i == 4 {
					sc.compact()
				}
				sc.once(l)
			}
			sc.checkAll(b)
			// A second loop resumes from the bucket (a restart).
			l2 := NewLoop(StoreSource(sc.s), b, nil)
			sc.round()
			sc.once(l2)
			sc.checkAll(b)
		})
	}
}

// TestRestoreModel: random writes, seals, merges and backup steps; a
// restore of every recorded seq equals the model at that seq.
func TestRestoreModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		sc := newMergingScenario(t)
		b := openURL(t, "mem://")
		l := NewLoop(StoreSource(sc.s), b, nil)
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0, 1, 2, 3:
				sc.put(fmt.Sprintf("k%d", rapid.IntRange(0, 20).Draw(rt, "k")), rapid.StringN(0, 8, -1).Draw(rt, "v"))
			case 4:
				sc.del(fmt.Sprintf("k%d", rapid.IntRange(0, 20).Draw(rt, "k")))
			case 5, 6:
				sc.seal()
			case 7:
				sc.compact()
			default:
				sc.once(l)
			}
		}
		sc.seal()
		sc.once(l)
		sc.checkAll(b)
	})
}

// TestPutFailures fails each put of a backup run in turn (and, in a
// second pass, loses the reply of each successful put), restarting the
// loop after each failure as a crashed process would: the run completes,
// no object is written twice, and every recorded seq restores.
func TestPutFailures(t *testing.T) {
	run := func(t *testing.T, fail func(n int, key string) bool, lose func(n int, key string) bool, restart bool) (int, *scenario, bucket.Bucket) {
		inner := openURL(t, "mem://")
		cb := buckettest.NewCounting(inner)
		fb := &buckettest.Faulty{Bucket: cb, FailPut: fail, LoseReply: lose}
		sc := newScenario(t)
		l := NewLoop(StoreSource(sc.s), fb, nil)
		for i := range 4 {
			sc.round()
			if i == 2 {
				sc.compact()
			}
			for attempt := 0; ; attempt++ {
				err := l.Once(context.Background())
				if err == nil {
					break
				}
				if !errors.Is(err, buckettest.ErrInjected) || attempt > 3 {
					t.Fatalf("round %d: %v", i, err)
				}
				if restart {
					l = NewLoop(StoreSource(sc.s), fb, nil)
				}
			}
			sc.record(l)
		}
		for key, n := range cb.Puts {
			if n != 1 {
				t.Fatalf("%s written %d times", key, n)
			}
		}
		return fb.Puts(), sc, inner
	}
	total, _, _ := run(t, nil, nil, false)
	for n := 1; n <= total; n++ {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("fail%d-restart%v", n, restart), func(t *testing.T) {
				_, sc, b := run(t, func(i int, _ string) bool { return i == n }, nil, restart)
				sc.checkAll(b)
			})
			t.Run(fmt.Sprintf("lose%d-restart%v", n, restart), func(t *testing.T) {
				_, sc, b := run(t, nil, func(i int, _ string) bool { return i == n }, restart)
				sc.checkAll(b)
			})
		}
	}
}

// TestCrashBetweenUploadAndEdit: the segments of a state are uploaded,
// the process dies before its edit; the next loop records the state
// without uploading them again.
func TestCrashBetweenUploadAndEdit(t *testing.T) {
	ctx := context.Background()
	cb := buckettest.NewCounting(openURL(t, "mem://"))
	fb := &buckettest.Faulty{Bucket: cb, FailPut: func(_ int, key string) bool { return strings.HasPrefix(key, editsDir) }}
	sc := newScenario(t)
	sc.round()
	sc.round()
	if err := NewLoop(StoreSource(sc.s), fb, nil).Once(ctx); !errors.Is(err, buckettest.ErrInjected) {
		t.Fatalf("first loop: %v", err)
	}
	segs := cb.PutBytes[segmentsDir]
	if segs == 0 {
		t.Fatal("no segment uploaded before the edit")
	}
	fb.FailPut = nil
	l := NewLoop(StoreSource(sc.s), fb, nil)
	sc.once(l)
	if cb.PutBytes[segmentsDir] != segs || l.Stats().SegmentsUploaded != 0 {
		t.Fatalf("segments uploaded again: %d bytes then %d", segs, cb.PutBytes[segmentsDir])
	}
	sc.checkAll(cb)
}

// localScenario backs a store up to a local bucket over several rounds,
// with checkpoints, and returns the bucket's directory.
func localScenario(t *testing.T) (*scenario, bucket.Bucket, string) {
	root := t.TempDir()
	b, err := bucket.NewLocal(nil, root)
	if err != nil {
		t.Fatal(err)
	}
	sc := newScenario(t)
	l := NewLoop(StoreSource(sc.s), b, nil)
	for i := range 10 {
		sc.round()
		if i%4 == 3 {
			sc.compact()
		}
		sc.once(l)
	}
	if l.Stats().Checkpoints < 2 {
		t.Fatalf("only %d checkpoints", l.Stats().Checkpoints)
	}
	return sc, b, root
}

func names(t *testing.T, dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestMissingEdit(t *testing.T) {
	sc, b, root := localScenario(t)
	edits := names(t, filepath.Join(root, "edits"))
	victim := edits[len(edits)-3]
	if err := os.Remove(filepath.Join(root, "edits", victim)); err != nil {
		t.Fatal(err)
	}
	for _, ck := range names(t, filepath.Join(root, "checkpoints")) {
		os.Remove(filepath.Join(root, "checkpoints", ck)) // make the walk cross the gap
	}
	target := filepath.Join(t.TempDir(), "r")
	if _, err := Restore(context.Background(), b, target, nil); !errors.Is(err, ErrGap) {
		t.Fatalf("restore across a missing edit: %v", err)
	}
	noSiblings(t, target)
	// The loop refuses to extend a broken chain.
	if err := NewLoop(StoreSource(sc.s), b, nil).Once(context.Background()); !errors.Is(err, ErrGap) {
		t.Fatalf("loop on a broken chain: %v", err)
	}
}

func TestCorruptSegmentObject(t *testing.T) {
	_, b, root := localScenario(t)
	segs := names(t, filepath.Join(root, "segments"))
	for _, name := range segs {
		p := filepath.Join(root, "segments", name)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x40
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(t.TempDir(), "r")
		_, err = Restore(context.Background(), b, target, nil)
		if err == nil {
			// Not in the latest state: restore is right to ignore it.
			data[len(data)/2] ^= 0x40
			os.WriteFile(p, data, 0o644)
			continue
		}
		if !errors.Is(err, ErrCorruptObject) || !strings.Contains(err.Error(), name) {
			t.Fatalf("restore with %s corrupt: %v", name, err)
		}
		noSiblings(t, target)
		return
	}
	t.Fatal("no segment of the latest state found")
}

func TestLostCheckpoint(t *testing.T) {
	sc, b, root := localScenario(t)
	cks := names(t, filepath.Join(root, "checkpoints"))
	newest := filepath.Join(root, "checkpoints", cks[len(cks)-1])
	// Corrupt, then lost: either way the restore goes from an older one.
	data, _ := os.ReadFile(newest)
	data[10] ^= 1
	os.WriteFile(newest, data, 0o644)
	res, err := Restore(context.Background(), b, filepath.Join(t.TempDir(), "r"), nil)
	if err != nil || len(res.Skipped) != 1 {
		t.Fatalf("restore past a corrupt checkpoint: %v (skipped %v)", err, res.Skipped)
	}
	os.Remove(newest)
	sc.checkAll(b)
	// The loop resumes too.
	sc.round()
	sc.once(NewLoop(StoreSource(sc.s), b, nil))
	sc.checkAll(b)
}

// TestTwoLoops: two loops on one prefix; the one that loses the race for
// the next edit stops with ErrFenced, and the chain stays one chain.
func TestTwoLoops(t *testing.T) {
	for _, k := range bucketKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			b := k.open(t)
			sc := newScenario(t)
			sc.round()
			l1 := NewLoop(StoreSource(sc.s), b, nil)
			sc.once(l1)
			l2 := NewLoop(StoreSource(sc.s), b, nil)
			if err := l2.Once(ctx); err != nil { // nothing new: both at the head
				t.Fatal(err)
			}
			sc.round()
			sc.once(l1)
			sc.round()
			if err := l2.Once(ctx); !errors.Is(err, ErrFenced) {
				t.Fatalf("second loop: %v, want ErrFenced", err)
			}
			if !Permanent(ErrFenced) {
				t.Fatal("ErrFenced is retried")
			}
			sc.once(l1)
			sc.checkAll(b)

			// A different store pointed at the same prefix is behind it.
			other := newScenario(t)
			other.round()
			if err := NewLoop(StoreSource(other.s), b, nil).Once(ctx); !errors.Is(err, ErrBehind) && !errors.Is(err, ErrFenced) {
				t.Fatalf("other store: %v", err)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	sc, b, root := localScenario(t)
	ctx := context.Background()
	before := len(names(t, filepath.Join(root, "segments")))
	res, err := Prune(ctx, b, PruneOptions{KeepCheckpoints: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoints == 0 || res.Segments == 0 || res.Edits == 0 {
		t.Fatalf("pruned nothing: %+v", res)
	}
	if after := len(names(t, filepath.Join(root, "segments"))); after != before-res.Segments {
		t.Fatalf("%d segments, then %d, %d deleted", before, after, res.Segments)
	}
	// Every kept point restores; the pruned ones are refused.
	kept := map[uint64]map[string]string{}
	for seq, m := range sc.recorded {
		if seq >= res.Base {
			kept[seq] = m
			continue
		}
		if _, err := Restore(ctx, b, filepath.Join(t.TempDir(), "r"), &RestoreOptions{Seq: seq}); !errors.Is(err, ErrNotRecorded) {
			t.Fatalf("restore of pruned seq %d: %v", seq, err)
		}
	}
	sc.recorded = kept
	sc.checkAll(b)
	// Pruning again deletes nothing more.
	if res, err := Prune(ctx, b, PruneOptions{KeepCheckpoints: 1}); err != nil || res.Segments+res.Edits+res.Checkpoints != 0 {
		t.Fatalf("second prune: %+v %v", res, err)
	}
	// The loop continues after a prune.
	sc.round()
	sc.once(NewLoop(StoreSource(sc.s), b, nil))
	sc.checkAll(b)
}

func TestRestoreRefusesNonEmptyTarget(t *testing.T) {
	_, b, _ := localScenario(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	if _, err := Restore(context.Background(), b, dir, nil); !errors.Is(err, ErrTargetExists) {
		t.Fatalf("restore into a non-empty dir: %v", err)
	}
	empty, err := Restore(context.Background(), openURL(t, "mem://"), filepath.Join(t.TempDir(), "r"), nil)
	if !errors.Is(err, ErrNoBackup) {
		t.Fatalf("restore from an empty bucket: %+v %v", empty, err)
	}
}
