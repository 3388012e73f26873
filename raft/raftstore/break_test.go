package raftstore

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// Index 0 is stored, and then the log cannot be truncated: the cached
// first index 0 reads as "empty".
func TestBreakIndexZero(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	if err := s.StoreLogs(entries(0, 5, 1)); err != nil {
		require.ErrorIs(t, err, ErrInvalidLog)
		requireBounds(t, s, 0, 0)
		return
	}
	require.NoError(t, s.DeleteRange(0, 5))
	for i := uint64(0); i <= 5; i++ {
		var l raft.Log
		err := s.GetLog(i, &l)
		require.ErrorIs(t, err, raft.ErrLogNotFound, "index %d survives DeleteRange(0, 5)", i)
	}
}

func TestBreakEdgeEntries(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	// nil Data and Extensions, zero AppendedAt
	require.NoError(t, s.StoreLog(&raft.Log{Index: 1, Term: 1}))
	var l raft.Log
	require.NoError(t, s.GetLog(1, &l))
	require.Nil(t, l.Data)
	require.True(t, l.AppendedAt.IsZero())
	// huge Extensions: refused whole, or stored exactly
	big := make([]byte, 8<<20)
	err := s.StoreLogs([]*raft.Log{entry(2, 1), {Index: 3, Term: 1, Extensions: big}})
	if err == nil {
		require.NoError(t, s.GetLog(3, &l))
		require.Len(t, l.Extensions, len(big))
	} else {
		var l2 raft.Log
		require.ErrorIs(t, s.GetLog(2, &l2), raft.ErrLogNotFound, "a refused batch left entry 2")
		requireBounds(t, s, 1, 1)
	}
	// MaxUint64
	require.NoError(t, s.StoreLog(entry(math.MaxUint64, 2)))
	requireLog(t, s, entry(math.MaxUint64, 2))
	last, _ := s.LastIndex()
	require.Equal(t, uint64(math.MaxUint64), last)
	require.NoError(t, s.DeleteRange(math.MaxUint64, math.MaxUint64))
	requireMissing(t, s, math.MaxUint64)
	// AppendedAt far from now round trips
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	e := &raft.Log{Index: 10, Term: 1, AppendedAt: far}
	if err := s.StoreLog(e); err != nil {
		require.ErrorIs(t, err, ErrInvalidLog)
	} else {
		require.NoError(t, s.GetLog(10, &l))
		require.True(t, far.Equal(l.AppendedAt), "AppendedAt %v, want %v", l.AppendedAt, far)
	}
	require.NoError(t, s.Close())
}

func TestBreakDeleteAll(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	require.NoError(t, s.DeleteRange(0, math.MaxUint64))
	requireBounds(t, s, 0, 0)
	for lo := uint64(1); lo <= 5000; lo += 250 {
		require.NoError(t, s.StoreLogs(entries(lo, lo+249, 1)))
	}
	require.NoError(t, s.DeleteRange(0, math.MaxUint64))
	requireBounds(t, s, 0, 0)
	requireMissing(t, s, 1)
	requireMissing(t, s, 5000)
	require.NoError(t, s.StoreLogs(entries(7, 9, 2)))
	requireBounds(t, s, 7, 9)
	requireLog(t, s, entry(8, 2))
}

// GetLog during head truncations and tail rewrites: either not found or
// the entry of the right index and a term that was stored there.
func TestBreakGetLogDuringDeleteRange(t *testing.T) {
	s, err := Open("/raft", &Options{FS: vfs.NewMem(), SegmentSize: 8 << 10})
	require.NoError(t, err)
	defer s.Close()
	const n = 6000
	require.NoError(t, s.StoreLogs(entries(1, n, 1)))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			i := uint64(g*97 + 1)
			for !stop.Load() {
				i = i%n + 1
				var l raft.Log
				err := s.GetLog(i, &l)
				if errors.Is(err, raft.ErrLogNotFound) {
					continue
				}
				if err != nil {
					bad.Store(err.Error())
					return
				}
				if l.Index != i || (l.Term != 1 && l.Term != 2) || string(l.Data) != string(entry(i, l.Term).Data) {
					bad.Store("torn entry")
					return
				}
			}
		}(g)
	}
	for lo := uint64(1); lo+100 < n; lo += 100 {
		require.NoError(t, s.DeleteRange(lo, lo+99))
		if lo%500 == 1 {
			// tail rewrite
			last, _ := s.LastIndex()
			require.NoError(t, s.DeleteRange(last-10, last))
			require.NoError(t, s.StoreLogs(entries(last-10, last, 2)))
		}
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
}

// Close under load: every call returns nil or an error, nothing hangs or
// panics, and a reopen finds a consistent log.
func TestBreakCloseUnderLoad(t *testing.T) {
	for round := 0; round < 20; round++ {
		mem := vfs.NewMem()
		s, err := Open("/raft", &Options{FS: mem, SegmentSize: 8 << 10})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var next atomic.Uint64
		next.Store(1)
		var mu sync.Mutex
		acked := map[uint64]bool{}
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					lo := next.Add(50) - 50
					if err := s.StoreLogs(entries(lo, lo+49, 1)); err != nil {
						require.ErrorIs(t, err, segstore.ErrClosed)
						return
					}
					mu.Lock()
					for i := lo; i < lo+50; i++ {
						acked[i] = true
					}
					mu.Unlock()
				}
			}()
		}
		var closed atomic.Bool
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !closed.Load() {
				f, _ := s.FirstIndex()
				if err := s.DeleteRange(f, f+20); err != nil {
					require.ErrorIs(t, err, segstore.ErrClosed)
					return
				}
			}
		}()
		time.Sleep(time.Duration(5+round) * time.Millisecond)
		require.NoError(t, s.Close())
		closed.Store(true)
		wg.Wait()
		s, err = Open("/raft", &Options{FS: mem, SegmentSize: 8 << 10})
		require.NoError(t, err)
		f, _ := s.FirstIndex()
		l, _ := s.LastIndex()
		require.Equal(t, f, s.first)
		ff, ll, err := s.bounds()
		require.NoError(t, err)
		require.Equal(t, [2]uint64{ff, ll}, [2]uint64{f, l})
		require.NoError(t, s.Close())
	}
}
