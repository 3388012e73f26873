package metamorphic

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

func put(k, v string) Op { return Op{Kind: OpPut, Key: []byte(k), Val: []byte(v)} }

// The harness must fail a store that disagrees with the model: here the
// model is made wrong instead, which a correct store then disagrees with.
func TestHarnessCatchesWrongRead(t *testing.T) {
	c := RandomConfig(1, 0, AvoidKnown)
	ops := []Op{put("a", "1"), {Kind: OpGet, Key: []byte("a")}}
	if f, _ := runWith(c, ops, sabotageNone); f != nil {
		t.Fatalf("honest model: %v", f)
	}
	f, _ := runWith(c, ops, sabotageLosePut)
	if f == nil || f.Class != ClassRead || f.Op != 1 {
		t.Fatalf("a model that lost a put: failure %v, want a read failure at op 1", f)
	}
}

// Under SyncManual a power loss may drop writes after the last Sync, and
// the harness allows it; a model that takes them for durable must fail.
func TestHarnessCatchesCrashState(t *testing.T) {
	c := RandomConfig(1, 0, AvoidKnown)
	c.Sync = segstore.SyncManual
	c.SegmentSize = 1 << 20
	ops := []Op{put("a", "1"), {Kind: OpSync}, put("b", "2"), put("a", "3"), {Kind: OpCrash, Mode: vfs.CrashDropUnsynced}}
	f, st := runWith(c, ops, sabotageNone)
	if f != nil {
		t.Fatalf("honest model: %v", f)
	}
	if st.CrashBack != 1 {
		t.Fatalf("the crash came back to the newest state (%d older): the workload does not test what it should", st.CrashBack)
	}
	f, _ = runWith(c, ops, sabotageAllDurable)
	if f == nil || f.Class != ClassCrashState {
		t.Fatalf("a model that takes unsynced writes for durable: failure %v, want %s", f, ClassCrashState)
	}
}

// A saved trace replays the same ops, nil and empty keys included.
func TestTraceRoundTrip(t *testing.T) {
	c := RandomConfig(7, 3000, Avoid{})
	ops := Generate(c)
	ops = append(ops, Op{Kind: OpScan, Key: []byte{}, End: []byte{}}, Op{Kind: OpIterOpen, Snap: -1, Upper: []byte{}, Prefix: []byte{}})
	path := filepath.Join(t.TempDir(), "trace.json")
	if err := (Trace{Config: c, Ops: ops}).Save(path); err != nil {
		t.Fatal(err)
	}
	tr, err := LoadTrace(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr.Config, c) {
		t.Fatalf("config %+v, want %+v", tr.Config, c)
	}
	if len(tr.Ops) != len(ops) {
		t.Fatalf("%d ops, want %d", len(tr.Ops), len(ops))
	}
	for i := range ops {
		if !reflect.DeepEqual(tr.Ops[i], ops[i]) {
			t.Fatalf("op %d: %#v, want %#v", i, tr.Ops[i], ops[i])
		}
	}
	if !reflect.DeepEqual(Generate(c), ops[:len(ops)-2]) {
		t.Fatal("Generate is not deterministic")
	}
}

// Every crash mode and every kind of op occurs in the default short run's
// traces, so that none is silently left out.
func TestGeneratorCoverage(t *testing.T) {
	var kinds [numKinds]int
	var modes, followModes [6]int
	var follows [numFollowKinds]int
	for seed := uint64(1); seed <= 4; seed++ {
		for _, op := range Generate(RandomConfig(seed, 500, AvoidKnown)) {
			kinds[op.Kind]++
			if op.Kind == OpCrash || op.Kind == OpCrashArm {
				modes[op.Mode]++
			}
			if op.Kind == OpFollow {
				follows[op.Follow]++
				if op.Follow == FollowCrash {
					followModes[op.Mode]++
				}
			}
		}
	}
	for k := FollowKind(0); k < numFollowKinds; k++ {
		if follows[k] == 0 {
			t.Errorf("no %v follow", k)
		}
	}
	for m := range followModes {
		if followModes[m] == 0 {
			t.Errorf("no follower crash in mode %v", vfs.CrashMode(m))
		}
	}
	for k := Kind(0); k < numKinds; k++ {
		if kinds[k] == 0 {
			t.Errorf("no %v op", k)
		}
	}
	for m := range modes {
		if modes[m] == 0 {
			t.Errorf("no crash in mode %v", vfs.CrashMode(m))
		}
	}
}

// A stream whose adoption a power loss left unknown is resolved by the
// next import of it, and stays adopted after: an import that adopts
// nothing must keep what it resolved.
func TestModelMaybeAdoption(t *testing.T) {
	m := newModel(RandomConfig(1, 0, Avoid{}))
	seg := &peerSeg{ops: []BatchOp{{Kind: OpPut, Key: []byte("a"), Val: []byte("1")}}, digest: 7}
	e := m.cur()
	m.hist[len(m.hist)-1] = histEntry{st: e.st, adopted: e.adopted, maybe: map[uint64]bool{7: true}}
	if n, err := m.importSegs([]*peerSeg{seg}, map[uint64]bool{}, nil); n != 0 || err != nil {
		t.Fatalf("the store skipped the stream: want %d, %v; want 0, nil", n, err)
	}
	if n, err := m.importSegs([]*peerSeg{seg}, map[uint64]bool{}, nil); n != 0 || err != nil {
		t.Fatalf("re-import: want %d, %v; want 0, nil", n, err)
	}
	// A store that adopted it again fails the runner's count check.
	if n, err := m.importSegs([]*peerSeg{seg}, map[uint64]bool{7: true}, nil); n != 0 || err != nil {
		t.Fatalf("re-import: want %d, %v; want 0, nil", n, err)
	}
	if _, err := m.importSegs(nil, map[uint64]bool{8: true}, nil); err == nil {
		t.Fatal("a store that adopts a stream never given must fail the model")
	}
	if len(m.cur().st) != 0 {
		t.Fatalf("state %v, want empty", m.cur().st)
	}
}

// A model that expects the follower to read the mirror of the Follow
// before must fail: the follower's comparison is not vacuous.
func TestHarnessCatchesStaleFollower(t *testing.T) {
	c := RandomConfig(1, 0, AvoidOpen)
	ops := []Op{put("a", "1"), {Kind: OpFollow, Sealed: true}, put("b", "2"), {Kind: OpFollow, Sealed: true}}
	f, st := runWith(c, ops, sabotageNone)
	if f != nil {
		t.Fatalf("honest model: %v", f)
	}
	if st.FollowsExact < 2 {
		t.Fatalf("%d follows compared in full, want at least 2", st.FollowsExact)
	}
	f, _ = runWith(c, ops, sabotageFollowOld)
	if f == nil || f.Class != ClassFollow {
		t.Fatalf("a model that expects the old mirror: failure %v, want %s", f, ClassFollow)
	}
}

// Every variant of Follow, with the follower's power losses in every mode,
// and ReplaceAll: a fixed trace that must pass whatever the seed's options.
func TestFollowAndReplaceTrace(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		c := RandomConfig(seed, 0, AvoidOpen)
		seg := func(id int, k, v string) Op {
			return Op{Kind: OpPeerSegment, Slot: id, Batch: []BatchOp{{Kind: OpPut, Key: []byte(k), Val: []byte(v)}}}
		}
		ops := []Op{put("a", "1"), put("b", "1"), {Kind: OpFollow, Sealed: true}, put("a", "2"), {Kind: OpDeleteRange, Key: []byte("b"), End: []byte("c")}}
		for m := vfs.CrashMode(0); m < 6; m++ {
			ops = append(ops, put("c", fmt.Sprint(m)), Op{Kind: OpFollow, Follow: FollowCrash, Sealed: true, Mode: m, K: 1 + int(m), Rand: uint64(m)})
		}
		ops = append(ops,
			put("d", "0"), Op{Kind: OpFollow, Follow: FollowSkip, Sealed: true}, put("d", "1"), Op{Kind: OpFollow, Follow: FollowStale, Sealed: true},
			put("e", "0"), Op{Kind: OpFollow, Follow: FollowSkip, Sealed: true}, put("e", "1"), Op{Kind: OpFollow, Sealed: true}, Op{Kind: OpFollow, Follow: FollowStale},
			Op{Kind: OpFollow, Follow: FollowDiverge, Key: []byte("z"), Val: []byte("local"), K: 1},
			Op{Kind: OpCompact}, Op{Kind: OpFollow, Sealed: true},
			seg(0, "p", "1"), seg(1, "q", "1"), Op{Kind: OpImport, Peer: []int{0}},
			Op{Kind: OpReplace, Batch: []BatchOp{{Kind: OpPut, Key: []byte("r"), Val: []byte("1")}}},
			Op{Kind: OpFollow, Sealed: true},
			Op{Kind: OpCrash, Mode: vfs.CrashTearLast}, Op{Kind: OpFollow, Sealed: true},
			Op{Kind: OpFollow, Follow: FollowDiverge, Key: []byte("y"), Val: []byte("local")},
		)
		f, st := Run(c, ops)
		if f != nil {
			t.Fatalf("seed %d (%v): %v\n%s", seed, c, f, Format(ops, f.Op))
		}
		// A background merge of the leader may retire a segment of the
		// kept Changes before they are applied (ErrNoSegment, a retry).
		if st.FollowCrashes != [6]int{1, 1, 1, 1, 1, 1} || st.Diverged != 2 || st.Replaces != 1 || st.StaleApplied+st.FollowRetries == 0 || st.Gaps == 0 {
			t.Fatalf("seed %d: the trace did not do what it should: %+v", seed, st)
		}
	}
}

// ReplaceAll forgets the adopted digests: a stream imported before it, no
// longer present after a merge, is adopted again.
func TestReplaceAllForgetsAdopted(t *testing.T) {
	c := RandomConfig(1, 0, AvoidOpen)
	c.MergeDisable, c.MinRun, c.SegmentSize = false, 2, 1<<20
	ops := []Op{
		{Kind: OpPeerSegment, Slot: 0, Batch: []BatchOp{{Kind: OpPut, Key: []byte("a"), Val: []byte("old")}}},
		{Kind: OpImport, Peer: []int{0}},
		{Kind: OpPeerSegment, Slot: 1, Batch: []BatchOp{{Kind: OpPut, Key: []byte("a"), Val: []byte("new")}}},
		{Kind: OpReplace},
		{Kind: OpCompact},
		{Kind: OpImport, Peer: []int{0}},
		{Kind: OpGet, Key: []byte("a")},
	}
	f, st := Run(c, ops)
	if f != nil {
		t.Fatalf("%v\n%s", f, Format(ops, f.Op))
	}
	if st.ImportedSegs != 2 {
		t.Fatalf("%d segments imported, want 2 (the stream again after ReplaceAll)", st.ImportedSegs)
	}
}
