package segstore

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// mapsOf counts the lines of /proc/self/maps that name path.
func mapsOf(t *testing.T, path string) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	return strings.Count(string(b), path)
}

// TestBreakLiveMappingReleasedOnClose: a Get of a key in the live file maps
// the live file (MAP_SHARED, its whole preallocated size). Close must
// release that mapping as it does the sealed files' ones: nothing can read
// through it after Close. It is never released: closeResources unpins only
// the sealed segments, never the live file's dataFile, so every
// Open/Get/Close cycle leaks a SegmentSize mapping.
func TestBreakLiveMappingReleasedOnClose(t *testing.T) {
	dir := t.TempDir()
	o := &Options{FS: vfs.NewOS(), Merge: MergeOptions{Disable: true}}
	for cycle := range 3 {
		s := mustOpen(t, dir, o)
		require.NoError(t, s.Put([]byte("k"), []byte("v")))
		_, err := s.Get([]byte("k")) // maps the live file
		require.NoError(t, err)
		df := s.mu.tail.df
		require.NotNil(t, df.mapped.Load(), "cycle %d: the live read went through the shared mapping", cycle)
		require.NoError(t, s.Close())
		// (Not require.Nil on the map: printing it reads the mapping past
		// the end of the file Close truncated, which is a SIGBUS.)
		require.True(t, df.mapped.Load() == nil, "cycle %d: Close left the live file %s mapped", cycle, df.path)
		require.Zero(t, mapsOf(t, df.path), "cycle %d: %s still in /proc/self/maps after Close", cycle, df.path)
	}
}

// TestBreakLiveReadsRacingClose: snapshot and iterator reads of keys in
// the live file (through its shared mapping) race Close, which truncates
// the live file's preallocation: every read returns the value or
// ErrClosed, never faults.
func TestBreakLiveReadsRacingClose(t *testing.T) {
	for round := range 30 {
		dir := t.TempDir()
		s := mustOpen(t, dir, &Options{FS: vfs.NewOS(), Merge: MergeOptions{Disable: true}})
		val := strings.Repeat("v", 3000)
		for i := range 200 {
			require.NoError(t, s.Put([]byte(fmt.Sprintf("k%03d", i)), []byte(val)))
		}
		require.NoError(t, s.DeleteRange([]byte("k050"), []byte("k060")))
		sn, err := s.NewSnapshot()
		require.NoError(t, err)
		it, err := s.NewIterator(nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			for i := 0; ; i++ {
				v, err := sn.Get([]byte(fmt.Sprintf("k%03d", 199-i%140)))
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("round %d: snapshot get: %v", round, err)
					}
					return
				}
				if string(v) != val {
					t.Errorf("round %d: wrong value", round)
					return
				}
			}
		})
		wg.Go(func() {
			<-start
			var buf []byte
			for {
				for ok := it.First(); ok; ok = it.Next() {
					var err error
					if buf, err = it.AppendValue(buf[:0]); err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("round %d: iterator value: %v", round, err)
						}
						return
					}
				}
				if it.Err() != nil {
					return
				}
			}
		})
		close(start)
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		require.NoError(t, s.Close())
		wg.Wait()
		it.Close()
		sn.Close()
	}
}

// TestBreakLeakedLiveMappingPinsDeletedFile: the consequence of the leak
// above. The live file mapped by a Get in one session and left mapped by
// its Close is sealed and merged away by the next session, which removes
// it; the leaked mapping keeps the removed file's blocks allocated (it
// shows in /proc/self/maps as "(deleted)") until the process exits: a
// long-running process that reopens a store keeps one SegmentSize file
// per session on disk.
func TestBreakLeakedLiveMappingPinsDeletedFile(t *testing.T) {
	dir := t.TempDir()
	o := &Options{FS: vfs.NewOS(), Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, dir, o)
	require.NoError(t, s.Put([]byte("a"), []byte("1")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Put([]byte("b"), []byte("2")))
	_, err := s.Get([]byte("b")) // maps the live file
	require.NoError(t, err)
	live := s.mu.tail.path
	require.NoError(t, s.Close())

	s = mustOpen(t, dir, o)
	require.NoError(t, s.Seal())               // the old live file is now a sealed segment
	require.NoError(t, s.Compact(t.Context())) // merged away and removed
	require.NoError(t, s.Close())
	_, err = os.Stat(live)
	require.True(t, os.IsNotExist(err), "the merge removed %s", live)
	require.Zero(t, mapsOf(t, live), "%s was removed but is still mapped by the first session", live)
}
