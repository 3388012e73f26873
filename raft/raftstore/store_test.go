package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

func entry(i, term uint64) *raft.Log {
	return &raft.Log{
		Index: i, Term: term, Type: raft.LogCommand,
		Data:       []byte(fmt.Sprintf("data-%d-%d", i, term)),
		Extensions: []byte{byte(i)},
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

func entries(lo, hi, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		out = append(out, entry(i, term))
	}
	return out
}

func openMem(t *testing.T, fsys vfs.FS) *Store {
	t.Helper()
	s, err := Open("/raft", &Options{FS: fsys, SegmentSize: 64 << 10})
	require.NoError(t, err)
	return s
}

func requireBounds(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	require.NoError(t, err)
	l, err := s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, [2]uint64{first, last}, [2]uint64{f, l}, "FirstIndex, LastIndex")
}

func requireLog(t *testing.T, s *Store, want *raft.Log) {
	t.Helper()
	var got raft.Log
	require.NoError(t, s.GetLog(want.Index, &got))
	require.Equal(t, want.Index, got.Index)
	require.Equal(t, want.Term, got.Term)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.Data, got.Data)
	require.Equal(t, want.Extensions, got.Extensions)
	require.True(t, want.AppendedAt.Equal(got.AppendedAt), "AppendedAt %v, want %v", got.AppendedAt, want.AppendedAt)
}

func requireMissing(t *testing.T, s *Store, idx uint64) {
	t.Helper()
	var got raft.Log
	require.ErrorIs(t, s.GetLog(idx, &got), raft.ErrLogNotFound, "index %d", idx)
}

// The LogStore contract as raft uses it, on both file systems, before and
// after a reopen.
func TestLogStoreConformance(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/raft"
			if fsName == "os" {
				fsys, dir = vfs.NewOS(), t.TempDir()
			}
			open := func() *Store {
				s, err := Open(dir, &Options{FS: fsys, SegmentSize: 64 << 10})
				require.NoError(t, err)
				return s
			}
			s := open()
			requireBounds(t, s, 0, 0)
			requireMissing(t, s, 0)
			requireMissing(t, s, 1)
			require.NoError(t, s.StoreLogs(nil))
			requireBounds(t, s, 0, 0)
			require.NoError(t, s.DeleteRange(1, 10)) // on an empty log
			requireBounds(t, s, 0, 0)

			require.NoError(t, s.StoreLog(entry(1, 1)))
			require.NoError(t, s.StoreLogs(entries(2, 10, 1)))
			requireBounds(t, s, 1, 10)
			for i := uint64(1); i <= 10; i++ {
				requireLog(t, s, entry(i, 1))
			}
			requireMissing(t, s, 0)
			requireMissing(t, s, 11)

			// A gap, as raft leaves after installing a snapshot.
			require.NoError(t, s.StoreLogs(entries(20, 25, 2)))
			requireBounds(t, s, 1, 25)
			requireMissing(t, s, 15)

			// Tail truncation across the gap, then overwrite with a new term.
			require.NoError(t, s.DeleteRange(8, 25))
			requireBounds(t, s, 1, 7)
			requireMissing(t, s, 8)
			requireMissing(t, s, 20)
			require.NoError(t, s.StoreLogs(entries(8, 12, 3)))
			requireBounds(t, s, 1, 12)
			requireLog(t, s, entry(8, 3))
			requireLog(t, s, entry(7, 1))

			// An overwrite in place (no truncation first) replaces the entry.
			require.NoError(t, s.StoreLog(entry(12, 4)))
			requireLog(t, s, entry(12, 4))

			// Inclusive head truncation.
			require.NoError(t, s.DeleteRange(1, 3))
			requireBounds(t, s, 4, 12)
			requireMissing(t, s, 3)
			requireLog(t, s, entry(4, 1))
			// A hole in the middle keeps both bounds.
			require.NoError(t, s.DeleteRange(6, 7))
			requireBounds(t, s, 4, 12)
			requireMissing(t, s, 6)
			// Head truncation up to the hole: the first index is past it.
			require.NoError(t, s.DeleteRange(4, 5))
			requireBounds(t, s, 8, 12)
			// A range past the end, and one before the start: no change.
			require.NoError(t, s.DeleteRange(100, 200))
			require.NoError(t, s.DeleteRange(1, 7))
			requireBounds(t, s, 8, 12)
			// min > max deletes nothing.
			require.NoError(t, s.DeleteRange(12, 8))
			requireBounds(t, s, 8, 12)

			require.NoError(t, s.Close())
			s = open()
			requireBounds(t, s, 8, 12)
			requireLog(t, s, entry(8, 3))
			requireLog(t, s, entry(12, 4))
			requireMissing(t, s, 7)

			// Everything, to the largest index raft could name.
			require.NoError(t, s.StoreLog(entry(math.MaxUint64, 9)))
			requireBounds(t, s, 8, math.MaxUint64)
			requireLog(t, s, entry(math.MaxUint64, 9))
			require.NoError(t, s.DeleteRange(10, math.MaxUint64))
			requireBounds(t, s, 8, 9)
			require.NoError(t, s.DeleteRange(0, math.MaxUint64))
			requireBounds(t, s, 0, 0)
			require.NoError(t, s.Close())
			s = open()
			requireBounds(t, s, 0, 0)
			// Appending after everything was deleted starts the log afresh.
			require.NoError(t, s.StoreLogs(entries(50, 52, 5)))
			requireBounds(t, s, 50, 52)
			require.NoError(t, s.Close())
		})
	}
}

func TestStableStoreConformance(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	_, err := s.Get([]byte("CurrentTerm"))
	require.Error(t, err)
	require.Equal(t, "not found", err.Error(), "raft compares this text")
	require.ErrorIs(t, err, ErrKeyNotFound)
	v, err := s.GetUint64([]byte("CurrentTerm"))
	require.Equal(t, "not found", err.Error())
	require.Zero(t, v)

	require.NoError(t, s.Set([]byte("LastVoteCand"), []byte("node-2")))
	require.NoError(t, s.Set([]byte(""), []byte("empty key")))
	require.NoError(t, s.Set([]byte("empty"), nil))
	u64 := map[string]uint64{"zero": 0, "one": 1, "max": math.MaxUint64, "mid": 1 << 63, "odd": 0x0102030405060708}
	for k, x := range u64 {
		require.NoError(t, s.SetUint64([]byte(k), x))
	}
	check := func(s *Store) {
		v, err := s.Get([]byte("LastVoteCand"))
		require.NoError(t, err)
		require.Equal(t, "node-2", string(v))
		v, err = s.Get([]byte(""))
		require.NoError(t, err)
		require.Equal(t, "empty key", string(v))
		v, err = s.Get([]byte("empty"))
		require.NoError(t, err)
		require.NotNil(t, v)
		require.Empty(t, v)
		for k, x := range u64 {
			got, err := s.GetUint64([]byte(k))
			require.NoError(t, err)
			require.Equal(t, x, got, k)
		}
		// A value that is not 8 bytes is reported, not misread.
		_, err = s.GetUint64([]byte("LastVoteCand"))
		require.ErrorIs(t, err, ErrCorruptEntry)
	}
	check(s)
	// Stable keys and log entries do not collide, whatever the key.
	require.NoError(t, s.StoreLog(entry(1, 1)))
	require.NoError(t, s.Set(logKey(nil, 1), []byte("x")))
	requireLog(t, s, entry(1, 1))
	require.NoError(t, s.Close())
	s = openMem(t, mem)
	check(s)
	require.NoError(t, s.SetUint64([]byte("max"), 7))
	got, err := s.GetUint64([]byte("max"))
	require.NoError(t, err)
	require.Equal(t, uint64(7), got)
	require.NoError(t, s.Close())
}

func TestInvalidInput(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	require.ErrorIs(t, s.StoreLog(nil), ErrInvalidLog)
	require.ErrorIs(t, s.StoreLogs([]*raft.Log{entry(1, 1), nil}), ErrInvalidLog)
	requireBounds(t, s, 0, 0)
	requireMissing(t, s, 1) // nothing of the refused batch was stored
	require.ErrorIs(t, s.GetLog(1, nil), ErrInvalidLog)
	// An entry too large for the store is refused whole, with the store's
	// error, and nothing of its batch is stored.
	big := entry(2, 1)
	big.Data = make([]byte, segstore.DefaultMaxValueSize+1)
	err := s.StoreLogs([]*raft.Log{entry(1, 1), big})
	require.ErrorIs(t, err, segstore.ErrValueTooLarge)
	requireBounds(t, s, 0, 0)
	requireMissing(t, s, 1)
	// Options are validated by the stores.
	_, err = Open(t.TempDir(), &Options{SegmentSize: 10})
	require.ErrorIs(t, err, segstore.ErrInvalidOption)
}

func TestClosed(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	require.NoError(t, s.StoreLogs(entries(1, 3, 1)))
	require.NoError(t, s.Close())
	var l raft.Log
	require.ErrorIs(t, s.GetLog(1, &l), segstore.ErrClosed)
	require.ErrorIs(t, s.StoreLog(entry(4, 1)), segstore.ErrClosed)
	require.ErrorIs(t, s.DeleteRange(1, 2), segstore.ErrClosed)
	require.ErrorIs(t, s.Set([]byte("k"), []byte("v")), segstore.ErrClosed)
	_, err := s.Get([]byte("k"))
	require.ErrorIs(t, err, segstore.ErrClosed)
	require.Error(t, s.Close()) // a second Close says so
}

// A second Open of a directory in use fails cleanly and leaves the first
// store working.
func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()
	_, err = Open(dir, nil)
	require.ErrorIs(t, err, segstore.ErrLocked)
	require.NoError(t, s.StoreLog(entry(1, 1)))
}

func TestCodecRoundTrip(t *testing.T) {
	cases := []*raft.Log{
		{},
		{Index: 1, Term: 1},
		{Index: math.MaxUint64, Term: math.MaxUint64, Type: raft.LogConfiguration, Data: []byte{0}, Extensions: bytes.Repeat([]byte{0xff}, 300)},
		{Index: 7, Term: 2, Type: raft.LogBarrier, AppendedAt: time.Unix(0, 1)},
		{Index: 8, Term: 2, Type: raft.LogNoop, AppendedAt: time.Unix(-5, 0)},
		entry(1<<40, 99),
	}
	for _, l := range cases {
		b := appendEntry(nil, l)
		var got raft.Log
		require.NoError(t, decodeEntry(b, &got))
		require.Equal(t, l.Index, got.Index)
		require.Equal(t, l.Term, got.Term)
		require.Equal(t, l.Type, got.Type)
		require.Equal(t, l.Data, got.Data)
		require.Equal(t, l.Extensions, got.Extensions)
		require.Equal(t, l.AppendedAt.IsZero(), got.AppendedAt.IsZero())
		require.True(t, l.AppendedAt.Equal(got.AppendedAt))
		// Every proper prefix is refused, as is any trailing byte.
		for n := 0; n < len(b); n++ {
			require.ErrorIs(t, decodeEntry(b[:n], &got), ErrCorruptEntry, "prefix of %d bytes", n)
		}
		require.ErrorIs(t, decodeEntry(append(b, 0), &got), ErrCorruptEntry)
	}
	b := appendEntry(nil, entry(1, 1))
	b[0] = 2
	require.ErrorContains(t, decodeEntry(b, new(raft.Log)), "codec version 2")
	b = appendEntry(nil, &raft.Log{Index: 1})
	b[4] = 0x80 // the flags byte: an unknown flag
	require.ErrorContains(t, decodeEntry(b, new(raft.Log)), "unknown flags")
}

// The bytes of version 1 are pinned: a change to the encoder that would make
// existing logs unreadable fails here.
func TestCodecGolden(t *testing.T) {
	l := &raft.Log{Index: 300, Term: 2, Type: raft.LogCommand, Data: []byte("ab"), Extensions: []byte("x"), AppendedAt: time.Unix(0, 5)}
	require.Equal(t, []byte{1, 0xac, 0x02, 2, 0, 1, 10, 2, 'a', 'b', 1, 'x'}, appendEntry(nil, l))
	l.AppendedAt = time.Time{}
	require.Equal(t, []byte{1, 0xac, 0x02, 2, 0, 0, 2, 'a', 'b', 1, 'x'}, appendEntry(nil, l))
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(appendEntry(nil, entry(1, 1)))
	f.Add(appendEntry(nil, &raft.Log{}))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeEntry(b, &l); err != nil {
			if !errors.Is(err, ErrCorruptEntry) {
				t.Fatalf("error %v does not match ErrCorruptEntry", err)
			}
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		var again raft.Log
		if err := decodeEntry(appendEntry(nil, &l), &again); err != nil {
			t.Fatal(err)
		}
		if again.Index != l.Index || again.Term != l.Term || again.Type != l.Type ||
			!bytes.Equal(again.Data, l.Data) || !bytes.Equal(again.Extensions, l.Extensions) ||
			!again.AppendedAt.Equal(l.AppendedAt) {
			t.Fatalf("round trip changed %+v into %+v", l, again)
		}
	})
}

// Truncating the head drops the segments it covers before DeleteRange
// returns (the durable default), their files go once the last reader that
// can see them is done (a background index build may hold one for a
// moment), and the log reads the same after a reopen.
func TestHeadTruncationFreesFiles(t *testing.T) {
	mem := vfs.NewMem()
	open := func() *Store {
		s, err := Open("/raft", &Options{FS: mem, SegmentSize: 16 << 10})
		require.NoError(t, err)
		return s
	}
	s := open()
	for lo := uint64(1); lo <= 20000; lo += 500 {
		require.NoError(t, s.StoreLogs(entries(lo, lo+499, 1)))
	}
	ids := func() map[uint64]bool {
		set := map[uint64]bool{}
		for _, sg := range s.logs.Segments() {
			set[sg.ID] = true
		}
		return set
	}
	// onDisk lists the segment ids that still have a data or index file.
	onDisk := func() map[uint64]bool {
		names, err := mem.List("/raft/log")
		require.NoError(t, err)
		set := map[uint64]bool{}
		for _, name := range names {
			if id, _, ok := segment.ParseName(name); ok {
				set[id] = true
			}
		}
		return set
	}
	before := ids()
	require.Greater(t, len(before), 4)
	require.NoError(t, s.DeleteRange(1, 19000))
	requireBounds(t, s, 19001, 20000)
	after := ids()
	// Left: the segments holding entries above 19000 (one of them maybe
	// partly covered) and the segment the truncation sealed, which holds
	// its range tombstone; no segment wholly below 19001 survives.
	for _, sg := range s.logs.Segments() {
		require.True(t, before[sg.ID] || sg.ID > maxID(before), "segment %d appeared from nowhere", sg.ID)
		if before[sg.ID] && sg.Keys > 0 {
			last, ok := logKeyIndex(sg.MaxKey)
			require.True(t, ok)
			require.Greater(t, last, uint64(19000), "segment %d holds only truncated entries", sg.ID)
		}
	}
	require.LessOrEqual(t, len(after), 4, "segments left after truncating 95%% of %d", len(before))
	// Background work (an index build, a seal) can create files of new
	// segments meanwhile, so only the dropped ids are checked; the wait is
	// for a reader to let go, not a performance bound.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []uint64
		disk := onDisk()
		for id := range before {
			if !after[id] && disk[id] {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dropped segments' files are still on disk: %v", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for id := range after {
		require.True(t, onDisk()[id], "segment %d survived the truncation but its files are gone", id)
	}
	// A second truncation (raft's next snapshot) covers the first one's
	// tombstone too.
	require.NoError(t, s.StoreLogs(entries(20001, 21000, 1)))
	require.NoError(t, s.DeleteRange(19001, 20500))
	requireBounds(t, s, 20501, 21000)
	requireMissing(t, s, 20500)
	requireLog(t, s, entry(20501, 1))
	require.NoError(t, s.Close())
	s = open()
	defer s.Close()
	requireBounds(t, s, 20501, 21000)
	requireLog(t, s, entry(21000, 1))
}

func maxID(set map[uint64]bool) (m uint64) {
	for id := range set {
		m = max(m, id)
	}
	return m
}
