package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// rec is a record in comparable form.
type rec struct {
	Kind  RecordKind
	Key   string
	Value string
}

func toRec(r Record) rec { return rec{r.Kind, string(r.Key), string(r.Value)} }

// encodeRecs concatenates the encodings of rs: the records of one block.
func encodeRecs(rs []rec) []byte {
	var b []byte
	for _, r := range rs {
		b = AppendRecord(b, r.Kind, []byte(r.Key), []byte(r.Value))
	}
	return b
}

// compressibleRecs returns n puts (every fourth a delete) with ascending
// keys and repetitive values: what S2 shrinks.
func compressibleRecs(n int) []rec {
	rs := make([]rec, n)
	for i := range rs {
		rs[i] = rec{KindPut, fmt.Sprintf("key-%06d", i), fmt.Sprintf("value %d of a rather repetitive block, ", i%7) + "padding padding padding padding"}
		if i%4 == 3 {
			rs[i] = rec{KindDelete, rs[i].Key, ""}
		}
	}
	return rs
}

// randomRecs returns n puts with ascending keys and random values: what S2
// cannot shrink.
func randomRecs(seed uint64, n int) []rec {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rs := make([]rec, n)
	for i := range rs {
		k := make([]byte, 8)
		binary.BigEndian.PutUint64(k, uint64(i)<<32|uint64(r.Uint32()))
		v := make([]byte, 16+r.IntN(200))
		for j := range v {
			v[j] = byte(r.Uint32())
		}
		rs[i] = rec{KindPut, string(k), string(v)}
	}
	return rs
}

// blockRecs walks a decoded block with ForEachBlockRecord, checking the
// location it reports for every record.
func blockRecs(t testing.TB, records []byte, frameOff int64, frameLen int) []rec {
	t.Helper()
	var got []rec
	err := ForEachBlockRecord("blk", frameOff, frameLen, records, func(r Record, off int64, length int) error {
		require.Equal(t, frameOff, off)
		require.Equal(t, frameLen, length)
		got = append(got, toRec(r))
		return nil
	})
	require.NoError(t, err)
	return got
}

// requireCorrupt checks that err is a *corruption.Error for path at off.
func requireCorrupt(t testing.TB, err error, path string, off int64, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.ErrorIs(t, err, corruption.ErrCorrupt, msgAndArgs...)
	var ce *corruption.Error
	require.True(t, errors.As(err, &ce), msgAndArgs...)
	require.Equal(t, path, ce.Path, msgAndArgs...)
	require.Equal(t, off, ce.Offset, msgAndArgs...)
}

// s2Block returns an S2 block payload holding rs, which must compress, and
// the records it holds.
func s2Block(t testing.TB, rs []rec) (payload, records []byte) {
	t.Helper()
	records = encodeRecs(rs)
	payload = AppendBlock(nil, records, CodecS2)
	require.Equal(t, byte(CodecS2), payload[0], "records should compress")
	return payload, records
}

func TestBlockRoundTrip(t *testing.T) {
	compressible := compressibleRecs(200)
	random := randomRecs(1, 60)
	cases := []struct {
		name      string
		rs        []rec
		codec     Codec
		prefix    []byte
		wantCodec Codec
	}{
		{"s2 compressible", compressible, CodecS2, nil, CodecS2},
		{"s2 compressible after prefix", compressible, CodecS2, []byte("prefix"), CodecS2},
		{"s2 random falls back", random, CodecS2, nil, CodecNone},
		{"s2 random falls back after prefix", random, CodecS2, []byte("pre"), CodecNone},
		{"s2 one tiny record falls back", []rec{{KindPut, "k", "v"}}, CodecS2, nil, CodecNone},
		{"none compressible", compressible, CodecNone, nil, CodecNone},
		{"none random", random, CodecNone, []byte("xy"), CodecNone},
		{"none one delete", []rec{{KindDelete, "gone", ""}}, CodecNone, nil, CodecNone},
		{"s2 ranges", []rec{{KindRangeDelete, "a", "b"}, {KindRangeDelete, "c", "d"}, {KindRangeDelete, "c", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"}}, CodecS2, nil, CodecS2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			records := encodeRecs(c.rs)
			prefix := bytes.Clone(c.prefix)
			out := AppendBlock(prefix, records, c.codec)
			require.Equal(t, string(c.prefix), string(out[:len(c.prefix)]), "prefix kept")
			payload := out[len(c.prefix):]
			require.Equal(t, byte(c.wantCodec), payload[0])
			switch c.wantCodec {
			case CodecNone:
				require.Len(t, payload, 1+len(records))
				require.Equal(t, records, payload[1:])
			case CodecS2:
				require.Less(t, len(payload), 1+len(records), "compressed payload is smaller")
			}
			for _, dst := range [][]byte{nil, make([]byte, 0, 16), make([]byte, 3, len(records)+10)} {
				got, buf, err := DecodeBlock(dst, payload, len(records), "blk", 4096)
				require.NoError(t, err)
				require.Equal(t, records, got)
				if c.wantCodec == CodecNone {
					require.Same(t, &payload[1], &got[0], "raw block aliases the payload")
				} else {
					require.GreaterOrEqual(t, cap(buf), len(records))
					require.Same(t, &buf[:1][0], &got[0], "decoded into the returned buffer")
					if cap(dst) >= len(records) {
						require.Same(t, &dst[:1][0], &got[0], "dst reused when large enough")
					}
				}
				frameLen := wal.HeaderSize + len(payload)
				require.Equal(t, c.rs, blockRecs(t, got, 4096, frameLen))
			}
		})
	}
}

// TestDecodeBlockReusesBuffer: decoding into the buffer a previous call
// returned does not allocate.
func TestDecodeBlockReusesBuffer(t *testing.T) {
	payload, records := s2Block(t, compressibleRecs(100))
	_, buf, err := DecodeBlock(nil, payload, MaxBlockRecords, "blk", 0)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(20, func() {
		got, b, err := DecodeBlock(buf, payload, MaxBlockRecords, "blk", 0)
		if err != nil || !bytes.Equal(got, records) {
			t.Fatalf("decode: %v", err)
		}
		buf = b
	})
	require.Zero(t, allocs)
}

func TestDecodeBlockLimit(t *testing.T) {
	payload, records := s2Block(t, compressibleRecs(50))
	_, _, err := DecodeBlock(nil, payload, len(records), "blk", 8)
	require.NoError(t, err, "decoded length equal to the limit")
	_, _, err = DecodeBlock(nil, payload, len(records)-1, "blk", 8)
	requireCorrupt(t, err, "blk", 8)
}

// TestDecodeBlockHugeClaim: a body claiming far more than the limit is
// refused before anything of that size is allocated.
func TestDecodeBlockHugeClaim(t *testing.T) {
	payload := binary.AppendUvarint([]byte{byte(CodecS2)}, 1<<30)
	payload = append(payload, 0x00, 'x') // a one-byte literal
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		_, buf, err := DecodeBlock(nil, payload, 1<<20, "blk", 77)
		requireCorrupt(t, err, "blk", 77)
		require.Nil(t, buf)
	}
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "allocated while refusing")
}

func TestDecodeBlockErrors(t *testing.T) {
	good, _ := s2Block(t, compressibleRecs(40))
	s2 := func(n uint64, body ...byte) []byte {
		return append(binary.AppendUvarint([]byte{byte(CodecS2)}, n), body...)
	}
	cases := []struct {
		name    string
		payload []byte
		limit   int
	}{
		{"nil", nil, 1 << 20},
		{"empty", []byte{}, 1 << 20},
		{"codec none, no records", []byte{byte(CodecNone)}, 1 << 20},
		{"codec s2, no body", []byte{byte(CodecS2)}, 1 << 20},
		{"unknown codec 2", append([]byte{2}, good[1:]...), 1 << 20},
		{"unknown codec 255", append([]byte{255}, good[1:]...), 1 << 20},
		{"s2 length is a bad uvarint", []byte{byte(CodecS2), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1 << 20},
		{"s2 length above 32 bits", s2(1<<32, 0x00, 'x'), 1 << 40},
		{"s2 decodes to nothing", s2(0), 1 << 20},
		{"s2 decodes to nothing, trailing bytes", s2(0, 0x00, 'x'), 1 << 20},
		{"s2 claims more than the body holds", s2(50, 0x00, 'x'), 1 << 20},
		{"s2 claims less than the body holds", s2(1, 0x04, 'a', 'b'), 1 << 20},
		{"s2 copy before any output", s2(10, 0x01, 0x05), 1 << 20},
		{"s2 literal runs past the body", s2(10, 0x24, 'a'), 1 << 20},
		{"s2 above the limit", s2(1<<20+1, 0x00, 'x'), 1 << 20},
		{"s2 claims 1 GiB, limit 1 MiB", s2(1<<30, 0x00, 'x'), 1 << 20},
		{"good block, limit 0", good, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			records, _, err := DecodeBlock(nil, c.payload, c.limit, "blk", 123)
			requireCorrupt(t, err, "blk", 123)
			require.Nil(t, records)
		})
	}
}

// TestDecodeBlockTruncatedS2: every proper prefix of an S2 block fails to
// decode.
func TestDecodeBlockTruncatedS2(t *testing.T) {
	payload, _ := s2Block(t, compressibleRecs(40))
	for n := 0; n < len(payload); n++ {
		_, _, err := DecodeBlock(nil, payload[:n], MaxBlockRecords, "blk", 5)
		requireCorrupt(t, err, "blk", 5, "truncated to %d of %d", n, len(payload))
	}
}

// TestDecodeBlockGarbledS2: S2's block format has no checksum of its own,
// so a damaged body may decode; but then the records' checksums catch it.
// Either way the damage is reported as corruption, never as other records.
func TestDecodeBlockGarbledS2(t *testing.T) {
	payload, records := s2Block(t, compressibleRecs(40))
	for i := 1; i < len(payload); i++ {
		for _, bit := range []byte{0x01, 0x10, 0x80} {
			b := bytes.Clone(payload)
			b[i] ^= bit
			got, _, err := DecodeBlock(nil, b, MaxBlockRecords, "blk", 9)
			if err == nil {
				if bytes.Equal(got, records) {
					continue // the flip did not change what decodes
				}
				err = ForEachBlockRecord("blk", 9, wal.HeaderSize+len(b), got, func(Record, int64, int) error { return nil })
			}
			requireCorrupt(t, err, "blk", 9, "flip %#x at %d", bit, i)
		}
	}
}

func TestForEachBlockRecordRules(t *testing.T) {
	put := func(k, v string) rec { return rec{KindPut, k, v} }
	del := func(k string) rec { return rec{KindDelete, k, ""} }
	rng := func(s, e string) rec { return rec{KindRangeDelete, s, e} }
	link := AppendLink(nil, 7, 1234)
	withBadSum := func(rs []rec, i int) []byte {
		var b []byte
		for j, r := range rs {
			b = AppendRecord(b, r.Kind, []byte(r.Key), []byte(r.Value))
			if j == i {
				b[len(b)-1] ^= 0x40 // the checksum's last byte
			}
		}
		return b
	}
	cases := []struct {
		name    string
		records []byte
		before  int // records reported before the error
	}{
		{"link alone", link, 0},
		{"link first", append(bytes.Clone(link), encodeRecs([]rec{put("a", "1")})...), 0},
		{"link after points", append(encodeRecs([]rec{put("a", "1"), put("b", "2")}), link...), 2},
		{"link after ranges", append(encodeRecs([]rec{rng("a", "b")}), link...), 1},
		{"range then put", encodeRecs([]rec{rng("a", "c"), put("d", "1")}), 1},
		{"put then range", encodeRecs([]rec{put("a", "1"), rng("b", "c")}), 1},
		{"delete then range", encodeRecs([]rec{del("a"), rng("b", "c")}), 1},
		{"ranges around a delete", encodeRecs([]rec{rng("a", "b"), del("c"), rng("d", "e")}), 1},
		{"keys descend", encodeRecs([]rec{put("b", "1"), put("a", "2")}), 1},
		{"keys descend later", encodeRecs([]rec{put("a", "1"), put("c", "2"), put("b", "3")}), 2},
		{"equal keys, puts", encodeRecs([]rec{put("a", "1"), put("a", "2")}), 1},
		{"equal keys, put and delete", encodeRecs([]rec{put("k", "1"), del("k")}), 1},
		{"equal empty keys", encodeRecs([]rec{put("", "1"), put("", "2")}), 1},
		{"prefix key after longer", encodeRecs([]rec{put("ab", "1"), put("a", "2")}), 1},
		{"bad checksum first", withBadSum([]rec{put("a", "1"), put("b", "2")}, 0), 0},
		{"bad checksum second", withBadSum([]rec{put("a", "1"), put("b", "2"), put("c", "3")}, 1), 1},
		{"bad checksum range", withBadSum([]rec{rng("a", "b"), rng("c", "d")}, 1), 1},
		{"unknown kind", encodeRecs([]rec{put("a", "1"), {RecordKind(9), "b", "2"}}), 1},
		{"truncated last record", encodeRecs([]rec{put("a", "1"), put("b", "2")})[:EncodedLen(1, 1)+5], 1},
		{"trailing zero byte", append(encodeRecs([]rec{put("a", "1")}), 0), 1},
		{"delete with a value", encodeRecs([]rec{{KindDelete, "a", "v"}}), 0},
		{"empty range", encodeRecs([]rec{rng("b", "b")}), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var n int
			err := ForEachBlockRecord("blk", 640, 99, c.records, func(r Record, off int64, length int) error {
				require.Equal(t, int64(640), off)
				require.Equal(t, 99, length)
				n++
				return nil
			})
			requireCorrupt(t, err, "blk", 640)
			require.Equal(t, c.before, n, "records reported before the damage")
		})
	}
}

func TestForEachBlockRecordAccepts(t *testing.T) {
	cases := map[string][]rec{
		"one put":            {{KindPut, "k", "v"}},
		"empty key first":    {{KindPut, "", "v"}, {KindDelete, "\x00", ""}, {KindPut, "a", ""}},
		"puts and deletes":   compressibleRecs(30),
		"ranges only":        {{KindRangeDelete, "a", "c"}, {KindRangeDelete, "c", "f"}, {KindRangeDelete, "x", "y"}},
		"overlapping ranges": {{KindRangeDelete, "a", "m"}, {KindRangeDelete, "a", "z"}},
		"one range":          {{KindRangeDelete, "", "\x00"}},
	}
	for name, rs := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, rs, blockRecs(t, encodeRecs(rs), 1<<40, 12345))
		})
	}
	// An empty block has no record to report.
	require.Nil(t, blockRecs(t, nil, 0, wal.HeaderSize+1))
}

func TestForEachBlockRecordStopsOnCallbackError(t *testing.T) {
	stop := errors.New("stop")
	var n int
	err := ForEachBlockRecord("blk", 0, 50, encodeRecs(compressibleRecs(10)), func(Record, int64, int) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	require.Same(t, stop, err, "the callback's error is returned as is")
	require.NotErrorIs(t, err, corruption.ErrCorrupt)
	require.Equal(t, 3, n)
}

func TestFindInBlock(t *testing.T) {
	// Even keys k00..k38; deletes at every third.
	var rs []rec
	for i := 0; i < 40; i += 2 {
		r := rec{KindPut, fmt.Sprintf("k%02d", i), fmt.Sprintf("value %d value %d value", i, i)}
		if i%3 == 0 {
			r = rec{KindDelete, r.Key, ""}
		}
		rs = append(rs, r)
	}
	for _, codec := range []Codec{CodecNone, CodecS2} {
		t.Run(codec.String(), func(t *testing.T) {
			payload := AppendBlock(nil, encodeRecs(rs), codec)
			require.Equal(t, byte(codec), payload[0])
			records, _, err := DecodeBlock(nil, payload, MaxBlockRecords, "blk", 300)
			require.NoError(t, err)
			for _, want := range rs {
				r, raw, found, err := FindInBlock(records, []byte(want.Key), "blk", 300)
				require.NoError(t, err, want.Key)
				require.True(t, found, want.Key)
				require.Equal(t, want, toRec(r))
				require.Equal(t, AppendRecord(nil, want.Kind, []byte(want.Key), []byte(want.Value)), raw)
				// raw aliases records, and the record aliases raw.
				i := bytes.Index(records, raw)
				require.GreaterOrEqual(t, i, 0)
				require.Same(t, &records[i], &raw[0])
				require.Same(t, &raw[len(raw)-4-len(r.Value)-len(r.Key)], &r.Key[:1][0])
			}
			for _, key := range []string{"", "a", "k", "k0", "k000", "k01", "k02\x00", "k19", "k37", "k38\x00", "k39", "k4", "l", "\xff"} {
				r, raw, found, err := FindInBlock(records, []byte(key), "blk", 300)
				require.NoError(t, err, key)
				require.False(t, found, key)
				require.Nil(t, raw, key)
				require.Equal(t, Record{}, r, key)
			}
		})
	}
	t.Run("empty block", func(t *testing.T) {
		_, _, found, err := FindInBlock(nil, []byte("k"), "blk", 0)
		require.NoError(t, err)
		require.False(t, found)
	})
}

// TestFindInBlockSkipsRanges: range tombstones are not point records, even
// when their start is the key asked for.
func TestFindInBlockSkipsRanges(t *testing.T) {
	rs := []rec{{KindRangeDelete, "b", "d"}, {KindRangeDelete, "d", "f"}, {KindRangeDelete, "k", "m"}}
	records := encodeRecs(rs)
	require.Equal(t, rs, blockRecs(t, records, 0, 1))
	for _, key := range []string{"a", "b", "c", "d", "e", "k", "l", "m", "z"} {
		r, raw, found, err := FindInBlock(records, []byte(key), "blk", 0)
		require.NoError(t, err, key)
		require.False(t, found, key)
		require.Nil(t, raw)
		require.Equal(t, Record{}, r)
	}
}

func TestFindInBlockCorruption(t *testing.T) {
	rs := []rec{{KindPut, "a", "1"}, {KindPut, "b", "22"}, {KindDelete, "c", ""}, {KindPut, "d", "4444"}}
	records := encodeRecs(rs)
	offB := EncodedLen(1, 1)
	offC := offB + EncodedLen(1, 2)
	offD := offC + EncodedLen(1, 0)

	t.Run("truncated record header", func(t *testing.T) {
		// Cut inside the last record: its header no longer fits.
		for cut := offD + 1; cut < len(records); cut++ {
			_, _, _, err := FindInBlock(records[:cut], []byte("d"), "blk", 55)
			requireCorrupt(t, err, "blk", 55, "cut at %d", cut)
			_, _, _, err = FindInBlock(records[:cut], []byte("z"), "blk", 55)
			requireCorrupt(t, err, "blk", 55, "cut at %d", cut)
		}
		// A lone fragment, shorter than any record.
		for n := 1; n < EncodedLen(0, 0); n++ {
			_, _, _, err := FindInBlock(records[:n], []byte("a"), "blk", 55)
			requireCorrupt(t, err, "blk", 55, "fragment of %d", n)
		}
		// Key length running past the block.
		bad := bytes.Clone(records)
		bad[offB+1] = 0x7f
		_, _, _, err := FindInBlock(bad, []byte("b"), "blk", 55)
		requireCorrupt(t, err, "blk", 55)
		// A key length uvarint that never ends.
		bad = append(bytes.Clone(records[:offB]), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		_, _, _, err = FindInBlock(bad, []byte("b"), "blk", 55)
		requireCorrupt(t, err, "blk", 55)
	})

	t.Run("matching record with a bad checksum", func(t *testing.T) {
		for _, at := range []struct {
			key string
			pos int // a byte of that record's value or checksum
		}{
			{"a", EncodedLen(1, 1) - 5}, // value byte
			{"b", offC - 1},             // checksum byte
			{"c", offD - 2},             // checksum byte of a delete
			{"d", len(records) - 6},     // value byte
		} {
			bad := bytes.Clone(records)
			bad[at.pos] ^= 0x01
			r, raw, found, err := FindInBlock(bad, []byte(at.key), "blk", 900)
			requireCorrupt(t, err, "blk", 900, at.key)
			require.False(t, found)
			require.Nil(t, raw)
			require.Equal(t, Record{}, r)
		}
	})

	t.Run("earlier records are not in the way", func(t *testing.T) {
		// FindInBlock verifies the record it returns; a damaged value of a
		// smaller key does not hide the key asked for.
		bad := bytes.Clone(records)
		bad[offB+3] ^= 0x01 // b's value
		r, _, found, err := FindInBlock(bad, []byte("d"), "blk", 0)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, rs[3], toRec(r))
	})
}

// TestFindInBlockDamagedKind: a flipped kind byte on the record for the key
// asked for must not make the key silently absent (a read would then fall
// through to older data).
func TestFindInBlockDamagedKind(t *testing.T) {
	records := encodeRecs([]rec{{KindPut, "a", "1"}, {KindPut, "b", "2"}})
	for _, kind := range []byte{0, 3, 5} {
		bad := bytes.Clone(records)
		bad[EncodedLen(1, 1)] = kind
		_, _, found, err := FindInBlock(bad, []byte("b"), "blk", 0)
		require.False(t, found)
		requireCorrupt(t, err, "blk", 0, "kind %d", kind)
	}
}

func TestForEachFrameRecord(t *testing.T) {
	points := []rec{{KindPut, "a", "1"}, {KindDelete, "b", ""}, {KindPut, "c", "333"}}
	ranged := []rec{{KindPut, "a", "1"}, {KindRangeDelete, "b", "c"}}
	collect := func(version uint32, frameOff int64, payload []byte, w *FrameWalk) ([]rec, [][2]int64, error) {
		var rs []rec
		var locs [][2]int64
		err := ForEachFrameRecord("f", version, frameOff, payload, MaxBlockRecords, w, func(r Record, off int64, length int) error {
			rs = append(rs, toRec(r))
			locs = append(locs, [2]int64{off, int64(length)})
			return nil
		})
		return rs, locs, err
	}

	t.Run("versions 1 and 2 report each record", func(t *testing.T) {
		for _, v := range []uint32{1, 2} {
			var w FrameWalk
			rs, locs, err := collect(v, 1000, encodeRecs(points), &w)
			require.NoError(t, err)
			require.Equal(t, points, rs)
			base := int64(1000 + wal.HeaderSize)
			require.Equal(t, [][2]int64{
				{base, int64(EncodedLen(1, 1))},
				{base + int64(EncodedLen(1, 1)), int64(EncodedLen(1, 0))},
				{base + int64(EncodedLen(1, 1)+EncodedLen(1, 0)), int64(EncodedLen(1, 3))},
			}, locs)
			require.Nil(t, w.scratch)
		}
	})

	t.Run("version 1 refuses a range delete", func(t *testing.T) {
		var w FrameWalk
		rs, _, err := collect(1, 0, encodeRecs(ranged), &w)
		requireCorrupt(t, err, "f", wal.HeaderSize+int64(EncodedLen(1, 1)))
		require.Equal(t, ranged[:1], rs)
		rs, _, err = collect(2, 0, encodeRecs(ranged), &w)
		require.NoError(t, err)
		require.Equal(t, ranged, rs)
	})

	t.Run("version 3 reports the block", func(t *testing.T) {
		compressible := compressibleRecs(100)
		var w FrameWalk
		for _, c := range []struct {
			rs    []rec
			codec Codec
		}{{points, CodecNone}, {compressible, CodecS2}, {compressible, CodecNone}} {
			payload := AppendBlock(nil, encodeRecs(c.rs), c.codec)
			require.Equal(t, byte(c.codec), payload[0])
			w.Reset() // each block stands alone here
			rs, locs, err := collect(BlockVersion, 2048, payload, &w)
			require.NoError(t, err)
			require.Equal(t, c.rs, rs)
			for _, l := range locs {
				require.Equal(t, [2]int64{2048, int64(wal.HeaderSize + len(payload))}, l)
			}
			if c.codec == CodecS2 {
				require.GreaterOrEqual(t, cap(w.scratch), len(encodeRecs(c.rs)), "scratch kept for the next block")
			}
		}
	})

	t.Run("version 3 refuses bad blocks", func(t *testing.T) {
		var w FrameWalk
		for name, payload := range map[string][]byte{
			"point records, not a block": encodeRecs(points),
			"mixed block":                AppendBlock(nil, encodeRecs(ranged), CodecNone),
			"link block":                 AppendBlock(nil, AppendLink(nil, 1, 2), CodecNone),
			"empty block":                {byte(CodecS2)},
		} {
			_, _, err := collect(BlockVersion, 4096, payload, &w)
			requireCorrupt(t, err, "f", 4096, name)
		}
	})

	t.Run("limit applies to version 3", func(t *testing.T) {
		payload, records := s2Block(t, compressibleRecs(50))
		var w FrameWalk
		err := ForEachFrameRecord("f", BlockVersion, 16, payload, len(records)-1, &w, func(Record, int64, int) error { return nil })
		requireCorrupt(t, err, "f", 16)
	})
}

func TestForEachFrameRecordAcrossBlocks(t *testing.T) {
	put := func(k string) rec { return rec{KindPut, k, "v"} }
	rng := rec{KindRangeDelete, "a", "b"}
	walk := func(blocks ...[]rec) error {
		var w FrameWalk
		for i, b := range blocks {
			payload := AppendBlock(nil, encodeRecs(b), CodecNone)
			if err := ForEachFrameRecord("f", BlockVersion, int64(16+1000*i), payload, MaxBlockRecords, &w, func(Record, int64, int) error { return nil }); err != nil {
				return err
			}
		}
		return nil
	}
	require.NoError(t, walk([]rec{rng}, []rec{rng}, []rec{put("a"), put("b")}, []rec{put("c")}))
	requireCorrupt(t, walk([]rec{put("c")}, []rec{put("a")}), "f", 1016, "descending blocks")
	requireCorrupt(t, walk([]rec{put("a"), put("c")}, []rec{put("c")}), "f", 1016, "a key in two blocks")
	requireCorrupt(t, walk([]rec{put("a")}, []rec{rng}), "f", 1016, "ranges after points")
}

func TestHeaderVersioned(t *testing.T) {
	require.Equal(t, Header(), HeaderVersioned(Version))
	for v := uint32(0); v <= 5; v++ {
		h := HeaderVersioned(v)
		require.Len(t, h, HeaderSize)
		require.Equal(t, Magic, string(h[:8]))
		err := CheckHeader("f", h)
		if v >= MinVersion && v <= BlockVersion {
			require.NoError(t, err, "version %d", v)
			require.Equal(t, v, HeaderVersion(h))
		} else {
			requireCorrupt(t, err, "f", 8, "version %d", v)
		}
	}
	requireCorrupt(t, CheckHeader("f", HeaderVersioned(1<<31)), "f", 8)
}

func TestUpgradeHeader(t *testing.T) {
	body := wal.AppendFrame(nil, encodeRecs([]rec{{KindPut, "a", "1"}}), 0)
	cases := []struct {
		version     uint32
		changed     bool
		corrupt     bool
		wantVersion uint32
	}{
		{1, true, false, Version},
		{2, false, false, Version},
		{BlockVersion, false, true, BlockVersion},
		{0, false, true, 0},
		{4, false, true, 4},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.version), func(t *testing.T) {
			fs := vfs.NewMem()
			f, err := fs.Create("d.log")
			require.NoError(t, err)
			defer f.Close()
			content := append(HeaderVersioned(c.version), body...)
			_, err = f.WriteAt(content, 0)
			require.NoError(t, err)

			changed, err := UpgradeHeader(f, "d.log")
			if c.corrupt {
				requireCorrupt(t, err, "d.log", 8)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.changed, changed)

			got := make([]byte, len(content))
			_, err = f.ReadAt(got, 0)
			require.NoError(t, err)
			require.Equal(t, c.wantVersion, binary.LittleEndian.Uint32(got[8:]))
			require.Equal(t, content[12:], got[12:], "only the version changes")
		})
	}
}

type located struct {
	rec
	Off int64
	Len int
}

func TestReplayBlockFile(t *testing.T) {
	// In the order a block file holds them: range tombstones first, then
	// point keys ascending across blocks.
	blocks := [][]rec{
		{{KindRangeDelete, "a", "c"}, {KindRangeDelete, "m", "n"}}, // ranges only
		randomRecs(7, 10),         // raw: incompressible; keys start with 0x00
		compressibleRecs(80),      // S2: keys "key-..."
		{{KindPut, "zz", "last"}}, // raw: tiny
	}
	file := HeaderVersioned(BlockVersion)
	var want []located
	var frames [][2]int64
	for _, b := range blocks {
		payload := AppendBlock(nil, encodeRecs(b), CodecS2)
		off := int64(len(file))
		file = wal.AppendFrame(file, payload, uint64(off))
		frames = append(frames, [2]int64{off, int64(len(file)) - off})
		for _, r := range b {
			want = append(want, located{r, off, len(file) - int(off)})
		}
	}
	require.Equal(t, byte(CodecS2), file[frames[2][0]+wal.HeaderSize])
	require.Equal(t, byte(CodecNone), file[frames[1][0]+wal.HeaderSize])

	fs := vfs.NewMem()
	f, err := fs.Create("3.seg")
	require.NoError(t, err)
	_, err = f.WriteAt(file, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	var got []located
	res, err := Replay(fs, "3.seg", -1, func(r Record, off int64, length int) error {
		got = append(got, located{toRec(r), off, length})
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, len(want), res.Records)
	require.Equal(t, len(blocks), res.Scan.Frames)
	require.Equal(t, int64(len(file)), res.Scan.End)
	require.False(t, res.Scan.Torn)
	require.False(t, res.HasLink)
	require.Equal(t, int64(len(file)), res.FileSize)

	// Each location leads a point read to its record: read the frame,
	// check it, decode the block, find the key.
	f, err = fs.Open("3.seg")
	require.NoError(t, err)
	defer f.Close()
	for _, l := range got {
		if l.Kind == KindRangeDelete {
			continue
		}
		b := make([]byte, l.Len)
		_, err := f.ReadAt(b, l.Off)
		require.NoError(t, err)
		payload, err := wal.CheckFrame(b, "3.seg", l.Off)
		require.NoError(t, err)
		records, _, err := DecodeBlock(nil, payload, MaxBlockRecords, "3.seg", l.Off)
		require.NoError(t, err)
		r, _, found, err := FindInBlock(records, []byte(l.Key), "3.seg", l.Off)
		require.NoError(t, err)
		require.True(t, found, l.Key)
		require.Equal(t, l.rec, toRec(r))
	}

	// Replaying a prefix stops at a frame boundary.
	got = nil
	res, err = ReplayFile(f, "3.seg", frames[1][0], func(r Record, off int64, length int) error {
		got = append(got, located{toRec(r), off, length})
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, want[:len(blocks[0])], got)
	require.Equal(t, 1, res.Scan.Frames)
}

func TestReplayBlockFileCorruption(t *testing.T) {
	good := AppendBlock(nil, encodeRecs(compressibleRecs(20)), CodecS2)
	cases := map[string]struct {
		header  []byte
		payload []byte
	}{
		"link in a block":        {HeaderVersioned(BlockVersion), AppendBlock(nil, append(AppendLink(nil, 1, 100), encodeRecs([]rec{{KindPut, "a", "1"}})...), CodecNone)},
		"mixed block":            {HeaderVersioned(BlockVersion), AppendBlock(nil, encodeRecs([]rec{{KindRangeDelete, "a", "b"}, {KindPut, "c", "1"}}), CodecNone)},
		"unsorted block":         {HeaderVersioned(BlockVersion), AppendBlock(nil, encodeRecs([]rec{{KindPut, "b", "1"}, {KindPut, "a", "1"}}), CodecNone)},
		"unknown codec":          {HeaderVersioned(BlockVersion), append([]byte{7}, good[1:]...)},
		"version 2 with a block": {HeaderVersioned(Version), good},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			file := bytes.Clone(c.header)
			file = wal.AppendFrame(file, AppendBlock(nil, encodeRecs([]rec{{KindPut, "0", "first"}}), CodecNone), 0)
			off := int64(len(file))
			file = wal.AppendFrame(file, c.payload, uint64(off))
			fs := vfs.NewMem()
			f, err := fs.Create("x.seg")
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAt(file, 0)
			require.NoError(t, err)
			_, err = ReplayFile(f, "x.seg", -1, func(Record, int64, int) error { return nil })
			require.ErrorIs(t, err, corruption.ErrCorrupt)
			var ce *corruption.Error
			require.True(t, errors.As(err, &ce))
			require.Equal(t, "x.seg", ce.Path)
			if name != "version 2 with a block" {
				require.Equal(t, off, ce.Offset, "names the block's frame")
			}
		})
	}
}

func TestCodecString(t *testing.T) {
	require.Equal(t, "none", CodecNone.String())
	require.Equal(t, "s2", CodecS2.String())
	require.Equal(t, "codec 7", Codec(7).String())
}

// IndexBlock refuses what a lookup by key cannot trust (every rule
// ForEachBlockRecord enforces but the checksums, which are verified when a
// record is read), and Search then finds every key of a valid block from
// any guess, and no other.
func TestIndexBlock(t *testing.T) {
	put := func(k, v string) rec { return rec{KindPut, k, v} }
	rng := func(s, e string) rec { return rec{KindRangeDelete, s, e} }
	var bi BlockIndex
	for name, records := range map[string][]byte{
		"link":           AppendLink(nil, 7, 1234),
		"range then put": encodeRecs([]rec{rng("a", "c"), put("d", "1")}),
		"put then range": encodeRecs([]rec{put("a", "1"), rng("b", "c")}),
		"keys descend":   encodeRecs([]rec{put("b", "1"), put("a", "2")}),
		"equal keys":     encodeRecs([]rec{put("a", "1"), put("a", "2")}),
		"truncated":      encodeRecs([]rec{put("a", "1"), put("b", "2")})[:20],
		"unknown kind":   append([]byte{9}, encodeRecs([]rec{put("a", "1")})[1:]...),
	} {
		requireCorrupt(t, IndexBlock(&bi, records, "blk", 8), "blk", 8, name)
	}

	rs := []rec{put("", "e"), put("a", "1"), {KindDelete, "b", ""}, put("c", "333"), put("cc", "4")}
	records := encodeRecs(rs)
	require.NoError(t, IndexBlock(&bi, records, "blk", 8))
	require.Equal(t, len(rs), bi.Len())
	for i, r := range rs {
		for _, guess := range []int{-1, 0, i - 1, i, i + 1, len(rs)} {
			j, ok := bi.Search(records, []byte(r.Key), guess)
			require.True(t, ok, "%q guess %d", r.Key, guess)
			require.Equal(t, i, j)
			require.Equal(t, AppendRecord(nil, r.Kind, []byte(r.Key), []byte(r.Value)), bi.Raw(records, j))
		}
	}
	for _, k := range []string{"0", "aa", "bb", "ca", "d", "\xff"} {
		_, ok := bi.Search(records, []byte(k), 1)
		require.False(t, ok, k)
	}
	// A block of range tombstones holds no point record, even for a key
	// that starts a range.
	ranges := encodeRecs([]rec{rng("a", "b"), rng("c", "d")})
	require.NoError(t, IndexBlock(&bi, ranges, "blk", 8))
	_, ok := bi.Search(ranges, []byte("a"), 0)
	require.False(t, ok)
	// Reuse keeps nothing of the previous block.
	require.NoError(t, IndexBlock(&bi, records, "blk", 8))
	require.Equal(t, len(rs), bi.Len())
}

// FindInBlock is the tests' reference lookup, the simplest that can be
// right: a linear walk, against which BlockIndex.Search is checked (the
// fuzz target compares them). It returns the point record (put or delete)
// for key in a decoded
// block whose frame is at off, verified; found is false when the block has
// none. It decodes record headers only until it reaches key (the block's
// point keys ascend), and verifies the record it returns. The record, and
// raw, its whole encoding, alias records.
func FindInBlock(records []byte, key []byte, path string, off int64) (r Record, raw []byte, found bool, err error) {
	for pos := 0; pos < len(records); {
		kind, klen, vlen, hdr, ok := recordHeader(records[pos:])
		if !ok {
			return Record{}, nil, false, corruption.New(path, off, "record %d bytes into the block is malformed", pos)
		}
		n := hdr + klen + vlen + recordTrailer
		switch kind {
		case KindPut, KindDelete, KindRangeDelete:
		default:
			// Skipping it could hide the key's own record behind a damaged
			// kind byte, and a read would go on to older data.
			return Record{}, nil, false, corruption.New(path, off, "record %d bytes into the block has kind %v", pos, kind)
		}
		if kind == KindPut || kind == KindDelete {
			c := bytes.Compare(records[pos+hdr:pos+hdr+klen], key)
			if c == 0 {
				raw = records[pos : pos+n]
				r, _, err := DecodeRecord(raw)
				if err != nil {
					return Record{}, nil, false, corruption.New(path, off, "record %d bytes into the block: %v", pos, err)
				}
				return r, raw, true, nil
			}
			if c > 0 {
				return Record{}, nil, false, nil
			}
		}
		pos += n
	}
	return Record{}, nil, false, nil
}

// TestBlockIndexEntryAndSearch: Entry gives each record's kind and key as
// the block holds them, and Search gives the lower bound of an absent key
// (the first record after it), which a cursor's seek relies on.
func TestBlockIndexEntryAndSearch(t *testing.T) {
	var rs []rec
	for i := 0; i < 40; i += 2 {
		r := rec{KindPut, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)}
		if i%3 == 0 {
			r = rec{KindDelete, r.Key, ""}
		}
		rs = append(rs, r)
	}
	records := encodeRecs(rs)
	var bi BlockIndex
	require.NoError(t, IndexBlock(&bi, records, "blk", 0))
	require.True(t, bi.Points())
	require.Equal(t, len(rs), bi.Len())
	for i, want := range rs {
		kind, key := bi.Entry(records, i)
		require.Equal(t, want.Kind, kind)
		require.Equal(t, want.Key, string(key))
		require.Equal(t, len(key), cap(key), "a key must not expose the bytes after it")
		j, found := bi.Search(records, key, -1)
		require.True(t, found)
		require.Equal(t, i, j)
	}
	for key, want := range map[string]int{"": 0, "k": 0, "k00\x00": 1, "k01": 1, "k37": 19, "k38": 19, "k38\x00": 20, "l": 20} {
		j, _ := bi.Search(records, []byte(key), -1)
		require.Equal(t, want, j, "lower bound of %q", key)
	}
	var ranges BlockIndex
	rangeRecs := encodeRecs([]rec{{KindRangeDelete, "a", "c"}})
	require.NoError(t, IndexBlock(&ranges, rangeRecs, "blk", 0))
	require.False(t, ranges.Points())
}
