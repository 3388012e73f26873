package index

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/rangedel"
)

// Versions 1 and 2 of the index format (docs/parts/index.md keeps their
// layout) are no longer read: Decode refuses them like any other index it
// cannot use, and the store rebuilds the index from its data file. What
// stays is their encoder, for one purpose: a manifest written before
// version 3 recorded, as each segment's index checksum, the checksum of
// that segment's version 1 or 2 file. LegacyChecksum recomputes it from
// the entries rebuilt out of the data file, so that such a segment's new
// version 3 index can still be tied to the manifest (EncodeUpgrade).

// Legacy format constants (versions 1 and 2).
const (
	legacyVersionRanges    uint32 = 2
	legacyVersionNoRanges  uint32 = 1
	legacyHeaderSize              = 64
	legacyTrailerSize             = 8
	legacyRangeTrailerSize        = 8
	legacyOffVersion              = 8
	legacyOffFlags                = 12
	legacyOffCount                = 16
	legacyOffDataLen              = 24
	legacyOffDigest               = 32
	legacyOffRecLen               = 40
	legacyOffBloomM               = 48
	legacyOffBloomK               = 56
	legacyOffPrefix               = 60
)

// LegacyChecksum returns the checksum the version 1 or 2 index of entries,
// ranges and id had: the value a manifest written before version 3
// recorded for the segment.
func LegacyChecksum(entries []Entry, ranges *rangedel.Set, id Identity) (uint64, error) {
	_, sum, err := encodeLegacy(entries, ranges, id)
	return sum, err
}

// encodeLegacy is the version 1 and 2 encoder, unchanged: version 1 for a
// segment without range tombstones, version 2 (a range section before the
// trailer) for one with them.
func encodeLegacy(entries []Entry, ranges *rangedel.Set, id Identity) (data []byte, checksum uint64, err error) {
	recLen, err := validateEntries(entries, id)
	if err != nil {
		return nil, 0, err
	}
	n := len(entries)
	m, k, words, prefixLen, err := bloomAndPrefix(entries)
	if err != nil {
		return nil, 0, err
	}
	w := uint64(len(words))
	wordsStart := legacyHeaderSize + 8*w
	offsStart := wordsStart + 8*uint64(n)
	recStart := offsStart + 4*uint64(n+1)
	version, rangeSection := legacyVersionNoRanges, []byte(nil)
	if ranges.Len() > 0 {
		version, rangeSection = legacyVersionRanges, appendRanges(nil, ranges)
	}
	rangeLen := uint64(len(rangeSection))
	if version >= 2 {
		rangeLen += legacyRangeTrailerSize
	}
	total := recStart + recLen + rangeLen + legacyTrailerSize
	if total > math.MaxInt {
		return nil, 0, fmt.Errorf("%w: index of %d bytes is too large", ErrInvalidEntries, total)
	}
	buf := make([]byte, total)

	le := binary.LittleEndian
	copy(buf[0:], Magic)
	le.PutUint32(buf[legacyOffVersion:], version)
	le.PutUint32(buf[legacyOffFlags:], 0)
	le.PutUint64(buf[legacyOffCount:], uint64(n))
	le.PutUint64(buf[legacyOffDataLen:], uint64(id.DataLength))
	le.PutUint64(buf[legacyOffDigest:], id.DataDigest)
	le.PutUint64(buf[legacyOffRecLen:], recLen)
	le.PutUint64(buf[legacyOffBloomM:], m)
	le.PutUint32(buf[legacyOffBloomK:], uint32(k))
	le.PutUint32(buf[legacyOffPrefix:], uint32(prefixLen))
	for i := uint64(0); i < w; i++ {
		le.PutUint64(buf[legacyHeaderSize+8*i:], words[i])
	}

	offs := buf[offsStart:recStart]
	recs := buf[recStart : recStart+recLen]
	pos := uint32(0)
	for i, e := range entries {
		binary.BigEndian.PutUint64(buf[wordsStart+8*uint64(i):], searchWord(e.Key[prefixLen:]))
		le.PutUint32(offs[4*i:], pos)
		r := recs[pos:]
		r[0] = byte(e.Kind)
		le.PutUint64(r[1:], uint64(e.Offset))
		le.PutUint32(r[9:], e.Length)
		copy(r[recordMeta:], e.Key)
		pos += recordMeta + uint32(len(e.Key))
	}
	le.PutUint32(offs[4*n:], pos)
	if version >= 2 {
		copy(buf[recStart+recLen:], rangeSection)
		le.PutUint64(buf[total-legacyTrailerSize-legacyRangeTrailerSize:], uint64(len(rangeSection)))
	}

	body := buf[:total-legacyTrailerSize]
	sum := xxhash.Sum64(body)
	le.PutUint64(buf[total-legacyTrailerSize:], sum)
	return buf, sum, nil
}
