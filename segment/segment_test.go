package segment

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
)

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		kind       RecordKind
		key, value []byte
	}{
		{KindPut, []byte("k"), []byte("v")},
		{KindPut, nil, nil},
		{KindDelete, []byte("gone"), nil},
		{KindPut, bytes.Repeat([]byte("k"), 300), bytes.Repeat([]byte("v"), 70000)},
	}
	var buf []byte
	for _, c := range cases {
		start := len(buf)
		buf = AppendRecord(buf, c.kind, c.key, c.value)
		require.Equal(t, EncodedLen(len(c.key), len(c.value)), len(buf)-start)
	}
	pos := 0
	for _, c := range cases {
		r, n, err := DecodeRecord(buf[pos:])
		require.NoError(t, err)
		require.Equal(t, c.kind, r.Kind)
		require.Equal(t, string(c.key), string(r.Key))
		require.Equal(t, string(c.value), string(r.Value))
		pos += n
	}
	require.Equal(t, len(buf), pos)
}

func TestRecordDamageDetected(t *testing.T) {
	rec := AppendRecord(nil, KindPut, []byte("key"), []byte("value"))
	for i := range rec {
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(rec)
			b[i] ^= bit
			r, n, err := DecodeRecord(b)
			if err == nil {
				// A flip can only go unnoticed if it decodes to the very same record.
				t.Fatalf("flip at %d undetected: %+v (%d bytes)", i, r, n)
			}
		}
	}
	for n := 0; n < len(rec); n++ {
		_, _, err := DecodeRecord(rec[:n])
		require.Error(t, err, "truncated to %d", n)
	}
}

func TestLink(t *testing.T) {
	b := AppendLink(nil, 7, 12345)
	r, _, err := DecodeRecord(b)
	require.NoError(t, err)
	id, l, ok := ParseLink(r)
	require.True(t, ok)
	require.Equal(t, uint64(7), id)
	require.Equal(t, int64(12345), l)
	_, _, ok = ParseLink(Record{Kind: KindPut})
	require.False(t, ok)
}

func TestHeader(t *testing.T) {
	require.NoError(t, CheckHeader("f", Header()))
	for i := 0; i < HeaderSize; i++ {
		h := Header()
		h[i] ^= 0x10
		err := CheckHeader("f", h)
		require.ErrorIs(t, err, corruption.ErrCorrupt, "flip at %d", i)
	}
	require.ErrorIs(t, CheckHeader("f", Header()[:5]), corruption.ErrCorrupt)
}

func TestNames(t *testing.T) {
	for _, kind := range []FileKind{KindLog, KindSeg} {
		id, ext, ok := ParseName(DataName(0xabc, kind))
		require.True(t, ok)
		require.Equal(t, uint64(0xabc), id)
		require.Contains(t, []string{NameLog, NameSeg}, ext)
	}
	id, ext, ok := ParseName(IndexName(42))
	require.True(t, ok)
	require.Equal(t, uint64(42), id)
	require.Equal(t, NameIndex, ext)
	for _, bad := range []string{"LOCK", "MANIFEST-0000000000000001", "00000000000000zz.log", "0000000000000001.tmp", "1.log"} {
		_, _, ok := ParseName(bad)
		require.False(t, ok, bad)
	}
}

// TestKindNames: each known kind has a name of its own; an unknown one
// shows its byte, and a record carrying it does not decode.
func TestKindNames(t *testing.T) {
	names := map[string]bool{}
	for _, k := range []RecordKind{KindPut, KindDelete, KindLink, KindRangeDelete} {
		require.True(t, k.Known(), k.String())
		names[k.String()] = true
	}
	require.Len(t, names, 4)
	for k, want := range map[RecordKind]string{0: "record kind 0", 5: "record kind 5", 255: "record kind 255"} {
		require.False(t, k.Known())
		require.Equal(t, want, k.String())
		_, _, err := DecodeRecord(AppendRecord(nil, k, []byte("k"), []byte("v")))
		require.ErrorIs(t, err, errBadRecord, want)
	}
	require.Equal(t, NameLog, KindLog.String())
	require.Equal(t, NameSeg, KindSeg.String())
	for k, want := range map[FileKind]string{0: "file kind 0", 3: "file kind 3"} {
		require.False(t, k.Known())
		require.Equal(t, want, k.String())
	}
}

func TestForEachRecordReportsOffset(t *testing.T) {
	payload := AppendRecord(nil, KindPut, []byte("a"), []byte("1"))
	good := len(payload)
	payload = AppendRecord(payload, KindPut, []byte("b"), []byte("2"))
	payload[good+3] ^= 0xff
	var seen int
	err := ForEachRecord("f", 100, payload, func(r Record, off int64, n int) error { seen++; return nil })
	var ce *corruption.Error
	require.True(t, errors.As(err, &ce))
	require.Equal(t, int64(100+24+good), ce.Offset)
	require.Equal(t, 1, seen)
}

// FuzzDecodeRecord: arbitrary bytes never panic; a successful decode
// re-encodes to exactly the bytes consumed.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(AppendRecord(nil, KindPut, []byte("key"), []byte("value")))
	f.Add(AppendRecord(nil, KindDelete, []byte("key"), nil))
	f.Add(AppendLink(nil, 1, 2))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		re := AppendRecord(nil, r.Kind, r.Key, r.Value)
		if !bytes.Equal(re, b[:n]) {
			t.Fatalf("re-encoding differs")
		}
	})
}

// FuzzCheckRecord: CheckRecord and CheckValue accept exactly the buffers
// that DecodeRecord decodes whole, holding the key asked for, and return
// what it decodes.
func FuzzCheckRecord(f *testing.F) {
	f.Add(AppendRecord(nil, KindPut, []byte("key"), []byte("value")), []byte("key"))
	f.Add(AppendRecord(nil, KindPut, []byte("key"), []byte("value")), []byte("kez"))
	f.Add(AppendRecord(nil, KindDelete, []byte("key"), nil), []byte("key"))
	f.Add(append(AppendRecord(nil, KindPut, []byte("k"), []byte("v")), 0), []byte("k"))
	f.Fuzz(func(t *testing.T, b, key []byte) {
		r, n, err := DecodeRecord(b)
		want := err == nil && n == len(b) && bytes.Equal(r.Key, key)
		rec, cerr := CheckRecord(b, "p", 7, key)
		kind, value, verr := CheckValue(b, "p", 7, key)
		if (cerr == nil) != want || (verr == nil) != want {
			t.Fatalf("CheckRecord: %v, CheckValue: %v, DecodeRecord: n=%d of %d, %v", cerr, verr, n, len(b), err)
		}
		if !want {
			require.ErrorIs(t, cerr, corruption.ErrCorrupt)
			require.ErrorIs(t, verr, corruption.ErrCorrupt)
			return
		}
		if rec.Kind != r.Kind || !bytes.Equal(rec.Key, r.Key) || !bytes.Equal(rec.Value, r.Value) || kind != r.Kind || !bytes.Equal(value, r.Value) {
			t.Fatalf("CheckRecord %+v, CheckValue %v %q, DecodeRecord %+v", rec, kind, value, r)
		}
	})
}
