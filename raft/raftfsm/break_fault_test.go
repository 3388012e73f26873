package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

var faultOps = []vfs.Op{vfs.OpFileSync, vfs.OpDirSync, vfs.OpWrite, vfs.OpRename, vfs.OpRemove, vfs.OpCreate, vfs.OpTruncate, vfs.OpPreallocate, vfs.OpRead, vfs.OpOpen}

type fsmState struct {
	kv      map[string]string
	applied uint64
}

func stateOf(t *testing.T, f *FSM) fsmState {
	st, err := readApplied(f.Store())
	require.NoError(t, err)
	return fsmState{contents(t, f.Store()), st}
}

func (a fsmState) eq(b fsmState) bool { return a.applied == b.applied && equalMaps(a.kv, b.kv) }

func openOn(t *testing.T, fsys vfs.FS, dir string) (*FSM, error) {
	return Open(dir, &Options{Store: &segstore.Options{FS: fsys, SegmentSize: 16 << 10, Merge: segstore.MergeOptions{MinRun: 2}}})
}

// fixed workload on dir: deterministic
func setupFSM(t *testing.T, mem *vfs.Mem, dir string, seed uint64, n int) {
	f, err := openOn(t, mem, dir)
	require.NoError(t, err)
	fill(t, f, rand.New(rand.NewPCG(seed, seed)), 1, n)
	require.NoError(t, f.Close())
}

func applyOp(f *FSM) error {
	idx := f.AppliedIndex()
	resps := f.ApplyBatch([]*raft.Log{
		cmdLog(idx+1, func(c *Command) { c.Put([]byte("key-0001"), []byte("new")); c.Put([]byte("zzz"), []byte("1")) }),
		cmdLog(idx+2, func(c *Command) { c.DeleteRange([]byte("key-0000"), []byte("key-0300")) }),
		cmdLog(idx+3, func(c *Command) { c.Put([]byte("key-0002"), []byte("after")) }),
	})
	for _, r := range resps {
		if r != nil {
			return r.(error)
		}
	}
	return nil
}

var pendingCheck func()

func TestBreakFSMFaultEveryPoint(t *testing.T) {
	// container of /src, to restore into /dst
	srcMem := vfs.NewMem()
	setupFSM(t, srcMem, "/src", 21, 150)
	src, err := openOn(t, srcMem, "/src")
	require.NoError(t, err)
	srcState := stateOf(t, src)
	container := persist(t, src)
	require.NoError(t, src.Close())

	type scenario struct {
		name string
		op   func(f *FSM) error
	}
	scenarios := []scenario{
		{"apply", applyOp},
		{"restore", func(f *FSM) error { return f.Restore(io.NopCloser(bytes.NewReader(container))) }},
		{"persist", func(f *FSM) error {
			snap, err := f.Snapshot()
			if err != nil {
				return err
			}
			defer snap.Release()
			var sink memSink
			err = snap.Persist(&sink)
			if err == nil {
				pendingCheck = func() {
					// the container must restore to exactly the state
					m := vfs.NewMem()
					g, gerr := openOn(t, m, "/chk")
					require.NoError(t, gerr)
					defer g.Close()
					require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))), "persisted container does not restore")
					want := stateOf(t, f)
					require.True(t, want.eq(stateOf(t, g)), "persisted container restores to another state")
				}
			} else {
				require.True(t, sink.cancelled)
			}
			return err
		}},
	}
	checked := 0
	_ = checked
	for _, sc := range scenarios {
		mem := vfs.NewMem()
		setupFSM(t, mem, "/dst", 5, 80)
		fy := vfs.NewFaulty(mem)
		f, err := openOn(t, fy, "/dst")
		require.NoError(t, err)
		old := stateOf(t, f)
		before := fy.Stats().Seen
		require.NoError(t, sc.op(f))
		seen := fy.Stats().Seen
		neu := stateOf(t, f)
		require.NoError(t, f.Close())
		if sc.name == "restore" {
			require.True(t, neu.eq(srcState))
		}
		for _, op := range faultOps {
			n := seen[op] - before[op]
			for k := int64(1); k <= n+1; k++ {
				mem := vfs.NewMem()
				setupFSM(t, mem, "/dst", 5, 80)
				fy := vfs.NewFaulty(mem)
				f, err := openOn(t, fy, "/dst")
				require.NoError(t, err)
				require.NoError(t, fy.FailNth(op, k, false))
				pendingCheck = nil
				opErr := sc.op(f)
				fy.Clear()
				if pendingCheck != nil {
					pendingCheck()
				}
				checked++
				label := fmt.Sprintf("%s %v #%d/%d (err %v)", sc.name, op, k, n, opErr)
				if opErr == nil && sc.name != "persist" {
					require.True(t, stateOf(t, f).eq(neu), "%s: in process: not the new state", label)
					require.Equal(t, neu.applied, f.AppliedIndex(), label)
				}
				f.Close()
				f, err = openOn(t, mem, "/dst")
				require.NoError(t, err, label)
				got := stateOf(t, f)
				require.Equal(t, got.applied, f.AppliedIndex(), label)
				if opErr == nil {
					require.True(t, got.eq(neu), "%s: after reopen: not the new state (applied %d, want %d)", label, got.applied, neu.applied)
				} else {
					require.True(t, got.eq(neu) || got.eq(old), "%s: after reopen: neither state (applied %d; old %d new %d)", label, got.applied, old.applied, neu.applied)
				}
				f.Close()
			}
		}
	}
	t.Logf("fault points checked: %d", checked)
}
