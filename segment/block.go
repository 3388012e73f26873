package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/wal"
)

// # Block data files (version 3)
//
// A merge writes its output in key order, and a version-3 data file holds
// such output as blocks: each wal frame's payload is one block, a few KiB
// of whole records (the record format above, unchanged) compressed
// together.
//
//	size  field
//	1     codec: 0 stored raw, 1 S2 (github.com/klauspost/compress/s2,
//	      block format, not the stream format)
//	...   body: the records, concatenated (codec 0), or their S2 encoding,
//	      which starts with the records' length as a uvarint (codec 1)
//
// The records of one block are range tombstones only, or point records
// (puts and deletes) only, the latter in strictly ascending key order; a
// block holds no link record, and no more than MaxBlockRecords bytes of
// records. The frame checksum covers the body as stored;
// each record keeps its own checksum, so what a decoder hands back is
// verified record by record as in every other data file. An index entry of
// a version-3 file names the block holding the key (the frame's offset and
// its whole length, header included), not the record.

// BlockVersion is the version of data files whose frames each carry one
// block. Only a merge writes it; live files stay at Version.
const BlockVersion = 3

// Codec is how a block's body is stored.
type Codec uint8

// Codecs.
const (
	// CodecNone stores the records as they are.
	CodecNone Codec = 0
	// CodecS2 stores them S2-compressed (block format).
	CodecS2 Codec = 1
)

// minSaving: a block is stored compressed only when that saves at least
// 1/minSaving of its size (the rule LevelDB and Pebble keep). Below it the
// disk saved is small and every read of the block would pay the decode: a
// point read of a raw block reads its record in place (docs/BENCH.md).
const minSaving = 8

// MaxBlockRecords is the most record bytes one block may decode to, so that
// a damaged length cannot make a reader allocate more: the frame payload
// limit, which no writer's block reaches. A reader of untrusted input (an
// import) passes DecodeBlock a lower limit of its own.
const MaxBlockRecords = wal.MaxPayload

// HeaderVersioned returns the bytes of a data file header of the given
// version (Version or BlockVersion).
func HeaderVersioned(version uint32) []byte {
	h := Header()
	binary.LittleEndian.PutUint32(h[8:], version)
	return h
}

// AppendBlock appends to dst the payload of a block holding records (whole
// encoded records, concatenated), compressed with codec unless that saves
// less than an eighth of its size (minSaving), in which case it is stored
// raw.
func AppendBlock(dst, records []byte, codec Codec) []byte {
	start := len(dst)
	if codec == CodecS2 {
		if need := s2.MaxEncodedLen(len(records)); need > 0 {
			dst = slices.Grow(dst, 1+need)[:start+1+need]
			dst[start] = byte(CodecS2)
			// EncodeBetter writes into dst, which is long enough.
			if enc := s2.EncodeBetter(dst[start+1:], records); len(enc) <= len(records)-len(records)/minSaving {
				return dst[:start+1+len(enc)]
			}
			dst = dst[:start]
		}
	}
	dst = append(dst, byte(CodecNone))
	return append(dst, records...)
}

// DecodeBlock returns the records the block payload holds: a slice of
// payload when stored raw, else decompressed into dst (grown when its
// capacity is short; the grown buffer is returned for reuse). It checks the
// codec and the decoded size only (at most limit bytes); the records are verified by whoever walks
// them (ForEachBlockRecord, IndexBlock and the reads it serves). path and off (the frame's offset)
// name the block in errors, which are *corruption.Error.
func DecodeBlock(dst, payload []byte, limit int, path string, off int64) (records, buf []byte, err error) {
	if len(payload) < 2 {
		return nil, dst, corruption.New(path, off, "block of %d bytes holds no record", len(payload))
	}
	body := payload[1:]
	switch Codec(payload[0]) {
	case CodecNone:
		if len(body) > limit {
			return nil, dst, corruption.New(path, off, "block holds %d bytes of records (limit %d)", len(body), limit)
		}
		return body, dst, nil
	case CodecS2:
		n, err := s2.DecodedLen(body)
		if err != nil {
			return nil, dst, corruption.New(path, off, "block does not decompress: %v", err)
		}
		if n <= 0 || n > limit {
			return nil, dst, corruption.New(path, off, "block decompresses to %d bytes (limit %d)", n, limit)
		}
		if cap(dst) < n {
			dst = make([]byte, n)
		}
		out, err := s2.Decode(dst[:n], body)
		if err != nil {
			return nil, dst, corruption.New(path, off, "block does not decompress: %v", err)
		}
		return out, dst, nil
	}
	return nil, dst, corruption.New(path, off, "unknown block codec %d", payload[0])
}

// blockRules checks, record by record, the rules within one block: no link
// record or unknown kind, range tombstones and point records not mixed,
// point keys strictly ascending. ForEachBlockRecord and IndexBlock both
// walk a block through it.
type blockRules struct {
	prev           []byte
	ranges, points bool
}

func (br *blockRules) check(path string, off int64, pos int, kind RecordKind, key []byte) error {
	switch kind {
	case KindPut, KindDelete:
		if br.points && bytes.Compare(br.prev, key) >= 0 {
			return corruption.New(path, off, "block keys out of order: %q after %q", key, br.prev)
		}
		br.points, br.prev = true, key
	case KindRangeDelete:
		br.ranges = true
	case KindLink:
		return corruption.New(path, off, "link record in a block")
	default:
		return corruption.New(path, off, "record %d bytes into the block has kind %v", pos, kind)
	}
	if br.ranges && br.points {
		return corruption.New(path, off, "block mixes range tombstones and point records")
	}
	return nil
}

// ForEachBlockRecord decodes and verifies every record of a decoded block
// (what DecodeBlock returned for the frame at frameOff) and calls fn for
// each, with the block's location (frameOff and frameLen, the whole frame)
// in place of the record's: that is what an index of a block file records.
// A block that breaks the rules above (a link record, range tombstones mixed
// with point records, point keys not strictly ascending) is corruption.
func ForEachBlockRecord(path string, frameOff int64, frameLen int, records []byte, fn func(r Record, off int64, length int) error) error {
	var rules blockRules
	for pos := 0; pos < len(records); {
		r, n, err := DecodeRecord(records[pos:])
		if err != nil {
			return corruption.New(path, frameOff, "record %d bytes into the block: %v", pos, err)
		}
		if err := rules.check(path, frameOff, pos, r.Kind, r.Key); err != nil {
			return err
		}
		if err := fn(r, frameOff, frameLen); err != nil {
			return err
		}
		pos += n
	}
	return nil
}

// BlockIndex is where each record of a decoded block starts, for lookups by
// key without a walk (Search): made once per decoded block by
// IndexBlock, reused by every read of that block.
type BlockIndex struct {
	offs   []int32 // start of each record; offs[len] == len(records)
	points bool    // the records are point records (else range tombstones)
}

// IndexBlock finds where each record of a decoded block (the frame at off)
// starts, into bi (its buffers reused). It checks what a lookup relies on:
// every record header fits, no record is a link or of an unknown kind,
// range tombstones and point records are not mixed, and point keys
// strictly ascend. Checksums are verified when a record is read.
func IndexBlock(bi *BlockIndex, records []byte, path string, off int64) error {
	bi.offs = bi.offs[:0]
	var rules blockRules
	for pos := 0; pos < len(records); {
		kind, klen, vlen, hdr, ok := recordHeader(records[pos:])
		if !ok {
			return corruption.New(path, off, "record %d bytes into the block is malformed", pos)
		}
		if err := rules.check(path, off, pos, kind, records[pos+hdr:pos+hdr+klen]); err != nil {
			return err
		}
		bi.offs = append(bi.offs, int32(pos))
		pos += hdr + klen + vlen + recordTrailer
	}
	bi.offs = append(bi.offs, int32(len(records)))
	bi.points = rules.points
	return nil
}

// FindBlockRecord finds key's point record in a decoded block (the frame
// at off), for a read of one key: it walks the records from the start,
// checking those it walks as IndexBlock does, and stops at the key's record,
// returning its whole encoding (aliasing records, its checksum not
// verified), or at the first key after it, or at the block's end, with
// found false. It reads half a block on average, where IndexBlock reads it
// all. What it does not walk it does not check: a reader that takes found
// false for absence first checks the whole block (its frame checksum and
// ForEachBlockRecord).
func FindBlockRecord(records, key []byte, path string, off int64) (raw []byte, found bool, err error) {
	var rules blockRules
	for pos := 0; pos < len(records); {
		kind, klen, vlen, hdr, ok := recordHeader(records[pos:])
		if !ok {
			return nil, false, corruption.New(path, off, "record %d bytes into the block is malformed", pos)
		}
		k := records[pos+hdr : pos+hdr+klen]
		if err := rules.check(path, off, pos, kind, k); err != nil {
			return nil, false, err
		}
		end := pos + hdr + klen + vlen + recordTrailer
		if kind == KindPut || kind == KindDelete {
			switch c := bytes.Compare(k, key); {
			case c == 0:
				return records[pos:end:end], true, nil
			case c > 0:
				return nil, false, nil
			}
		}
		pos = end
	}
	return nil, false, nil
}

// Len is the number of records the block holds.
func (bi *BlockIndex) Len() int { return max(len(bi.offs)-1, 0) }

// Raw returns record i's whole encoding, unverified.
func (bi *BlockIndex) Raw(records []byte, i int) []byte {
	return records[bi.offs[i]:bi.offs[i+1]]
}

// key returns record i's key; IndexBlock checked its header.
func (bi *BlockIndex) key(records []byte, i int) []byte {
	_, k := bi.Entry(records, i)
	return k
}

// Entry returns record i's kind and key (aliasing records), unverified:
// IndexBlock checked the header they are read from.
func (bi *BlockIndex) Entry(records []byte, i int) (RecordKind, []byte) {
	kind, klen, _, hdr, _ := recordHeader(records[bi.offs[i]:])
	start := int(bi.offs[i]) + hdr
	return kind, records[start : start+klen : start+klen]
}

// Points reports whether the block holds point records (else range
// tombstones).
func (bi *BlockIndex) Points() bool { return bi.points }

// Search returns the index of key's point record in the block, trying
// guess first (the record after or before the previous one read, in a
// walk), then a binary search. When the block does not hold key, the index
// is that of the first record whose key is after it (Len if none).
func (bi *BlockIndex) Search(records []byte, key []byte, guess int) (int, bool) {
	n := bi.Len()
	if !bi.points || n == 0 {
		return 0, false
	}
	if guess >= 0 && guess < n && bytes.Equal(bi.key(records, guess), key) {
		return guess, true
	}
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bytes.Compare(bi.key(records, mid), key) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < n && bytes.Equal(bi.key(records, lo), key)
}

// recordHeader parses the kind and lengths at the start of b and checks
// that the whole record fits in b, without verifying its checksum.
func recordHeader(b []byte) (kind RecordKind, klen, vlen, hdr int, ok bool) {
	if len(b) < 3+recordTrailer {
		return 0, 0, 0, 0, false
	}
	kind = RecordKind(b[0])
	k, m := binary.Uvarint(b[1:])
	if m <= 0 {
		return 0, 0, 0, 0, false
	}
	v, m2 := binary.Uvarint(b[1+m:])
	if m2 <= 0 {
		return 0, 0, 0, 0, false
	}
	hdr = 1 + m + m2
	rest := uint64(len(b) - hdr)
	if k > rest || v > rest-k || rest-k-v < recordTrailer {
		return 0, 0, 0, 0, false
	}
	return kind, int(k), int(v), hdr, true
}

// FrameWalk is what a walk over the frames of one data file, in file order,
// carries from frame to frame (ForEachFrameRecord): the buffer blocks
// decode into, and what the rules that span blocks need. The zero value
// starts a walk; a walk over another file needs a new one (or Reset).
type FrameWalk struct {
	scratch []byte
	lastKey []byte // the last point key of the blocks walked so far
	points  bool   // a block of point records was walked
}

// Reset starts a new walk, keeping the buffers.
func (w *FrameWalk) Reset() {
	w.lastKey, w.points = w.lastKey[:0], false
}

// ForEachFrameRecord decodes every record of the frame at frameOff whose
// payload is given, the next frame of the walk w, in a data file of the
// given version: the records themselves (ForEachRecord) in versions 1 and
// 2, the records of its block (DecodeBlock, ForEachBlockRecord) in version
// 3, at most limit bytes of them. Each record is checked against what its
// file's version may hold; in a block file, also against the blocks before
// it: point keys ascend from block to block, and no range tombstone comes
// after a point record.
func ForEachFrameRecord(path string, version uint32, frameOff int64, payload []byte, limit int, w *FrameWalk, fn func(r Record, off int64, length int) error) error {
	if version < BlockVersion {
		return ForEachRecord(path, frameOff, payload, func(r Record, off int64, length int) error {
			if err := CheckKind(path, version, off, r.Kind); err != nil {
				return err
			}
			return fn(r, off, length)
		})
	}
	records, buf, err := DecodeBlock(w.scratch, payload, limit, path, frameOff)
	w.scratch = buf
	if err != nil {
		return err
	}
	first := true
	return ForEachBlockRecord(path, frameOff, wal.HeaderSize+len(payload), records, func(r Record, off int64, length int) error {
		if first {
			// Within the block, ForEachBlockRecord checks the order.
			first = false
			switch {
			case r.Kind == KindRangeDelete && w.points:
				return corruption.New(path, frameOff, "block of range tombstones after blocks of point records")
			case r.Kind != KindRangeDelete && w.points && bytes.Compare(w.lastKey, r.Key) >= 0:
				return corruption.New(path, frameOff, "block starts at key %q, not after the previous block's last key %q", r.Key, w.lastKey)
			}
		}
		if r.Kind != KindRangeDelete {
			w.points, w.lastKey = true, append(w.lastKey[:0], r.Key...)
		}
		return fn(r, off, length)
	})
}

// String names the codec.
func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	}
	return fmt.Sprintf("codec %d", uint8(c))
}
