package manifestlog

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

func isManifest(p string) bool { return strings.Contains(p, filePrefix) }

// TestFailedAppendFailsLog: after a failed write or sync of an append, every
// later commit fails (even once the disk works again, and even though a
// retried fsync would report success in Linux mode), and the files still open
// to a state that holds every acknowledged commit.
func TestFailedAppendFailsLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(f *vfs.Faulty)
	}{
		{"write", func(f *vfs.Faulty) {
			require.NoError(t, f.Inject(vfs.Fault{Op: vfs.OpWrite, Nth: 1, Match: isManifest}))
		}},
		{"sync", func(f *vfs.Faulty) {
			require.NoError(t, f.Inject(vfs.Fault{Op: vfs.OpFileSync, Nth: 1, Match: isManifest}))
		}},
		{"sync, linux drops the pages", func(f *vfs.Faulty) {
			f.SetLinuxFsync(true)
			require.NoError(t, f.Inject(vfs.Fault{Op: vfs.OpFileSync, Nth: 1, Match: isManifest}))
		}},
		{"enospc mid-frame", func(f *vfs.Faulty) { f.SetSpaceLimit(30) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			ffs := vfs.NewFaulty(mem)
			l, _, _ := openLog(t, ffs, Options{})
			m := newModel()
			for id := uint64(1); id <= 10; id++ {
				e := Edit{Add: []SegmentMeta{seg(id)}}
				_, err := l.Commit(e)
				require.NoError(t, err)
				m.apply(e)
			}
			acked := m.clone()
			tc.arm(ffs)
			_, err := l.Commit(Edit{Add: []SegmentMeta{seg(11)}})
			require.ErrorIs(t, err, vfs.ErrInjected)
			require.ErrorIs(t, err, ErrFailed)
			if tc.name == "enospc mid-frame" {
				require.ErrorIs(t, err, syscall.ENOSPC)
			}
			ffs.Clear() // the disk "recovers": the log must stay failed
			_, err = l.Commit(Edit{Add: []SegmentMeta{seg(12)}})
			require.ErrorIs(t, err, ErrFailed)
			require.Equal(t, acked.Seq, l.Seq())
			requireStateEqual(t, acked, l.State())
			require.Error(t, l.Checkpoint())
			require.NoError(t, l.Close())

			l2, st, rep := openLog(t, mem, Options{})
			defer l2.Close()
			t.Logf("reopen: %v", rep.Actions)
			require.GreaterOrEqual(t, st.Seq, acked.Seq)
			if st.Seq == acked.Seq {
				requireStateEqual(t, acked, st)
			} else {
				// The failed commit reached the disk whole: a commit that was
				// not acknowledged may survive (never partly).
				require.Equal(t, acked.Seq+1, st.Seq)
				require.Contains(t, st.Segments, uint64(11))
			}
		})
	}
}

// TestFailedAppendFailsQueuedCommits: commits queued behind a failing leader
// fail too, none hangs, and every acknowledged one is durable.
func TestFailedAppendFailsQueuedCommits(t *testing.T) {
	mem := vfs.NewMem()
	ffs := vfs.NewFaulty(mem)
	l, _, _ := openLog(t, ffs, Options{})
	require.NoError(t, ffs.Inject(vfs.Fault{Op: vfs.OpFileSync, Nth: 40, Match: isManifest}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok []uint64
	var failed atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				id := uint64(w*1000 + i + 1)
				_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
				if err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("unexpected error: %v", err)
					}
					failed.Add(1)
					continue
				}
				mu.Lock()
				ok = append(ok, id)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	require.Positive(t, failed.Load())
	require.NoError(t, l.Close())
	_, st, _ := openLog(t, mem, Options{})
	for _, id := range ok {
		require.Contains(t, st.Segments, id, "acknowledged segment %d lost", id)
	}
}

// TestRotationFailure: a rotation that fails before its activate record is
// abandoned and commits go on in the old generation; one that fails at the
// activation fails the log (a crash could then make either generation the
// one Open picks, so the old one must take no more commits).
func TestRotationFailure(t *testing.T) {
	newGen := func(p string) bool { return strings.HasSuffix(p, genName(2)) }
	for _, tc := range []struct {
		name     string
		fault    vfs.Fault
		logFails bool
	}{
		{"create", vfs.Fault{Op: vfs.OpCreate, Nth: 1, Match: newGen}, false},
		{"checkpoint write", vfs.Fault{Op: vfs.OpWrite, Nth: 1, Match: newGen}, false},
		{"checkpoint sync", vfs.Fault{Op: vfs.OpFileSync, Nth: 1, Match: newGen}, false},
		{"dir sync", vfs.Fault{Op: vfs.OpDirSync, Nth: 1}, false},
		{"activation write", vfs.Fault{Op: vfs.OpWrite, Nth: 2, Match: newGen}, true},
		{"activation sync", vfs.Fault{Op: vfs.OpFileSync, Nth: 2, Match: newGen}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			ffs := vfs.NewFaulty(mem)
			l, _, _ := openLog(t, ffs, Options{})
			m := newModel()
			commit := func(id uint64) error {
				e := Edit{Add: []SegmentMeta{seg(id)}}
				_, err := l.Commit(e)
				if err == nil {
					m.apply(e)
				}
				return err
			}
			require.NoError(t, commit(1))
			require.NoError(t, ffs.Inject(tc.fault))
			require.ErrorIs(t, l.Checkpoint(), vfs.ErrInjected)
			ffs.Clear()
			err := commit(2)
			if tc.logFails {
				require.ErrorIs(t, err, ErrFailed)
			} else {
				require.NoError(t, err)
				require.Equal(t, uint64(1), l.Stats().Generation)
				require.NoError(t, l.Checkpoint(), "a later rotation succeeds")
				require.NoError(t, commit(3))
			}
			require.NoError(t, l.Close())
			_, st, _ := openLog(t, mem, Options{})
			requireStateEqual(t, m.clone(), st)
		})
	}
}

// TestPreallocateFailureIsHarmless: preallocation is an optimization; when
// it fails the append goes on without it.
func TestPreallocateFailureIsHarmless(t *testing.T) {
	mem := vfs.NewMem()
	ffs := vfs.NewFaulty(mem)
	l, _, _ := openLog(t, ffs, Options{PreallocateBytes: 256})
	require.NoError(t, ffs.Inject(vfs.Fault{Op: vfs.OpPreallocate, Nth: 1, Persistent: true}))
	for id := uint64(1); id <= 50; id++ {
		_, err := l.Commit(Edit{Add: []SegmentMeta{seg(id)}})
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	_, st, _ := openLog(t, mem, Options{})
	require.Len(t, st.Segments, 50)
}
