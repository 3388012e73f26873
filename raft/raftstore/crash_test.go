package raftstore

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

// crashState is what the store holds after some acknowledged operations: the
// term of each stored index (the entry's data is derived from index and
// term) and the stable values.
type crashState struct {
	logs   map[uint64]uint64
	stable map[string]uint64
}

func (c crashState) clone() crashState {
	return crashState{logs: maps.Clone(c.logs), stable: maps.Clone(c.stable)}
}

// TestCrashEverySyncPoint: a power cut at every barrier of StoreLogs,
// DeleteRange (head, tail, hole) and the stable store's Set leaves the state
// after the operations acknowledged by then, or that plus the one in flight,
// whole: never part of a batch or part of a truncation, never a lost
// acknowledged write. The bounds after reopen are exact.
func TestCrashEverySyncPoint(t *testing.T) {
	seeds := testutil.CrashSeeds(t, 2)
	total, wrong := 0, 0
	for seed := range seeds {
		p, w := runCrash(t, uint64(seed))
		total += p
		wrong += w
	}
	t.Logf("crash points checked: %d", total)
	require.Zero(t, wrong)
	require.GreaterOrEqual(t, total, 100*seeds)
}

func runCrash(t *testing.T, seed uint64) (points, wrong int) {
	rng := rand.New(rand.NewPCG(seed, 0x4af7))
	mem := vfs.NewMem()
	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, 0x4af8)))
	opts := func(fsys vfs.FS) *Options { return &Options{FS: fsys, SegmentSize: 4 << 10} }
	s, err := Open("/raft", opts(mem))
	require.NoError(t, err)
	mem.SetSyncHook(rec.Hook)

	history := []crashState{{logs: map[uint64]uint64{}, stable: map[string]uint64{}}}
	cur := func() crashState { return history[len(history)-1] }
	bounds := func(st crashState) (uint64, uint64) {
		var lo, hi uint64
		for i := range st.logs {
			if lo == 0 || i < lo {
				lo = i
			}
			hi = max(hi, i)
		}
		return lo, hi
	}
	term := uint64(1)
	do := func(next crashState, op func() error) {
		history = append(history, next)
		rec.Started.Add(1)
		require.NoError(t, op())
		rec.Acked.Add(1)
	}
	for step := 0; step < 60; step++ {
		next := cur().clone()
		first, last := bounds(next)
		switch r := rng.IntN(10); {
		case r < 5 || first == 0: // append a batch, sometimes after a gap
			from := last + 1
			if rng.IntN(6) == 0 {
				from += uint64(rng.IntN(20)) + 1
			}
			n := 1 + rng.IntN(64)
			logs := make([]*raft.Log, n)
			for j := range logs {
				logs[j] = entry(from+uint64(j), term)
				next.logs[from+uint64(j)] = term
			}
			do(next, func() error { return s.StoreLogs(logs) })
		case r < 7: // head truncation
			to := first + uint64(rng.IntN(int(last-first)+1))
			for i := range next.logs {
				if i <= to {
					delete(next.logs, i)
				}
			}
			do(next, func() error { return s.DeleteRange(first, to) })
		case r < 8: // tail truncation, then an overwrite by a new term
			from := first + uint64(rng.IntN(int(last-first)+1))
			for i := range next.logs {
				if i >= from {
					delete(next.logs, i)
				}
			}
			do(next, func() error { return s.DeleteRange(from, last) })
			term++
			next = cur().clone()
			logs := []*raft.Log{entry(from, term), entry(from+1, term)}
			next.logs[from], next.logs[from+1] = term, term
			do(next, func() error { return s.StoreLogs(logs) })
		default: // stable store
			k := fmt.Sprintf("k%d", rng.IntN(3))
			v := rng.Uint64()
			next.stable[k] = v
			do(next, func() error { return s.SetUint64([]byte(k), v) })
		}
	}
	mem.SetSyncHook(nil)
	require.NoError(t, s.Close())

	for _, p := range rec.Points() {
		points++
		if err := checkCrashImage(p, history, opts(p.FS), bounds); err != nil {
			wrong++
			if wrong <= 10 {
				t.Errorf("seed %d crash point %s (acked %d, begun %d): %v", seed, p.Label, p.Lo, p.Hi, err)
			}
		}
	}
	return points, wrong
}

// checkCrashImage opens the store on a crash image and compares it with the
// states history allows there.
func checkCrashImage(p testutil.CrashPoint, history []crashState, o *Options, bounds func(crashState) (uint64, uint64)) error {
	s, err := Open("/raft", o)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer s.Close()
	var errs []error
	for i := p.Lo; i <= p.Hi && i < len(history); i++ {
		err := matchState(s, history[i], bounds, history)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("state %d: %w", i, err))
	}
	return fmt.Errorf("matches no allowed state: %v", errs)
}

func matchState(s *Store, want crashState, bounds func(crashState) (uint64, uint64), history []crashState) error {
	wf, wl := bounds(want)
	gf, _ := s.FirstIndex()
	gl, _ := s.LastIndex()
	if gf != wf || gl != wl {
		return fmt.Errorf("bounds %d..%d, want %d..%d", gf, gl, wf, wl)
	}
	// Every index any state ever held.
	seen := map[uint64]bool{}
	for _, st := range history {
		for i := range st.logs {
			seen[i] = true
		}
	}
	for i := range seen {
		var l raft.Log
		err := s.GetLog(i, &l)
		term, ok := want.logs[i]
		switch {
		case !ok && err != raft.ErrLogNotFound:
			return fmt.Errorf("index %d: %v, want not found", i, err)
		case ok && err != nil:
			return fmt.Errorf("index %d: %v, want term %d", i, err, term)
		case ok:
			w := entry(i, term)
			if l.Term != term || string(l.Data) != string(w.Data) || !l.AppendedAt.Equal(w.AppendedAt) {
				return fmt.Errorf("index %d: term %d data %q, want term %d", i, l.Term, l.Data, term)
			}
		}
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		v, err := s.GetUint64([]byte(k))
		w, ok := want.stable[k]
		if !ok && err != ErrKeyNotFound || ok && (err != nil || v != w) {
			return fmt.Errorf("stable %s: %d, %v; want %d (set %v)", k, v, err, w, ok)
		}
	}
	return nil
}
