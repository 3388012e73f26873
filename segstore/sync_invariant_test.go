package segstore

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// exportStream seals s and exports its newest segment.
func exportStream(t *testing.T, s *Store) *bytes.Reader {
	t.Helper()
	require.NoError(t, s.Seal())
	segs := s.Segments()
	var buf bytes.Buffer
	_, err := s.Export(context.Background(), segs[len(segs)-1].ID, &buf)
	require.NoError(t, err)
	return bytes.NewReader(buf.Bytes())
}

// sealedState reads the state that the store's sealed segments alone hold
// (what a follower, a backup or a sealed snapshot of this commit reads): a
// follower that mirrors the store.
func sealedState(t *testing.T, s *Store) map[string]string {
	t.Helper()
	f := mustOpen(t, "/mirror", unmergedOpts(vfs.NewMem()))
	defer f.Close()
	require.NoError(t, f.Follow(context.Background(), s.ChangesSince(0), leaderOpen(s, nil)))
	return dumpStore(t, f)
}

// TestReimportChangesNothing: re-running an import of streams already
// adopted changes nothing, even after the first adoption was retired by a
// range drop (issue 28, item 2) or folded into a merge.
func TestReimportChangesNothing(t *testing.T) {
	peer := mustOpen(t, "/peer", unmergedOpts(vfs.NewMem()))
	defer peer.Close()
	require.NoError(t, peer.Put([]byte("a"), []byte("1")))
	put := exportStream(t, peer)
	require.NoError(t, peer.DeleteRange([]byte("a"), []byte("b")))
	del := exportStream(t, peer)

	s := mustOpen(t, "/s", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Sync: SyncAlways})
	defer s.Close()
	_, err := s.Import(context.Background(), put)
	require.NoError(t, err)
	_, err = s.Import(context.Background(), del)
	require.NoError(t, err)
	_, err = s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrNotFound)
	for _, sg := range s.Segments() {
		require.NotZero(t, sg.Keys+1) // the first import's segment may be dropped whole
	}
	put.Seek(0, 0)
	del.Seek(0, 0)
	seq := s.ManifestSeq()
	infos, err := s.Import(context.Background(), put, del)
	require.NoError(t, err)
	require.Empty(t, infos)
	require.Equal(t, seq, s.ManifestSeq())
	_, err = s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrNotFound, "a re-run import resurrected a deleted key")

	// Folded into a merge: the digests are gone from the segment list, but
	// remembered.
	require.NoError(t, s.Compact(context.Background()))
	put.Seek(0, 0)
	infos, err = s.Import(context.Background(), put)
	require.NoError(t, err)
	require.Empty(t, infos)
	_, err = s.Get([]byte("a"))
	require.ErrorIs(t, err, ErrNotFound)

	// And after a reopen, from the manifest.
	require.NoError(t, s.Close())
	s = mustOpen(t, "/s", &Options{FS: s.fs, SegmentSize: 64 << 10})
	put.Seek(0, 0)
	infos, err = s.Import(context.Background(), put)
	require.NoError(t, err)
	require.Empty(t, infos)
}

// TestRangeDropCommitsTheTombstone: a DeleteRange that drops a sealed
// segment whole commits the tombstone with the drop, so the sealed set at
// that commit is a state the store held (issue 28, item 3: the backup held
// {b} where history was {a,b,c} then {b,c}).
func TestRangeDropCommitsTheTombstone(t *testing.T) {
	s := mustOpen(t, "/s", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Sync: SyncAlways, Merge: MergeOptions{Disable: true}})
	defer s.Close()
	require.NoError(t, s.Put([]byte("a"), []byte("1")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Put([]byte("b"), []byte("2")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Put([]byte("c"), []byte("3")))
	require.NoError(t, s.DeleteRange([]byte("a"), []byte("a\x00")))
	want := map[string]string{"b": "2", "c": "3"}
	require.Equal(t, want, dumpStore(t, s))
	require.Equal(t, want, sealedState(t, s), "the sealed set names a state the store never held")
	require.Len(t, s.Segments(), 2, "a's segment is dropped when DeleteRange returns")
}

// TestImportSealsLiveWritesAbove: an import beneath unsealed writes seals
// them in the same commit, above the imported segment, so the sealed set
// reads what the store read (issue 28, item 3, second trigger).
func TestImportSealsLiveWritesAbove(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual} {
		t.Run(mode.String(), func(t *testing.T) {
			peer := mustOpen(t, "/peer", unmergedOpts(vfs.NewMem()))
			defer peer.Close()
			require.NoError(t, peer.Put([]byte("k"), []byte("0")))
			require.NoError(t, peer.Put([]byte("p"), []byte("peer")))
			stream := exportStream(t, peer)

			s := mustOpen(t, "/s", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, Sync: mode, Merge: MergeOptions{Disable: true}})
			defer s.Close()
			require.NoError(t, s.Put([]byte("k"), []byte("1")))
			seq := s.ManifestSeq()
			_, err := s.Import(context.Background(), stream)
			require.NoError(t, err)
			require.Equal(t, seq+1, s.ManifestSeq(), "one commit")
			want := map[string]string{"k": "1", "p": "peer"}
			require.Equal(t, want, dumpStore(t, s))
			require.Equal(t, want, sealedState(t, s))
		})
	}
}

// TestReimportOfPresentStream: a stream skipped because the store held a
// segment with its digest (installed by ReplaceAll from the same peer) is
// remembered like an adopted one, so a re-run after a merge retired that
// segment still changes nothing (found by the metamorphic test, seed 3:
// the re-run adopted the stream as the newest segment and k read "old").
func TestReimportOfPresentStream(t *testing.T) {
	peer := mustOpen(t, "/peer", unmergedOpts(vfs.NewMem()))
	defer peer.Close()
	require.NoError(t, peer.Put([]byte("k"), []byte("old")))
	stream := exportStream(t, peer)
	sn, err := peer.NewSealedSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	var segs []ReplaceSegment
	for _, in := range sn.Segments() {
		var buf bytes.Buffer
		_, err := sn.Export(context.Background(), in.ID, &buf)
		require.NoError(t, err)
		segs = append(segs, ReplaceSegment{Digest: in.Digest, Size: in.Size, Data: &buf})
	}

	mem := vfs.NewMem()
	s := mustOpen(t, "/s", &Options{FS: mem, SegmentSize: 64 << 10})
	_, err = s.ReplaceAll(context.Background(), segs)
	require.NoError(t, err)
	infos, err := s.Import(context.Background(), stream)
	require.NoError(t, err)
	require.Empty(t, infos, "present: skipped")
	require.NoError(t, s.Put([]byte("k"), []byte("new")))
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, s.Close())
	s = mustOpen(t, "/s", &Options{FS: mem, SegmentSize: 64 << 10})
	defer s.Close()
	stream.Seek(0, 0)
	infos, err = s.Import(context.Background(), stream)
	require.NoError(t, err)
	require.Empty(t, infos, "a re-run changes nothing")
	v, err := s.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "new", string(v))
}
