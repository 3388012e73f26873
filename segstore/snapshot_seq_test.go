package segstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestSnapshotManifestSeqSequential: after each commit a new snapshot names
// the store's current ManifestSeq, and its segments are the store's.
// Merges are off: a background merge committing between a seal and the
// snapshot would change the seq the test expects (the concurrent test below
// covers merges).
func TestSnapshotManifestSeqSequential(t *testing.T) {
	o := smallOpts(vfs.NewOS())
	o.Merge.Disable = true
	s := mustOpen(t, t.TempDir(), o)
	defer checkAndClose(t, s)
	fresh, err := s.NewSnapshot()
	require.NoError(t, err)
	require.Equal(t, s.ManifestSeq(), fresh.ManifestSeq(), "a fresh store")
	require.NotZero(t, fresh.ManifestSeq())
	require.NoError(t, fresh.Close())
	for i := range 5 {
		require.NoError(t, s.Put(fmt.Appendf(nil, "k%d", i), []byte("v")))
		require.NoError(t, s.Seal())
		sn, err := s.NewSnapshot()
		require.NoError(t, err)
		require.Equal(t, s.ManifestSeq(), sn.ManifestSeq())
		require.Equal(t, s.Segments(), sn.Segments())
		require.NoError(t, sn.Close())
		sealed, err := s.NewSealedSnapshot() // live file empty: exact
		require.NoError(t, err)
		require.Equal(t, s.ManifestSeq(), sealed.ManifestSeq())
		require.NoError(t, sealed.Close())
	}
	require.NoError(t, s.Put([]byte("x"), []byte("y")))
	sealed, err := s.NewSealedSnapshot() // seals, nothing else commits
	require.NoError(t, err)
	require.Equal(t, s.ManifestSeq(), sealed.ManifestSeq())
	require.Equal(t, s.Segments(), sealed.Segments())
	require.NoError(t, sealed.Close())
}

// TestSnapshotManifestSeqConcurrent takes snapshots while seals and merges
// commit: every snapshot's list must be the one manifest state its seq
// names, so two snapshots with the same seq list the same segments, none
// added after that seq. (The window in which the log's own Seq runs ahead
// of the installed list, between a commit and its install, is too narrow
// for this test to hit reliably; it guards the pairing, not that race.)
func TestSnapshotManifestSeqConcurrent(t *testing.T) {
	s := mustOpen(t, t.TempDir(), smallOpts(vfs.NewOS()))
	defer checkAndClose(t, s)
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Put(fmt.Appendf(nil, "k%03d", i%200), fmt.Appendf(nil, "v%d", i)); err != nil {
				errs <- err
				return
			}
			if i%7 == 0 {
				if err := s.Seal(); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := s.Compact(ctx); err != nil {
				errs <- err
				return
			}
		}
	}()
	seen := map[uint64][]uint64{}
	for range 300 {
		sn, err := s.NewSnapshot()
		require.NoError(t, err)
		seq := sn.ManifestSeq()
		var ids []uint64
		for _, in := range sn.Segments() {
			require.LessOrEqual(t, in.AddedSeq, seq, "segment %d added after the snapshot's seq", in.ID)
			ids = append(ids, in.ID)
		}
		if prev, ok := seen[seq]; ok {
			require.True(t, slices.Equal(prev, ids), "seq %d: %v then %v", seq, prev, ids)
		}
		seen[seq] = ids
		require.NoError(t, sn.Close())
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
