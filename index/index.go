// Package index implements the per-segment index file of segkv: the sorted
// keys of one sealed data file with each key's newest record (kind, offset,
// length), plus a bloom filter so that a point read of a missing key costs no
// disk read.
//
// The index is a CACHE of information the data file already carries. It is
// never fsynced. The manifest (the trusted commit point) records the index's
// body checksum and the identity of the data file it describes; Decode
// verifies both, and the caller rebuilds the index from the data file when
// the file is missing, torn, stale or corrupt. A bad index is therefore
// always refused, never believed: Decode returns a *corruption.Error and
// never panics on any input.
//
// # File format, versions 1 and 2
//
// Version 2 is version 1 plus a range section before the trailer (the union
// of the segment's range tombstones, see appendRanges) and its u64 length
// right before the checksum; Encode writes version 1 for a segment without
// range tombstones. The layout below is version 1's.
//
// All integers are little endian except the search words. Offsets are from
// the start of the file.
//
//	offset        size      field
//	0             8         magic "segkvidx"
//	8             4         format version, u32 = 1 (any other value is refused)
//	12            4         flags, u32, must be 0 (reserved)
//	16            8         n: entry count, u64
//	24            8         identity: data length of the indexed data file, i64
//	32            8         identity: data digest of the indexed data file, u64
//	40            8         R: length of the record area in bytes, u64 (< 2^32)
//	48            8         m: bloom filter size in bits, u64 (>= 1)
//	56            4         k: bloom filter hash count, u32 (1..64)
//	60            4         P: length of the prefix common to all keys, u32
//	64            8*W       bloom words, W = ceil(m/64) u64 words
//	S=64+8W       8*n       search words: word i = key i's bytes [P, P+8),
//	                        zero-padded, as a big-endian u64
//	S+8n          4*(n+1)   record offsets, u32, relative to the record area
//	S+8n+4(n+1)   R         record area: n records, back to back
//	end-8         8         checksum: xxhash64 of every byte before it
//
// Record i occupies [off[i], off[i+1]) of the record area:
//
//	0   1   kind: 1 = put, 2 = delete (tombstone)
//	1   8   offset of the record in the data file, i64 (>= 0)
//	9   4   length of the record in the data file, u32
//	13  ... key bytes; key length = off[i+1] - off[i] - 13 (0 allowed)
//
// P is the length of the longest common prefix of the first and last key
// (hence of all keys), 0 for an empty index. Because every key starts with
// the same P bytes, search words are ordered like the keys they come from
// (equal words mean "look at the whole key").
//
// Invariants a valid file satisfies. Decode checks, in one pass with no
// per-key allocation: the file length is exactly 64 + 8W + 8n + 4(n+1) + R +
// 8; off[0] = 0, off[n] = R, off[i+1] - off[i] >= 13; kind is 1 or 2; offset +
// length <= data length; P <= length of key 0 (P = 0 when n = 0). The
// checksum guards the rest, which Verify checks at a hash per key: keys are
// strictly increasing under bytes.Compare, P and the search words are as
// defined above, and the bloom filter is exactly the one Encode builds.
//
// Why this layout: Decode is a checksum pass and a bounds pass over one
// []byte; lookups read straight out of it, so loading a 1M-key index builds
// no per-key Go objects. A binary search runs over the dense search-word
// array (one cache line holds 8 words) and touches a record only when words
// tie and at the end, instead of chasing an offset and then a key (two
// dependent cache misses) at every step; on 1M 32-byte keys that made Search
// 1.5-3x faster, and the in-memory fences Decode derives (see fenceStride)
// another ~2.5x. The bloom and search words start 8-byte aligned. Key
// lengths are implied by the offsets, so any key length is representable as
// long as the record area stays below 4 GiB (Encode refuses larger).
//
// Encoding is deterministic: the same entries and identity give the same
// bytes, hence the same checksum. The store relies on this: it compares the
// checksum of an index rebuilt from the data file with the one the manifest
// recorded at seal.
//
// The bloom filter is github.com/bits-and-blooms/bloom/v3 built with
// NewWithEstimates(max(n, 1), 0.01) (about 1% false positives); its words are
// stored directly, so a reader with the same library tests the same bits.
//
// Version policy: any change that would make a version-1 reader misread a
// file (field meaning, checksum, bloom hashing or sizing, search words) must
// bump the version; readers refuse versions they do not know. An index of an
// unknown version is rebuilt like any other refused index.
//
// docs/parts/index.md describes the same format for FORMAT.md.
package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/vfs"
)

// Record kinds, the same values as the data file's record kinds.
const (
	KindPut    uint8 = 1
	KindDelete uint8 = 2
)

// Format constants. They are part of the on-disk format: see the package
// comment before changing any of them.
const (
	// Magic identifies an index file.
	Magic = "segkvidx"
	// Version is the newest format version this package writes and reads.
	// Encode writes version 1 for a segment without range tombstones (so
	// indexes of such segments keep the bytes, and the checksums, they had
	// before version 2) and version 2 for one with them.
	Version uint32 = 2
	// versionNoRanges is the format of an index without range tombstones.
	versionNoRanges uint32 = 1

	headerSize  = 64
	trailerSize = 8
	// recordMeta is the fixed part of a record: kind, offset, length.
	recordMeta = 1 + 8 + 4
	// maxBloomK bounds the hash count a reader accepts, so that a damaged
	// header cannot make every lookup arbitrarily slow. NewWithEstimates at
	// 1% gives 7.
	maxBloomK = 64
	// falsePositiveRate is the bloom filter's target false-positive rate.
	falsePositiveRate = 0.01
	// fenceStride is the number of search words per fence: Decode samples
	// every fenceStride-th word into a small array (8 bytes per 64 keys) that
	// stays in cache, so a lookup binary-searches it first and then a single
	// 512-byte run of words instead of ~20 levels of mostly cold words.
	fenceStride = 64
)

// Header field offsets, named so that errors can point at the field.
const (
	offMagic   = 0
	offVersion = 8
	offFlags   = 12
	offCount   = 16
	offDataLen = 24
	offDigest  = 32
	offRecLen  = 40
	offBloomM  = 48
	offBloomK  = 56
	offPrefix  = 60
)

// ErrInvalidEntries is matched (errors.Is) by every error Encode returns for
// entries it cannot index: unsorted or duplicate keys, an unknown kind, a
// record outside the data file, or an index too large for the format.
var ErrInvalidEntries = errors.New("index: invalid entries")

// Entry is one key of a segment and the location of its newest record.
type Entry struct {
	Key    []byte
	Kind   uint8  // KindPut or KindDelete
	Offset int64  // offset of the record in the data file
	Length uint32 // length of the record in the data file
}

// Identity names the data file an index was built for. An index whose
// identity differs from the one the caller expects is stale (another
// segment's, or an older content of this one) and is refused.
type Identity struct {
	DataLength int64
	DataDigest uint64
}

// Index is a decoded, verified index. It aliases the bytes it was decoded
// from; the caller must not modify them afterwards. An Index is immutable and
// safe for concurrent use.
type Index struct {
	data     []byte // the whole file
	n        int
	prefix   []byte   // the P bytes every key starts with
	words    []byte   // n big-endian u64 search words
	fences   []uint64 // words[0], words[fenceStride], ...: derived at Decode
	offs     []byte   // (n+1) u32 record offsets
	recs     []byte   // record area
	filter   *bloom.BloomFilter
	checksum uint64
	id       Identity
	ranges   *rangedel.Set // the segment's range tombstones (nil: none)
	// inKeyOrder: the records the entries point at lie in the data file in
	// key order (derived at Decode).
	inKeyOrder bool
}

// Encode builds the index file bytes for entries, which must be sorted by key
// (bytes.Compare) with no duplicates, and returns its checksum: the value the
// manifest records. Every entry must have a known kind and lie inside the
// data file described by id.
func Encode(entries []Entry, id Identity) (data []byte, checksum uint64, err error) {
	return EncodeWithRanges(entries, nil, id)
}

// EncodeWithRanges is Encode for a segment that also holds range
// tombstones: ranges is their union. The entries are the keys that survive
// them, each newer than any of the segment's range tombstones covering it.
func EncodeWithRanges(entries []Entry, ranges *rangedel.Set, id Identity) (data []byte, checksum uint64, err error) {
	if id.DataLength < 0 {
		return nil, 0, fmt.Errorf("%w: negative data length %d", ErrInvalidEntries, id.DataLength)
	}
	recLen := uint64(0)
	for i, e := range entries {
		if i > 0 && bytes.Compare(entries[i-1].Key, e.Key) >= 0 {
			return nil, 0, fmt.Errorf("%w: entry %d (key %q) is not after entry %d (key %q)",
				ErrInvalidEntries, i, truncKey(e.Key), i-1, truncKey(entries[i-1].Key))
		}
		if e.Kind != KindPut && e.Kind != KindDelete {
			return nil, 0, fmt.Errorf("%w: entry %d (key %q) has unknown kind %d", ErrInvalidEntries, i, truncKey(e.Key), e.Kind)
		}
		if e.Offset < 0 || e.Offset > id.DataLength-int64(e.Length) {
			return nil, 0, fmt.Errorf("%w: entry %d (key %q): record [%d, +%d) is outside the data file of length %d",
				ErrInvalidEntries, i, truncKey(e.Key), e.Offset, e.Length, id.DataLength)
		}
		recLen += recordMeta + uint64(len(e.Key))
		if recLen > math.MaxUint32 {
			return nil, 0, fmt.Errorf("%w: record area exceeds 4 GiB at entry %d", ErrInvalidEntries, i)
		}
	}

	n := len(entries)
	filter := bloom.NewWithEstimates(uint(max(n, 1)), falsePositiveRate)
	for _, e := range entries {
		filter.Add(e.Key)
	}
	m := uint64(filter.Cap())
	k := uint64(filter.K())
	words := filter.BitSet().Words()
	w := wordsFor(m)
	if uint64(len(words)) < w || k > maxBloomK {
		// Cannot happen with the library's estimates; refuse rather than
		// write a file this package would not read back.
		return nil, 0, fmt.Errorf("index: bloom filter with m=%d k=%d and %d words is not encodable", m, k, len(words))
	}

	prefixLen := 0
	if n > 0 {
		prefixLen = commonPrefix(entries[0].Key, entries[n-1].Key)
	}
	wordsStart := headerSize + 8*w
	offsStart := wordsStart + 8*uint64(n)
	recStart := offsStart + 4*uint64(n+1)
	version, rangeSection := versionNoRanges, []byte(nil)
	if ranges.Len() > 0 {
		version, rangeSection = Version, appendRanges(nil, ranges)
	}
	rangeLen := uint64(len(rangeSection))
	if version >= 2 {
		rangeLen += rangeTrailerSize
	}
	total := recStart + recLen + rangeLen + trailerSize
	if total > math.MaxInt {
		return nil, 0, fmt.Errorf("%w: index of %d bytes is too large", ErrInvalidEntries, total)
	}
	buf := make([]byte, total)

	le := binary.LittleEndian
	copy(buf[offMagic:], Magic)
	le.PutUint32(buf[offVersion:], version)
	le.PutUint32(buf[offFlags:], 0)
	le.PutUint64(buf[offCount:], uint64(n))
	le.PutUint64(buf[offDataLen:], uint64(id.DataLength))
	le.PutUint64(buf[offDigest:], id.DataDigest)
	le.PutUint64(buf[offRecLen:], recLen)
	le.PutUint64(buf[offBloomM:], m)
	le.PutUint32(buf[offBloomK:], uint32(k))
	le.PutUint32(buf[offPrefix:], uint32(prefixLen))
	for i := uint64(0); i < w; i++ {
		le.PutUint64(buf[headerSize+8*i:], words[i])
	}

	offs := buf[offsStart:recStart]
	recs := buf[recStart : recStart+recLen]
	pos := uint32(0)
	for i, e := range entries {
		binary.BigEndian.PutUint64(buf[wordsStart+8*uint64(i):], searchWord(e.Key[prefixLen:]))
		le.PutUint32(offs[4*i:], pos)
		r := recs[pos:]
		r[0] = e.Kind
		le.PutUint64(r[1:], uint64(e.Offset))
		le.PutUint32(r[9:], e.Length)
		copy(r[recordMeta:], e.Key)
		pos += recordMeta + uint32(len(e.Key))
	}
	le.PutUint32(offs[4*n:], pos)
	if version >= 2 {
		copy(buf[recStart+recLen:], rangeSection)
		le.PutUint64(buf[total-trailerSize-rangeTrailerSize:], uint64(len(rangeSection)))
	}

	body := buf[:total-trailerSize]
	sum := xxhash.Sum64(body)
	le.PutUint64(buf[total-trailerSize:], sum)
	return buf, sum, nil
}

// Decode verifies data against wantChecksum (the checksum the manifest
// recorded) and id (the data file the caller expects) and returns a ready
// index that aliases data. Any truncation, bad magic, unknown version,
// checksum mismatch, identity mismatch or inconsistent internal offset is a
// *corruption.Error naming path and the offending offset. Decode never
// panics.
//
// Cost: one xxhash pass over data, one pass over the offset array and record
// headers, a copy of the bloom filter's words (about 1.2 bytes per key) and
// one sampled search word per 64 keys; no per-key allocation.
func Decode(path string, data []byte, wantChecksum uint64, id Identity) (*Index, error) {
	le := binary.LittleEndian
	size := uint64(len(data))
	if size < headerSize+trailerSize {
		return nil, corruption.New(path, int64(size), "index truncated: %d bytes, a header and trailer need %d", size, headerSize+trailerSize)
	}
	if string(data[offMagic:offMagic+len(Magic)]) != Magic {
		return nil, corruption.New(path, offMagic, "bad index magic %q", data[offMagic:offMagic+len(Magic)])
	}
	version := le.Uint32(data[offVersion:])
	if version != versionNoRanges && version != Version {
		return nil, corruption.New(path, offVersion, "unknown index format version %d (this build reads %d and %d)", version, versionNoRanges, Version)
	}
	// The file's own checksum first: it tells a torn or damaged file from an
	// intact one built for something else, which the next checks report.
	body := data[:size-trailerSize]
	stored := le.Uint64(data[size-trailerSize:])
	sum := xxhash.Sum64(body)
	if sum != stored {
		return nil, corruption.New(path, int64(size-trailerSize),
			"index checksum mismatch: stored %016x, computed %016x over %d bytes (torn or damaged)", stored, sum, len(body))
	}
	got := Identity{DataLength: int64(le.Uint64(data[offDataLen:])), DataDigest: le.Uint64(data[offDigest:])}
	if got != id {
		return nil, corruption.New(path, offDataLen,
			"stale index: built for data length %d digest %016x, expected length %d digest %016x",
			got.DataLength, got.DataDigest, id.DataLength, id.DataDigest)
	}
	if id.DataLength < 0 {
		// Also keeps the per-record bound check below free of overflow.
		return nil, corruption.New(path, offDataLen, "negative data length %d", id.DataLength)
	}
	if sum != wantChecksum {
		return nil, corruption.New(path, int64(size-trailerSize),
			"index checksum %016x differs from the recorded %016x (stale index)", sum, wantChecksum)
	}
	if f := le.Uint32(data[offFlags:]); f != 0 {
		return nil, corruption.New(path, offFlags, "unknown index flags %#x", f)
	}

	// Sizes. Each is bounded by the file size before any multiplication, so
	// nothing below can overflow.
	n := le.Uint64(data[offCount:])
	recLen := le.Uint64(data[offRecLen:])
	m := le.Uint64(data[offBloomM:])
	k := le.Uint32(data[offBloomK:])
	if m == 0 || m/64 > size {
		return nil, corruption.New(path, offBloomM, "bloom filter size %d bits does not fit a %d-byte index", m, size)
	}
	if k == 0 || k > maxBloomK {
		return nil, corruption.New(path, offBloomK, "bloom filter hash count %d out of range 1..%d", k, maxBloomK)
	}
	if n > size/4 {
		return nil, corruption.New(path, offCount, "entry count %d does not fit a %d-byte index", n, size)
	}
	if recLen > math.MaxUint32 || recLen > size {
		return nil, corruption.New(path, offRecLen, "record area length %d does not fit a %d-byte index", recLen, size)
	}
	var rangeLen uint64 // the range section and its length field
	if version >= 2 {
		if size < headerSize+rangeTrailerSize+trailerSize {
			return nil, corruption.New(path, int64(size), "version %d index of %d bytes has no room for its range section length", version, size)
		}
		q := le.Uint64(data[size-trailerSize-rangeTrailerSize:])
		if q > size {
			return nil, corruption.New(path, int64(size-trailerSize-rangeTrailerSize), "range section length %d does not fit a %d-byte index", q, size)
		}
		rangeLen = q + rangeTrailerSize
	}
	w := wordsFor(m)
	wordsStart := headerSize + 8*w
	offsStart := wordsStart + 8*n
	recStart := offsStart + 4*(n+1)
	want := recStart + recLen + rangeLen + trailerSize
	if want != size {
		return nil, corruption.New(path, offCount,
			"index is %d bytes, its header (n=%d, records=%d, bloom=%d bits) implies %d", size, n, recLen, m, want)
	}
	offs := data[offsStart:recStart]
	recs := data[recStart : recStart+recLen]

	// One pass over the offsets and record headers: afterwards every At and
	// Get is in bounds and returns a well-formed entry.
	if first := le.Uint32(offs); first != 0 {
		return nil, corruption.New(path, int64(offsStart), "first record offset is %d, not 0", first)
	}
	prev := uint64(0)
	inKeyOrder, lastOff := true, int64(-1)
	for i := uint64(0); i < n; i++ {
		next := uint64(le.Uint32(offs[4*(i+1):]))
		if next < prev+recordMeta || next > recLen {
			return nil, corruption.New(path, int64(offsStart+4*(i+1)),
				"record %d spans [%d, %d) of a %d-byte record area", i, prev, next, recLen)
		}
		r := recs[prev:next]
		if r[0] != KindPut && r[0] != KindDelete {
			return nil, corruption.New(path, int64(recStart+prev), "record %d has unknown kind %d", i, r[0])
		}
		off := int64(le.Uint64(r[1:]))
		length := int64(le.Uint32(r[9:]))
		if off < 0 || off > id.DataLength-length {
			return nil, corruption.New(path, int64(recStart+prev+1),
				"record %d points at [%d, +%d), outside the data file of length %d", i, off, length, id.DataLength)
		}
		if off <= lastOff {
			inKeyOrder = false
		}
		lastOff = off
		prev = next
	}
	if prev != recLen {
		return nil, corruption.New(path, int64(offsStart+4*n), "last record ends at %d, the record area is %d bytes", prev, recLen)
	}
	// Search slices the common prefix out of key 0 and nothing else, so
	// bounding P by that key is all memory safety needs.
	prefixLen := uint64(le.Uint32(data[offPrefix:]))
	var prefix []byte
	if n == 0 {
		if prefixLen != 0 {
			return nil, corruption.New(path, offPrefix, "empty index with a common key prefix of %d bytes", prefixLen)
		}
	} else {
		key0 := recs[recordMeta:le.Uint32(offs[4:])]
		if prefixLen > uint64(len(key0)) {
			return nil, corruption.New(path, offPrefix, "common key prefix of %d bytes is longer than the first key (%d)", prefixLen, len(key0))
		}
		prefix = key0[:prefixLen:prefixLen]
	}

	// Copied rather than aliased: a []byte cannot be viewed as []uint64
	// portably (alignment, endianness), and the copy is small (m/8 bytes).
	words := make([]uint64, w)
	for i := range words {
		words[i] = le.Uint64(data[headerSize+8*i:])
	}
	searchWords := data[wordsStart:offsStart]
	fences := make([]uint64, (n+fenceStride-1)/fenceStride)
	for i := range fences {
		fences[i] = binary.BigEndian.Uint64(searchWords[8*fenceStride*i:])
	}
	var ranges *rangedel.Set
	if version >= 2 {
		section := data[recStart+recLen : recStart+recLen+rangeLen-rangeTrailerSize]
		var err error
		if ranges, err = decodeRanges(section); err != nil {
			return nil, corruption.New(path, int64(recStart+recLen), "range section: %v", err)
		}
		if ranges.Len() == 0 {
			// Encode writes version 1 when there are no ranges; a version 2
			// file without any is not one it made.
			return nil, corruption.New(path, int64(recStart+recLen), "version %d index with an empty range section", version)
		}
	}
	return &Index{
		inKeyOrder: inKeyOrder,
		ranges:     ranges,
		data:       data,
		n:          int(n),
		prefix:     prefix,
		words:      searchWords,
		fences:     fences,
		offs:       offs,
		recs:       recs,
		filter:     bloom.FromWithM(words, uint(m), uint(k)),
		checksum:   sum,
		id:         id,
	}, nil
}

// Load reads path from fsys and decodes it (see Decode). A missing file is an
// error matching fs.ErrNotExist; a short read is corruption (a torn file).
func Load(fsys vfs.FS, path string, wantChecksum uint64, id Identity) (*Index, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	defer f.Close() // read-only: a close error cannot lose data
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("index: size of %s: %w", path, err)
	}
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, corruption.New(path, -1, "index file size %d is not readable", size)
	}
	data := make([]byte, size)
	n, err := f.ReadAt(data, 0)
	if n < len(data) {
		if err == nil || errors.Is(err, io.EOF) {
			// The file shrank under us; treat it like a torn file.
			return nil, corruption.New(path, int64(n), "index read %d of %d bytes", n, size)
		}
		return nil, fmt.Errorf("index: read %s: %w", path, err)
	}
	return Decode(path, data, wantChecksum, id)
}

// Write writes data to path: create (truncating any old file), one WriteAt,
// Close. It deliberately does not sync: the index is a cache that Decode
// verifies against the manifest and the caller rebuilds when it is missing
// or torn, so a barrier here would buy nothing.
func Write(fsys vfs.FS, path string, data []byte) error {
	f, err := fsys.Create(path)
	if err != nil {
		return fmt.Errorf("index: create %s: %w", path, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		_ = f.Close() // the write error is the one worth reporting
		return fmt.Errorf("index: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("index: close %s: %w", path, err)
	}
	return nil
}

// Len returns the number of entries.
func (ix *Index) Len() int { return ix.n }

// InKeyOrder reports whether the entries' records lie in the data file in
// key order, as in a merge's output or a live file written in key order (a
// log of sequential keys): then a range scan reads the file sequentially.
func (ix *Index) InKeyOrder() bool { return ix.inKeyOrder }

// Ranges returns the union of the segment's range tombstones (nil: none).
// They delete keys in older segments; the segment's own entries are newer
// than any of them.
func (ix *Index) Ranges() *rangedel.Set { return ix.ranges }

// rangeTrailerSize is the size of the range section's length field.
const rangeTrailerSize = 8

// appendRanges encodes the range section: the span count, u32, then each
// span as a u32 start length, the start, a u32 end length and the end.
func appendRanges(dst []byte, ranges *rangedel.Set) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint32(dst, uint32(ranges.Len()))
	for _, sp := range ranges.Spans() {
		dst = le.AppendUint32(dst, uint32(len(sp.Start)))
		dst = append(dst, sp.Start...)
		dst = le.AppendUint32(dst, uint32(len(sp.End)))
		dst = append(dst, sp.End...)
	}
	return dst
}

// decodeRanges decodes a range section; the spans alias b.
func decodeRanges(b []byte) (*rangedel.Set, error) {
	le := binary.LittleEndian
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes cannot hold a span count", len(b))
	}
	count := uint64(le.Uint32(b))
	b = b[4:]
	if count > uint64(len(b))/8 {
		return nil, fmt.Errorf("%d spans do not fit %d bytes", count, len(b))
	}
	spans := make([]rangedel.Span, count)
	field := func() ([]byte, error) {
		if len(b) < 4 {
			return nil, errors.New("section ends inside a span")
		}
		l := uint64(le.Uint32(b))
		if l > uint64(len(b)-4) {
			return nil, fmt.Errorf("key of %d bytes overruns the section", l)
		}
		k := b[4 : 4+l : 4+l]
		b = b[4+l:]
		return k, nil
	}
	for i := range spans {
		var err error
		if spans[i].Start, err = field(); err != nil {
			return nil, err
		}
		if spans[i].End, err = field(); err != nil {
			return nil, err
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last span", len(b))
	}
	return rangedel.FromCanonical(spans)
}

// Checksum returns the index's body checksum (the value the manifest records).
func (ix *Index) Checksum() uint64 { return ix.checksum }

// Identity returns the identity of the data file the index describes.
func (ix *Index) Identity() Identity { return ix.id }

// Bytes returns the encoded file the index aliases. The caller must not
// modify it.
func (ix *Index) Bytes() []byte { return ix.data }

// SizeBytes returns the memory the index holds: the encoded file plus the
// decoded bloom filter words and the fences.
func (ix *Index) SizeBytes() int {
	return len(ix.data) + 8*len(ix.filter.BitSet().Words()) + 8*len(ix.fences)
}

// MayContain reports whether key may be in the index. False is definite;
// true is wrong for about 1% of absent keys.
func (ix *Index) MayContain(key []byte) bool {
	return ix.n > 0 && ix.filter.Test(key)
}

// Get returns the entry for key. A missing key almost always costs one bloom
// test; a present one a bloom test and a binary search. It does not allocate.
// The returned Entry.Key aliases the index.
func (ix *Index) Get(key []byte) (Entry, bool) {
	if !ix.MayContain(key) {
		return Entry{}, false
	}
	i := ix.Search(key)
	if i < ix.n && bytes.Equal(ix.key(i), key) {
		return ix.At(i), true
	}
	return Entry{}, false
}

// Search returns the first position i in [0, Len()] whose key is >= key
// (Len() if none): the starting point of an iterator or range scan.
func (ix *Index) Search(key []byte) int {
	if ix.n == 0 {
		return 0
	}
	// Every key starts with ix.prefix: a probe that does not is before or
	// after all of them.
	p := ix.prefix
	if len(key) < len(p) {
		// A proper prefix of p (or equal to one) sorts before every key.
		if bytes.Compare(key, p[:len(key)]) <= 0 {
			return 0
		}
		return ix.n
	}
	if c := bytes.Compare(key[:len(p)], p); c != 0 {
		if c < 0 {
			return 0
		}
		return ix.n
	}
	w := searchWord(key[len(p):])

	// First L, the first position whose word is >= w: the fences narrow it
	// to one run of fenceStride words. fences[s-1] < w <= fences[s] puts L
	// in ((s-1)*fenceStride, s*fenceStride].
	lo, hi := 0, len(ix.fences)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ix.fences[mid] < w {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	s := lo
	lo, hi = 0, min(s*fenceStride, ix.n)
	if s > 0 {
		lo = (s-1)*fenceStride + 1
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ix.word(mid) < w {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == ix.n || ix.word(lo) != w {
		return lo // no key shares w: L is the answer without reading a record
	}
	// Keys whose words tie with w: find the end of the tie run by galloping,
	// then order inside it by (word, whole key). The word order coarsens the
	// key order, so this is the key-order lower bound.
	step := 1
	for lo+step < ix.n && ix.word(lo+step) == w {
		step *= 2
	}
	hi = min(lo+step, ix.n)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		mw := ix.word(mid)
		if mw < w || (mw == w && bytes.Compare(ix.key(mid), key) < 0) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func (ix *Index) word(i int) uint64 {
	return binary.BigEndian.Uint64(ix.words[8*i:])
}

// At returns entry i, 0 <= i < Len(); like a slice index, an i out of range
// panics (a caller bug, not bad input: Decode has bounded every record). The
// returned Entry.Key aliases the index and has no spare capacity, so an
// append to it cannot overwrite the next record.
func (ix *Index) At(i int) Entry {
	r := ix.record(i)
	le := binary.LittleEndian
	return Entry{
		Key:    r[recordMeta:len(r):len(r)],
		Kind:   r[0],
		Offset: int64(le.Uint64(r[1:])),
		Length: le.Uint32(r[9:]),
	}
}

// Key returns key i, 0 <= i < Len(), without decoding the rest of the entry:
// what a merge of several indexes compares. Like At's Entry.Key it aliases
// the index and has no spare capacity.
func (ix *Index) Key(i int) []byte {
	r := ix.record(i)
	return r[recordMeta:len(r):len(r)]
}

// Verify performs the checks Decode leaves to the checksum, because they cost
// a comparison and a hash per key: keys strictly increasing, and the bloom
// filter exactly the one Encode builds from them. Together with what Decode
// checks, a file that passes Verify is byte for byte what Encode produces for
// its entries and identity. A file whose checksum matches the manifest's
// passes by construction; Verify exists for consistency checks (fsck) and
// tests. It returns a *corruption.Error naming path.
func (ix *Index) Verify(path string) error {
	recStart := int64(len(ix.data) - len(ix.recs) - trailerSize)
	want := bloom.NewWithEstimates(uint(max(ix.n, 1)), falsePositiveRate)
	var prev []byte
	for i := 0; i < ix.n; i++ {
		k := ix.key(i)
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			return corruption.New(path, recStart+int64(ix.recOff(i)), "key %d is not after key %d", i, i-1)
		}
		want.Add(k)
		prev = k
	}
	if ix.n > 0 {
		if p := commonPrefix(ix.key(0), ix.key(ix.n-1)); p != len(ix.prefix) {
			return corruption.New(path, offPrefix, "common key prefix is %d bytes, the header says %d", p, len(ix.prefix))
		}
	}
	wordsStart := int64(len(ix.data) - len(ix.recs) - len(ix.offs) - len(ix.words) - trailerSize)
	for i := 0; i < ix.n; i++ {
		if binary.BigEndian.Uint64(ix.words[8*i:]) != searchWord(ix.key(i)[len(ix.prefix):]) {
			return corruption.New(path, wordsStart+8*int64(i), "search word %d does not match its key", i)
		}
	}
	if want.Cap() != ix.filter.Cap() || want.K() != ix.filter.K() {
		return corruption.New(path, offBloomM, "bloom filter has m=%d k=%d, %d keys give m=%d k=%d",
			ix.filter.Cap(), ix.filter.K(), ix.n, want.Cap(), want.K())
	}
	got, exp := ix.filter.BitSet().Words(), want.BitSet().Words()
	for i := range got {
		if i >= len(exp) || got[i] != exp[i] {
			return corruption.New(path, int64(headerSize+8*i), "bloom filter word %d differs from the one its keys build", i)
		}
	}
	return nil
}

func (ix *Index) recOff(i int) uint32 {
	return binary.LittleEndian.Uint32(ix.offs[4*i:])
}

func (ix *Index) record(i int) []byte {
	return ix.recs[ix.recOff(i):ix.recOff(i+1)]
}

func (ix *Index) key(i int) []byte {
	return ix.record(i)[recordMeta:]
}

// searchWord returns the first 8 bytes of k, zero-padded, as a big-endian
// integer: comparing words compares those bytes (shorter first on ties
// with zeros, which Search resolves with the whole key).
func searchWord(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// wordsFor returns the number of 64-bit words holding m bits.
func wordsFor(m uint64) uint64 { return m/64 + min(m%64, 1) }

// truncKey shortens a key for an error message.
func truncKey(k []byte) []byte {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}
