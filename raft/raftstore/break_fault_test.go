package raftstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

var faultOps = []vfs.Op{vfs.OpFileSync, vfs.OpDirSync, vfs.OpWrite, vfs.OpRename, vfs.OpRemove, vfs.OpCreate, vfs.OpTruncate, vfs.OpPreallocate, vfs.OpRead, vfs.OpOpen}

// logState reads which of the indices lo..hi are stored (and checks each
// stored entry is intact).
func logState(s *Store, lo, hi uint64) (map[uint64]uint64, error) {
	out := map[uint64]uint64{}
	for i := lo; i <= hi; i++ {
		var l raft.Log
		err := s.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if l.Index != i || string(l.Data) != string(entry(i, l.Term).Data) {
			return nil, fmt.Errorf("torn entry %d", i)
		}
		out[i] = l.Term
	}
	return out, nil
}

func sameState(a, b map[uint64]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func boundsOf(m map[uint64]uint64) (lo, hi uint64) {
	for i := range m {
		if lo == 0 || i < lo {
			lo = i
		}
		hi = max(hi, i)
	}
	return
}

// One injected fault at every operation of StoreLogs and DeleteRange: the
// call fails or succeeds; the state (in process while the store works, and
// after a reopen) is the old one or the new one, the new one if it
// succeeded; the cached bounds describe it.
func TestBreakFaultEveryPoint(t *testing.T) {
	type scenario struct {
		name string
		op   func(s *Store) error
	}
	scenarios := []scenario{
		{"storelogs", func(s *Store) error { return s.StoreLogs(entries(3001, 3400, 2)) }},
		{"deleterange-head", func(s *Store) error { return s.DeleteRange(1, 2500) }},
		{"deleterange-tail", func(s *Store) error { return s.DeleteRange(1200, 3000) }},
		{"deleterange-all", func(s *Store) error { return s.DeleteRange(0, ^uint64(0)) }},
	}
	setup := func(fsys vfs.FS) *Store {
		s, err := Open("/raft", &Options{FS: fsys, SegmentSize: 8 << 10})
		require.NoError(t, err)
		for lo := uint64(1); lo <= 3000; lo += 100 {
			require.NoError(t, s.StoreLogs(entries(lo, lo+99, 1)))
		}
		return s
	}
	checked := 0
	for _, sc := range scenarios {
		// the two allowed states
		mem := vfs.NewMem()
		s := setup(mem)
		old, err := logState(s, 1, 3400)
		require.NoError(t, err)
		fy := vfs.NewFaulty(mem)
		s.Close()
		s, err = Open("/raft", &Options{FS: fy, SegmentSize: 8 << 10})
		require.NoError(t, err)
		before := fy.Stats().Seen
		require.NoError(t, sc.op(s))
		seen := fy.Stats().Seen
		neu, err := logState(s, 1, 3400)
		require.NoError(t, err)
		s.Close()
		for _, op := range faultOps {
			n := seen[op] - before[op]
			for k := int64(1); k <= n+1; k++ {
				mem := vfs.NewMem()
				s := setup(mem)
				s.Close()
				fy := vfs.NewFaulty(mem)
				s, err := Open("/raft", &Options{FS: fy, SegmentSize: 8 << 10})
				require.NoError(t, err)
				require.NoError(t, fy.FailNth(op, k, false))
				opErr := sc.op(s)
				fy.Clear()
				label := fmt.Sprintf("%s %v #%d (err %v)", sc.name, op, k, opErr)
				checked++
				if got, err := logState(s, 1, 3400); err == nil {
					if opErr == nil {
						require.True(t, sameState(got, neu), "%s: in process, not the new state", label)
					} else {
						require.True(t, sameState(got, neu) || sameState(got, old), "%s: in process, neither state", label)
					}
					f, _ := s.FirstIndex()
					l, _ := s.LastIndex()
					lo, hi := boundsOf(got)
					require.Equal(t, [2]uint64{lo, hi}, [2]uint64{f, l}, "%s: cached bounds", label)
				}
				s.Close()
				s, err = Open("/raft", &Options{FS: mem, SegmentSize: 8 << 10})
				require.NoError(t, err, label)
				got, err := logState(s, 1, 3400)
				require.NoError(t, err, label)
				if opErr == nil {
					require.True(t, sameState(got, neu), "%s: after reopen, not the new state", label)
				} else {
					require.True(t, sameState(got, neu) || sameState(got, old), "%s: after reopen, neither state", label)
				}
				s.Close()
			}
		}
	}
	t.Logf("fault points checked: %d", checked)
}
