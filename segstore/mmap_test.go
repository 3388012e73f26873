package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// mappedIDs returns the ids of the sealed segments whose file is mapped.
func mappedIDs(s *Store) []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ids []uint64
	for _, sg := range s.mu.segs {
		if sg.df.mapped.Load() != nil {
			ids = append(ids, sg.meta.ID)
		}
	}
	return ids
}

// TestMappedReads: reads of a sealed segment go through a read-only mapping
// made on the first read; a live file is never mapped; DisableMmap keeps
// pread; Close releases the mappings, except those of files a snapshot
// still pins (here merged away too), which go when the snapshot is closed.
func TestMappedReads(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableMmap=%v", disable), func(t *testing.T) {
			for _, fsys := range []vfs.FS{vfs.NewMem(), vfs.NewOS()} {
				dir := "/db"
				if _, ok := fsys.(*vfs.Mem); !ok {
					dir = t.TempDir()
				}
				o := &Options{FS: fsys, DisableMmap: disable, Merge: MergeOptions{Disable: true}}
				s := mustOpen(t, dir, o)
				require.NoError(t, s.Put([]byte("a"), []byte("1")))
				require.NoError(t, s.Seal())
				require.NoError(t, s.Put([]byte("b"), []byte("2")))
				require.NoError(t, s.Seal())
				require.NoError(t, s.Put([]byte("live"), []byte("3")))
				require.Empty(t, mappedIDs(s), "nothing is mapped before a read")

				for k, v := range map[string]string{"a": "1", "b": "2", "live": "3"} {
					got, err := s.Get([]byte(k))
					require.NoError(t, err)
					require.Equal(t, v, string(got))
				}
				segs := s.Segments()
				require.Len(t, segs, 2)
				if disable {
					require.Empty(t, mappedIDs(s))
					require.NoError(t, s.Close())
					continue
				}
				require.Len(t, mappedIDs(s), 2, "both sealed segments were read")

				// A snapshot keeps the files it sees, and their mappings,
				// across a merge and a Close.
				sn, err := s.NewSnapshot()
				require.NoError(t, err)
				var dfs []*dataFile
				s.mu.RLock()
				for _, sg := range s.mu.segs {
					dfs = append(dfs, sg.df)
				}
				s.mu.RUnlock()
				require.NoError(t, s.Compact(t.Context()))
				got, err := sn.Get([]byte("a"))
				require.NoError(t, err)
				require.Equal(t, "1", string(got))
				require.NoError(t, s.Close())
				for _, d := range dfs {
					require.NotNil(t, d.mapped.Load(), "the snapshot still pins %s", d.path)
				}
				require.NoError(t, sn.Close())
				for _, d := range dfs {
					require.Nil(t, d.mapped.Load(), "%s unmapped after the last reader", d.path)
				}

				// After a reopen, sealed files are mapped on first read again.
				s = mustOpen(t, dir, o)
				got, err = s.Get([]byte("b"))
				require.NoError(t, err)
				require.Equal(t, "2", string(got))
				require.Len(t, mappedIDs(s), 1)
				require.NoError(t, s.Close())
				require.Empty(t, mappedIDs(s), "Close released the mapping")
			}
		})
	}
}

// TestMappedReadsDetectCorruption: a flipped bit in a sealed segment read
// through its mapping is a typed corruption error, as with pread.
func TestMappedReadsDetectCorruption(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	require.NoError(t, s.Put([]byte("key"), []byte("value-value-value")))
	require.NoError(t, s.Seal())
	path := s.mu.segs[0].df.path
	require.NoError(t, s.Close())
	b, err := mem.ReadFile(path)
	require.NoError(t, err)
	i := len(b) - 1
	for b[i] != 'e' { // the value's last byte: inside the record, not the link
		i--
	}
	b[i] ^= 1
	require.NoError(t, mem.WriteFile(path, b))
	s = mustOpen(t, "/db", o)
	defer s.Close()
	_, err = s.Get([]byte("key"))
	require.True(t, namesFile(err, path), "got %v", err)
	require.Len(t, mappedIDs(s), 1, "the read went through the mapping")
}

// TestMappedReadRacingSnapshotClose reads through a snapshot that holds
// the last pin on merged-away segments while another goroutine closes the
// snapshot: Close waits for reads in flight, so the mapping cannot be
// released under one (that was a SIGSEGV); a read after the close gets
// ErrClosed, never garbage.
func TestMappedReadRacingSnapshotClose(t *testing.T) {
	s := mustOpen(t, t.TempDir(), &Options{FS: vfs.NewOS(), Merge: MergeOptions{Disable: true}})
	defer checkAndClose(t, s)
	val := bytes.Repeat([]byte{'v'}, 1<<20)
	for range 15 {
		require.NoError(t, s.Put([]byte("a"), val))
		require.NoError(t, s.Seal())
		require.NoError(t, s.Put([]byte("b"), val))
		require.NoError(t, s.Seal())
		sn, err := s.NewSnapshot()
		require.NoError(t, err)
		_, err = sn.Get([]byte("a")) // maps the segment
		require.NoError(t, err)
		require.NoError(t, s.Compact(t.Context())) // now only sn pins the inputs
		started := make(chan struct{}, 2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				started <- struct{}{}
				for range 200 {
					v, err := sn.Get([]byte("a"))
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("read racing close: %v", err)
						}
						return
					}
					if !bytes.Equal(v, val) {
						t.Errorf("read racing close: wrong value")
						return
					}
				}
			})
		}
		<-started
		<-started
		require.NoError(t, sn.Close())
		wg.Wait()
	}
}
