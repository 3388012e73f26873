package segstore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// One rule for Store, Snapshot and Iterator: the first Close releases, a
// second does nothing and returns ErrClosed.
func TestCloseTwiceReturnsErrClosed(t *testing.T) {
	s := mustOpen(t, t.TempDir(), nil)
	require.NoError(t, s.Put([]byte("a"), []byte("1")))

	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	it, err := sn.NewIterator(nil)
	require.NoError(t, err)
	require.True(t, it.First())
	require.NoError(t, it.Close())
	require.ErrorIs(t, it.Close(), ErrClosed)
	require.False(t, it.Next(), "a closed iterator does not move")
	require.ErrorIs(t, it.Err(), ErrClosed)
	// The snapshot the iterator read is still open.
	v, err := sn.Get([]byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
	require.NoError(t, sn.Close())
	require.ErrorIs(t, sn.Close(), ErrClosed)

	own, err := s.NewIterator(nil)
	require.NoError(t, err)
	require.NoError(t, own.Close())
	require.ErrorIs(t, own.Close(), ErrClosed)
	require.Zero(t, s.Metrics().OpenSnapshots)

	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Close(), ErrClosed)
}

func seqStore(t *testing.T) *Store {
	t.Helper()
	s := mustOpen(t, t.TempDir(), &Options{Merge: MergeOptions{Disable: true}})
	for i := range 50 {
		require.NoError(t, s.Put(fmt.Appendf(nil, "k%02d", i), fmt.Appendf(nil, "v%d", i)))
		if i == 24 {
			require.NoError(t, s.Seal())
		}
	}
	require.NoError(t, s.Delete([]byte("k10")))
	return s
}

func TestAllAndRange(t *testing.T) {
	s := seqStore(t)
	defer s.Close()
	var err error
	var keys []string
	for k, v := range s.All(&err) {
		keys = append(keys, string(k))
		require.Equal(t, "v"+fmt.Sprint(int(k[1]-'0')*10+int(k[2]-'0')), string(v))
	}
	require.NoError(t, err)
	require.Len(t, keys, 49)
	require.NotContains(t, keys, "k10")

	keys = nil
	for k := range s.Range([]byte("k08"), []byte("k12"), &err) {
		keys = append(keys, string(k))
	}
	require.NoError(t, err)
	require.Equal(t, []string{"k08", "k09", "k11"}, keys)

	// A snapshot's sequence sees the snapshot's state.
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	require.NoError(t, s.Put([]byte("k00"), []byte("new")))
	for k, v := range sn.Range(nil, []byte("k01"), &err) {
		require.Equal(t, "k00", string(k))
		require.Equal(t, "v0", string(v))
	}
	require.NoError(t, err)
	n := 0
	for range sn.All(&err) {
		n++
	}
	require.NoError(t, err)
	require.Equal(t, 49, n)
	require.NoError(t, sn.Close())
	require.Zero(t, s.Metrics().OpenSnapshots)
}

// Breaking out of the loop closes the iterator the loop opened.
func TestAllBreakClosesTheIterator(t *testing.T) {
	s := seqStore(t)
	defer s.Close()
	var err error
	for k := range s.All(&err) {
		require.Equal(t, int64(1), s.Metrics().OpenSnapshots, "the loop holds one iterator")
		if bytes.Equal(k, []byte("k03")) {
			break
		}
	}
	require.NoError(t, err)
	require.Zero(t, s.Metrics().OpenSnapshots, "break left the iterator open")

	func() {
		defer func() { require.Equal(t, "stop", recover()) }()
		for range s.All(&err) {
			panic("stop")
		}
	}()
	require.Zero(t, s.Metrics().OpenSnapshots, "a panic left the iterator open")
}

// The error that stops a walk reaches the caller.
func TestAllReportsErrors(t *testing.T) {
	s := seqStore(t)
	var err error
	n := 0
	for range s.All(&err) {
		n++
		if n == 3 {
			require.NoError(t, s.Close())
		}
	}
	require.ErrorIs(t, err, ErrClosed)
	require.Equal(t, 3, n)

	for range s.All(&err) {
		t.Fatal("a closed store yields nothing")
	}
	require.ErrorIs(t, err, ErrClosed)

	for range s.All(nil) {
		t.Fatal("a nil errp yields nothing")
	}
}

// The report a Store returns by value has its methods callable, and is
// named without importing package recovery.
func TestRecoveryReportValue(t *testing.T) {
	s := mustOpen(t, t.TempDir(), nil)
	defer s.Close()
	var rep RecoveryReport = s.RecoveryReport()
	require.False(t, rep.Repaired())
	require.False(t, s.RecoveryReport().Repaired()) // a method on a non-addressable value
	var tt []TornTail = rep.TornTails
	require.Empty(t, tt)
}
