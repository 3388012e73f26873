package segment

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/wal"
)

// fuzzBlockLimit is the decode limit FuzzDecodeBlock passes: small, so a
// damaged length cannot make the fuzzer allocate much.
const fuzzBlockLimit = 1 << 16

// blockSeeds returns valid block payloads of both codecs and a few damaged
// ones.
func blockSeeds() [][]byte {
	compressible := encodeRecs(compressibleRecs(40))
	small := encodeRecs([]rec{{KindPut, "a", "1"}, {KindDelete, "b", ""}, {KindPut, "c", "33"}})
	ranges := encodeRecs([]rec{{KindRangeDelete, "a", "c"}, {KindRangeDelete, "c", "e"}})
	s2 := AppendBlock(nil, compressible, CodecS2)
	return [][]byte{
		s2,
		AppendBlock(nil, compressible, CodecNone),
		AppendBlock(nil, small, CodecNone),
		AppendBlock(nil, encodeRecs(randomRecs(3, 4)), CodecS2), // falls back to raw
		AppendBlock(nil, ranges, CodecNone),
		AppendBlock(nil, bytes.Repeat(ranges, 20), CodecS2),
		AppendBlock(nil, AppendLink(nil, 1, 2), CodecNone),
		s2[:len(s2)/2],
		{byte(CodecS2)},
		{byte(CodecNone)},
		{2, 'x'},
		append(binary.AppendUvarint([]byte{byte(CodecS2)}, 1<<30), 0, 'x'),
		{},
	}
}

// FuzzDecodeBlock: arbitrary payloads never panic and every error is
// corruption; when ForEachBlockRecord accepts the block, FindInBlock finds
// exactly the point records it reported, and nothing else.
func FuzzDecodeBlock(f *testing.F) {
	for _, s := range blockSeeds() {
		f.Add(s, []byte("b"))
	}
	f.Add(AppendBlock(nil, encodeRecs(compressibleRecs(40)), CodecS2), []byte("key-000010"))
	f.Add(AppendBlock(nil, encodeRecs(compressibleRecs(40)), CodecS2), []byte("key-000010\x00"))
	f.Fuzz(func(t *testing.T, payload, key []byte) {
		records, _, err := DecodeBlock(nil, payload, fuzzBlockLimit, "blk", 64)
		if err != nil {
			requireCorrupt(t, err, "blk", 64)
			require.Nil(t, records)
			return
		}
		switch Codec(payload[0]) {
		case CodecNone:
			require.Equal(t, payload[1:], records)
		case CodecS2:
			require.NotEmpty(t, records)
			require.LessOrEqual(t, len(records), fuzzBlockLimit)
		default:
			t.Fatalf("codec %d accepted", payload[0])
		}

		frameLen := wal.HeaderSize + len(payload)
		var points []rec
		var all int
		ferr := ForEachBlockRecord("blk", 64, frameLen, records, func(r Record, off int64, length int) error {
			if off != 64 || length != frameLen {
				t.Fatalf("record reported at %d+%d, want 64+%d", off, length, frameLen)
			}
			if r.Kind == KindPut || r.Kind == KindDelete {
				points = append(points, toRec(r))
			}
			all++
			return nil
		})

		// FindInBlock on the key from the fuzzer: never panics, errors are
		// corruption, a record found holds the key and verifies.
		r, raw, found, kerr := FindInBlock(records, key, "blk", 64)
		if kerr != nil {
			requireCorrupt(t, kerr, "blk", 64)
			require.False(t, found)
		} else if found {
			require.Equal(t, string(key), string(r.Key))
			require.Contains(t, []RecordKind{KindPut, KindDelete}, r.Kind)
			d, n, derr := DecodeRecord(raw)
			require.NoError(t, derr)
			require.Equal(t, len(raw), n)
			require.Equal(t, toRec(d), toRec(r))
		}

		var bi BlockIndex
		ierr := IndexBlock(&bi, records, "blk", 64)
		if ierr != nil {
			requireCorrupt(t, ierr, "blk", 64)
		}
		// FindBlockRecord checks the records it walks as IndexBlock does:
		// on a block IndexBlock accepts it finds what Search finds, as the
		// same bytes; on one it refuses, it may stop before the damage, but
		// a record it finds holds the key.
		praw, pfound, perr := FindBlockRecord(records, key, "blk", 64)
		if perr != nil {
			requireCorrupt(t, perr, "blk", 64)
			require.False(t, pfound)
			require.Error(t, ierr, "FindBlockRecord refused a block IndexBlock accepts")
		}
		if ierr != nil {
			if pfound {
				_, k, _, hdr, ok := recordHeader(praw)
				require.True(t, ok)
				require.Equal(t, string(key), string(praw[hdr:hdr+k]))
			}
		} else {
			require.NoError(t, perr)
			j, sok := bi.Search(records, key, -1)
			require.Equal(t, sok, pfound, "FindBlockRecord and Search disagree on %q", key)
			if sok {
				require.Equal(t, bi.Raw(records, j), praw)
			}
		}
		if ferr != nil {
			requireCorrupt(t, ferr, "blk", 64)
			return
		}
		// The block is valid: IndexBlock accepts it (it checks less) and
		// Search finds what the walk reported, from any guess.
		require.NoError(t, ierr)
		require.Equal(t, all, bi.Len())
		for i, p := range points {
			for _, guess := range []int{-1, 0, i, i + 1, bi.Len()} {
				j, ok := bi.Search(records, []byte(p.Key), guess)
				require.True(t, ok, "key %q guess %d", p.Key, guess)
				require.Equal(t, i, j)
				d, _, err := DecodeRecord(bi.Raw(records, j))
				require.NoError(t, err)
				require.Equal(t, p, toRec(d))
			}
		}
		_, sfound := bi.Search(records, key, 0)
		require.Equal(t, found, sfound, "Search and FindInBlock disagree on %q", key)
		// The block is valid: FindInBlock agrees with the walk.
		if all > 0 && len(points) > 0 {
			require.Equal(t, all, len(points), "a block mixing kinds was accepted")
		}
		for i, p := range points {
			if i > 0 && bytes.Compare([]byte(points[i-1].Key), []byte(p.Key)) >= 0 {
				t.Fatalf("keys out of order accepted: %q then %q", points[i-1].Key, p.Key)
			}
			got, raw, found, err := FindInBlock(records, []byte(p.Key), "blk", 64)
			require.NoError(t, err, "key %q", p.Key)
			require.True(t, found, "key %q", p.Key)
			require.Equal(t, p, toRec(got))
			_, n, err := DecodeRecord(raw)
			require.NoError(t, err)
			require.Equal(t, len(raw), n, "raw is the whole record")
		}
		i, inBlock := slices.BinarySearchFunc(points, string(key), func(p rec, k string) int { return bytes.Compare([]byte(p.Key), []byte(k)) })
		require.NoError(t, kerr, "FindInBlock on a valid block")
		require.Equal(t, inBlock, found, "key %q", key)
		if found {
			require.Equal(t, points[i], toRec(r))
		}
	})
}

// fuzzRecs turns fuzz input into a valid block's records: keys and values
// read as (key length, value length, bytes) triples, sorted and made
// distinct. With ranges set it makes range tombstones of consecutive keys
// instead; del marks which point records are deletes.
func fuzzRecs(in []byte, ranges bool, del uint64) []rec {
	byKey := map[string]string{}
	for len(in) >= 2 {
		kl, vl := int(in[0]%32), int(in[1])
		in = in[2:]
		k := string(in[:min(kl, len(in))])
		in = in[min(kl, len(in)):]
		v := string(in[:min(vl, len(in))])
		in = in[min(vl, len(in)):]
		byKey[k] = v
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var rs []rec
	if ranges {
		for i := 0; i+1 < len(keys); i += 2 {
			rs = append(rs, rec{KindRangeDelete, keys[i], keys[i+1]})
		}
		return rs
	}
	for i, k := range keys {
		if del>>(i%64)&1 == 1 {
			rs = append(rs, rec{KindDelete, k, ""})
		} else {
			rs = append(rs, rec{KindPut, k, byKey[k]})
		}
	}
	return rs
}

// FuzzBlockRoundTrip: any valid set of records survives AppendBlock and
// DecodeBlock unchanged, with either codec, and every point record is found.
func FuzzBlockRoundTrip(f *testing.F) {
	f.Add([]byte("\x01\x01a1\x01\x01b2\x01\x00c"), byte(0), uint64(0))
	f.Add([]byte("\x01\x01a1\x01\x01b2\x01\x00c"), byte(1), uint64(2))
	f.Add(bytes.Repeat([]byte("\x04\x20keyXvalue value value value value value value"), 30), byte(1), uint64(0))
	f.Add(bytes.Repeat([]byte("\x04\x20keyXvalue value value value value value value"), 30), byte(3), uint64(0))
	f.Add([]byte("\x00\x05empty\x03\x00abc\x03\x00abd"), byte(2), uint64(1))
	f.Add([]byte{}, byte(1), uint64(0))
	f.Fuzz(func(t *testing.T, in []byte, mode byte, del uint64) {
		codec := Codec(mode & 1)
		rs := fuzzRecs(in, mode&2 != 0, del)
		records := encodeRecs(rs)
		prefix := []byte("pfx")
		out := AppendBlock(bytes.Clone(prefix), records, codec)
		require.Equal(t, prefix, out[:len(prefix)])
		payload := out[len(prefix):]

		switch Codec(payload[0]) {
		case CodecNone:
			require.Equal(t, 1+len(records), len(payload))
		case CodecS2:
			require.Equal(t, CodecS2, codec, "compressed without being asked")
			require.Less(t, len(payload), 1+len(records))
		default:
			t.Fatalf("codec %d written", payload[0])
		}

		got, _, err := DecodeBlock(nil, payload, max(len(records), 1), "blk", 0)
		if len(rs) == 0 {
			// An empty block is never written, and does not decode.
			requireCorrupt(t, err, "blk", 0)
			return
		}
		require.NoError(t, err)
		require.Equal(t, records, got)
		frameLen := wal.HeaderSize + len(payload)
		require.Equal(t, rs, blockRecs(t, got, 0, frameLen))
		for _, r := range rs {
			found, raw, ok, err := FindInBlock(got, []byte(r.Key), "blk", 0)
			require.NoError(t, err)
			if r.Kind == KindRangeDelete {
				require.False(t, ok)
				continue
			}
			require.True(t, ok, "key %q", r.Key)
			require.Equal(t, r, toRec(found))
			require.Equal(t, AppendRecord(nil, r.Kind, []byte(r.Key), []byte(r.Value)), raw)
		}
	})
}

// TestBlockFuzzSeeds: the seeds FuzzDecodeBlock starts from include valid
// blocks of both codecs.
func TestBlockFuzzSeeds(t *testing.T) {
	codecs := map[Codec]bool{}
	for _, s := range blockSeeds() {
		records, _, err := DecodeBlock(nil, s, fuzzBlockLimit, "blk", 0)
		if err != nil {
			require.ErrorIs(t, err, corruption.ErrCorrupt)
			continue
		}
		if ForEachBlockRecord("blk", 0, 1, records, func(Record, int64, int) error { return nil }) == nil {
			codecs[Codec(s[0])] = true
		}
	}
	require.Equal(t, map[Codec]bool{CodecNone: true, CodecS2: true}, codecs)
}
