// Package index implements the per-segment index file of segkv: the sorted
// keys of one sealed data file with each key's newest record (kind, offset,
// length), the segment's range tombstones, and a bloom filter so that a
// point read of a missing key costs no disk read.
//
// The index is a CACHE of information the data file already carries. It is
// never fsynced. The manifest (the trusted commit point) records one
// checksum per index and the identity of the data file it describes; a bad
// index is refused, never believed, and the caller rebuilds it from the data
// file.
//
// # Read where it lies, verified lazily (format version 3)
//
// An index is read through a read-only mapping of its file (Load), so the Go
// heap holds per segment only what every lookup needs: one search word per
// block of keys (about 0.07 bytes per key) and a verification state per
// block. Open cost is independent of the number of keys in a block: Load
// verifies only the top block, which carries every other part's checksum
// and whose own checksum is the one the manifest records. Each key block and
// each bloom filter chunk is verified (checksum and structure) the first
// time a lookup reads it. A part that fails makes the index heal itself: it
// calls the Repair function the loader gave it, which rebuilds the index
// from the data file, and from then on answers from the rebuilt index, at
// the same positions (encoding is deterministic), so an iterator in the
// middle of a damaged index carries on. Without a Repair, or when repair
// fails, the lookup returns the *corruption.Error: a wrong answer is never
// given.
//
// docs/parts/index.md describes the byte layout.
//
// The package also builds indexes: Builder turns a data file's records into
// entries (the newest record of each key, minus what a later range
// tombstone of the file deleted), SortedEntries sorts a key directory, and
// Build rebuilds a sealed data file's index from the file.
//
// Versions 1 and 2 (one checksummed blob read whole into the heap) are no
// longer read; see legacy.go for how segments indexed under them are
// carried over.
package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// Record kinds an index holds: the data file's own, since an entry names the
// key's newest record and an index file stores its kind byte as is.
const (
	KindPut    = segment.KindPut
	KindDelete = segment.KindDelete
)

// Format constants. They are part of the on-disk format: see
// docs/parts/index.md before changing any of them.
const (
	// Magic identifies an index file; it opens the file and ends its footer.
	Magic = "segkvidx"
	// Version is the format version this package writes and reads.
	Version uint32 = 3

	// BlockEntries is the number of keys per key block (the last block may
	// hold fewer). 128 keys of 16 to 32 bytes make blocks of 5 to 7 KiB:
	// a lookup's binary search inside one touches about 1 KiB of search
	// words, and a block's one-time verification hashes a few KiB.
	BlockEntries = 128
	// bloomChunkWords is the number of 64-bit bloom words per verified
	// chunk (4 KiB).
	bloomChunkWords = 512

	fileHeaderSize = 16 // magic, version, flags
	footerSize     = 32 // top offset, top length, magic, version, reserved
	// recordMeta is the fixed part of a record: kind, offset, length.
	recordMeta = 1 + 8 + 4
	// maxBloomK bounds the hash count a reader accepts, so that a damaged
	// file cannot make every lookup arbitrarily slow. NewWithEstimates at
	// 1% gives 7.
	maxBloomK = 64
	// falsePositiveRate is the bloom filter's target false-positive rate.
	falsePositiveRate = 0.01
	// maxBlockEntries bounds the entries per block a reader accepts.
	maxBlockEntries = 1 << 16
)

// Top block field offsets. The top block is checksummed as a whole; its
// checksum is the index's checksum.
const (
	topVersion      = 0   // u32
	topFlags        = 4   // u32: bit 0 = records in key order
	topCount        = 8   // u64 n
	topDataLen      = 16  // i64
	topDigest       = 24  // u64
	topLegacy       = 32  // u64: the version 1/2 checksum this file stands in for, or 0
	topBlockEntries = 40  // u32
	topBlocks       = 44  // u32
	topPrefix       = 48  // u32 P
	topBloomK       = 52  // u32
	topBloomM       = 56  // u64
	topBloomOff     = 64  // u64
	topChunkWords   = 72  // u32
	topChunks       = 76  // u32
	topRangeOff     = 80  // u64
	topRangeLen     = 88  // u64
	topRangeSum     = 96  // u64
	topKeysLen      = 104 // u64
	topFixed        = 112

	tabEntry = 28 // per block: offset u64, length u32, checksum u64, first key offset u32, length u32

	flagInKeyOrder = 1
	// flagBlockFile marks the index of a block data file: an entry per
	// block (see Index.BlockFile).
	flagBlockFile = 2
)

// ErrInvalidEntries is matched (errors.Is) by every error Encode returns for
// entries it cannot index: unsorted or duplicate keys, an unknown kind, a
// record outside the data file, or an index too large for the format.
var ErrInvalidEntries = errors.New("index: invalid entries")

// Entry is one key of a segment and the location of its newest record.
type Entry struct {
	Key    []byte
	Kind   segment.RecordKind // KindPut or KindDelete
	Offset int64              // offset of the record in the data file
	Length uint32             // length of the record in the data file
}

// Identity names the data file an index was built for. An index whose
// identity differs from the one the caller expects is stale (another
// segment's, or an older content of this one) and is refused.
type Identity struct {
	DataLength int64
	DataDigest uint64
}

// Part verification states.
const (
	unchecked uint32 = iota
	good
	bad
)

// Index is a loaded index whose top block was verified. It reads the bytes
// it was loaded from (a mapping or a buffer) until Close. An Index is safe
// for concurrent use.
type Index struct {
	path  string
	data  []byte
	unmap func() error

	n          int
	perBlock   int
	blocks     int
	prefix     []byte // the P bytes every key starts with
	tab        []byte // the block table, in the top block
	chunkSums  []byte // the bloom chunk checksums, in the top block
	firstKeys  []byte // the first-key area, in the top block
	firstWords []uint64
	bloomM     uint64
	bloomK     int
	bloom      []byte // the bloom words
	chunks     int
	chunkWords int
	state      []atomic.Uint32 // blocks, then bloom chunks
	ranges     *rangedel.Set
	checksum   uint64 // the top block's checksum
	legacy     uint64
	id         Identity
	inKeyOrder bool
	blockFile  bool
	heapBytes  int

	repair   func(cause error) (*Index, error)
	repaired func(cause, err error, took time.Duration)
	healMu   sync.Mutex
	healed   atomic.Pointer[Index]
	healErr  error // healMu: why healing failed for good (the data file is damaged too)
	closed   sync.Once
	closeErr error
}

// validateEntries checks what every encoding needs of its entries and
// returns the size of their records.
func validateEntries(entries []Entry, id Identity) (recLen uint64, err error) {
	if id.DataLength < 0 {
		return 0, fmt.Errorf("%w: negative data length %d", ErrInvalidEntries, id.DataLength)
	}
	for i, e := range entries {
		if i > 0 && bytes.Compare(entries[i-1].Key, e.Key) >= 0 {
			return 0, fmt.Errorf("%w: entry %d (key %q) is not after entry %d (key %q)",
				ErrInvalidEntries, i, truncKey(e.Key), i-1, truncKey(entries[i-1].Key))
		}
		if e.Kind != KindPut && e.Kind != KindDelete {
			return 0, fmt.Errorf("%w: entry %d (key %q) has unknown kind %d", ErrInvalidEntries, i, truncKey(e.Key), e.Kind)
		}
		if e.Offset < 0 || e.Offset > id.DataLength-int64(e.Length) {
			return 0, fmt.Errorf("%w: entry %d (key %q): record [%d, +%d) is outside the data file of length %d",
				ErrInvalidEntries, i, truncKey(e.Key), e.Offset, e.Length, id.DataLength)
		}
		recLen += recordMeta + uint64(len(e.Key))
		if recLen > math.MaxUint32 {
			return 0, fmt.Errorf("%w: record area exceeds 4 GiB at entry %d", ErrInvalidEntries, i)
		}
	}
	return recLen, nil
}

// Encode builds the index file bytes for entries, which must be sorted by key
// (bytes.Compare) with no duplicates, and returns its checksum: the value the
// manifest records. Every entry must have a known kind and lie inside the
// data file described by id.
func Encode(entries []Entry, id Identity) (data []byte, checksum uint64, err error) {
	return encode(entries, nil, id, 0, false)
}

// EncodeWithRanges is Encode for a segment that also holds range
// tombstones: ranges is their union. The entries are the keys that survive
// them, each newer than any of the segment's range tombstones covering it.
func EncodeWithRanges(entries []Entry, ranges *rangedel.Set, id Identity) (data []byte, checksum uint64, err error) {
	return encode(entries, ranges, id, 0, false)
}

// EncodeUpgrade is EncodeWithRanges for a segment whose manifest record
// predates version 3: it carries legacyChecksum (LegacyChecksum of the same
// entries, ranges and identity, as the manifest recorded it), and Load
// accepts it against that checksum. It returns legacyChecksum, the value the
// manifest holds, as the checksum.
func EncodeUpgrade(entries []Entry, ranges *rangedel.Set, id Identity, legacyChecksum uint64) (data []byte, checksum uint64, err error) {
	if legacyChecksum == 0 {
		return nil, 0, fmt.Errorf("%w: an upgraded index needs its legacy checksum", ErrInvalidEntries)
	}
	data, _, err = encode(entries, ranges, id, legacyChecksum, false)
	return data, legacyChecksum, err
}

// EncodeBlockFile is EncodeWithRanges for a block data file
// (segment.BlockVersion): entries are still every key, each naming the
// frame of the block that holds it (so keys of one block share Offset and
// Length), and the file holds one entry per block (WriterParams.BlockFile).
func EncodeBlockFile(entries []Entry, ranges *rangedel.Set, id Identity) (data []byte, checksum uint64, err error) {
	return encode(entries, ranges, id, 0, true)
}

func encode(entries []Entry, ranges *rangedel.Set, id Identity, legacy uint64, blockFile bool) ([]byte, uint64, error) {
	p := WriterParams{Count: len(entries), ID: id, Ranges: ranges, Legacy: legacy, BlockFile: blockFile}
	if n := len(entries); n > 0 {
		p.FirstKey, p.LastKey = entries[0].Key, entries[n-1].Key
	}
	var buf bytes.Buffer
	buf.Grow(fileHeaderSize + len(entries)*(8+4+recordMeta+16) + 4096)
	w, err := NewWriter(&buf, p)
	if err != nil {
		return nil, 0, err
	}
	for _, e := range entries {
		if err := w.Add(e); err != nil {
			return nil, 0, err
		}
	}
	sum, _, err := w.Finish()
	if err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), sum, nil
}

// bloomAndPrefix builds the bloom filter of entries, returning its size m
// in bits, hash count k and exactly wordsFor(m) words, and the length of the
// prefix all keys share: what every format version encodes alike.
func bloomAndPrefix(entries []Entry) (m, k uint64, words []uint64, prefixLen int, err error) {
	filter := bloom.NewWithEstimates(uint(max(len(entries), 1)), falsePositiveRate)
	for _, e := range entries {
		filter.Add(e.Key)
	}
	m, k = uint64(filter.Cap()), uint64(filter.K())
	words = filter.BitSet().Words()
	w := wordsFor(m)
	if uint64(len(words)) < w || k > maxBloomK {
		// Cannot happen with the library's estimates; refuse rather than
		// write a file this package would not read back.
		return 0, 0, nil, 0, fmt.Errorf("index: bloom filter with m=%d k=%d and %d words is not encodable", m, k, len(words))
	}
	if n := len(entries); n > 0 {
		prefixLen = commonPrefix(entries[0].Key, entries[n-1].Key)
	}
	return m, k, words[:w], prefixLen, nil
}

// LoadOptions configure Load.
type LoadOptions struct {
	// NoMap reads the file into the heap instead of mapping it (for file
	// systems without mappings, or stores that disable them).
	NoMap bool
	// Repair, if set, is called (at most once per Index) when a part found
	// damaged after Load fails its verification. It returns the index
	// rebuilt from the data file, verified against the same manifest
	// record, or an error. Repair must not call back into the Index.
	Repair func(cause error) (*Index, error)
	// Repaired, if set, is called after each call of Repair with its
	// cause, its error and how long it took, once the Index no longer
	// holds the lock that serializes repairs: what it notifies may read
	// the Index again (a read from within Repair would wait for itself).
	Repaired func(cause, err error, took time.Duration)
}

// Load maps (or reads) the index file at path and verifies its top block
// against wantChecksum, the checksum the manifest recorded, and id, the
// data file the caller expects (see Decode). A missing file is an error
// matching fs.ErrNotExist; a short or damaged one is a *corruption.Error.
// The Index reads the mapping until Close.
func Load(fsys vfs.FS, path string, wantChecksum uint64, id Identity, opts LoadOptions) (*Index, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	defer f.Close() // read-only: a close error cannot lose data; a mapping outlives it
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("index: size of %s: %w", path, err)
	}
	if size < fileHeaderSize+footerSize || uint64(size) > math.MaxInt {
		return nil, corruption.New(path, size, "index file of %d bytes is too short for a header and a footer", size)
	}
	var data []byte
	var unmap func() error
	if mp, ok := f.(vfs.Mapper); ok && !opts.NoMap {
		data, unmap, err = mp.Map(size)
		if err != nil {
			return nil, fmt.Errorf("index: map %s: %w", path, err)
		}
	} else {
		data = make([]byte, size)
		n, err := f.ReadAt(data, 0)
		if n < len(data) {
			if err == nil || errors.Is(err, io.EOF) {
				return nil, corruption.New(path, int64(n), "index read %d of %d bytes", n, size)
			}
			return nil, fmt.Errorf("index: read %s: %w", path, err)
		}
	}
	ix, err := Decode(path, data, wantChecksum, id)
	if err != nil {
		if unmap != nil {
			_ = unmap() // nothing was read from it that anyone keeps
		}
		return nil, err
	}
	ix.unmap, ix.repair, ix.repaired = unmap, opts.Repair, opts.Repaired
	if unmap != nil {
		ix.heapBytes -= len(data) // Decode counted it; the mapping is not heap
	}
	return ix, nil
}

// Decode verifies the top block of data against wantChecksum and id and
// returns an index that reads data (which the caller must not modify
// afterwards). wantChecksum matches the top block's checksum, or, for a
// file EncodeUpgrade made, the legacy checksum it carries. Any truncation,
// bad magic, unknown version, checksum mismatch, identity mismatch or
// inconsistent offset in the top block is a *corruption.Error naming path
// and the offending offset; key blocks and bloom chunks are checked when
// first read. Decode never panics, and no later read of a decoded index
// panics on any input. Its cost is one pass over the top block: O(blocks),
// not O(keys).
func Decode(path string, data []byte, wantChecksum uint64, id Identity) (*Index, error) {
	le := binary.LittleEndian
	size := uint64(len(data))
	if size < fileHeaderSize+footerSize {
		return nil, corruption.New(path, int64(size), "index truncated: %d bytes, a header and footer need %d", size, fileHeaderSize+footerSize)
	}
	if string(data[:len(Magic)]) != Magic {
		return nil, corruption.New(path, 0, "bad index magic %q", data[:len(Magic)])
	}
	if v := le.Uint32(data[8:]); v != Version {
		return nil, corruption.New(path, 8, "index format version %d is not read by this build (it reads %d; the index is rebuilt)", v, Version)
	}
	if f := le.Uint32(data[12:]); f != 0 {
		return nil, corruption.New(path, 12, "unknown index flags %#x", f)
	}
	foot := data[size-footerSize:]
	if string(foot[16:24]) != Magic || le.Uint32(foot[24:]) != Version || le.Uint32(foot[28:]) != 0 {
		return nil, corruption.New(path, int64(size-footerSize), "bad index footer (torn or damaged)")
	}
	topOff, topLen := le.Uint64(foot), le.Uint64(foot[8:])
	if topOff < fileHeaderSize || topLen < topFixed+8 || topOff > size-footerSize || topLen != size-footerSize-topOff {
		return nil, corruption.New(path, int64(size-footerSize), "top block [%d, +%d) does not end at the footer of a %d-byte index", topOff, topLen, size)
	}
	top := data[topOff : topOff+topLen-8]
	stored := le.Uint64(data[topOff+topLen-8:])
	sum := xxhash.Sum64(top)
	if sum != stored {
		return nil, corruption.New(path, int64(topOff+topLen-8),
			"top block checksum mismatch: stored %016x, computed %016x (torn or damaged)", stored, sum)
	}
	got := Identity{DataLength: int64(le.Uint64(top[topDataLen:])), DataDigest: le.Uint64(top[topDigest:])}
	if got != id {
		return nil, corruption.New(path, int64(topOff+topDataLen),
			"stale index: built for data length %d digest %016x, expected length %d digest %016x",
			got.DataLength, got.DataDigest, id.DataLength, id.DataDigest)
	}
	if id.DataLength < 0 {
		return nil, corruption.New(path, int64(topOff+topDataLen), "negative data length %d", id.DataLength)
	}
	legacy := le.Uint64(top[topLegacy:])
	if sum != wantChecksum && (legacy == 0 || legacy != wantChecksum) {
		return nil, corruption.New(path, int64(topOff+topLen-8),
			"index checksum %016x differs from the recorded %016x (stale index)", sum, wantChecksum)
	}
	at := func(field int) int64 { return int64(topOff) + int64(field) }
	if v := le.Uint32(top[topVersion:]); v != Version {
		return nil, corruption.New(path, at(topVersion), "top block names version %d", v)
	}
	flags := le.Uint32(top[topFlags:])
	if flags&^(flagInKeyOrder|flagBlockFile) != 0 {
		return nil, corruption.New(path, at(topFlags), "unknown top block flags %#x", flags)
	}
	if flags&flagBlockFile != 0 && legacy != 0 {
		// Block files came after version 3: no older index to stand in for.
		return nil, corruption.New(path, at(topLegacy), "the index of a block file carries a legacy checksum")
	}

	// Counts, each bounded by the file size before any multiplication.
	n := le.Uint64(top[topCount:])
	per := uint64(le.Uint32(top[topBlockEntries:]))
	blocks := uint64(le.Uint32(top[topBlocks:]))
	prefixLen := uint64(le.Uint32(top[topPrefix:]))
	k := uint64(le.Uint32(top[topBloomK:]))
	m := le.Uint64(top[topBloomM:])
	bloomOff := le.Uint64(top[topBloomOff:])
	chunkWords := uint64(le.Uint32(top[topChunkWords:]))
	chunks := uint64(le.Uint32(top[topChunks:]))
	rangeOff, rangeLen := le.Uint64(top[topRangeOff:]), le.Uint64(top[topRangeLen:])
	rangeSum := le.Uint64(top[topRangeSum:])
	keysLen := le.Uint64(top[topKeysLen:])
	if n > size/recordMeta {
		return nil, corruption.New(path, at(topCount), "entry count %d does not fit a %d-byte index", n, size)
	}
	if per == 0 || per > maxBlockEntries || blocks != (n+per-1)/per {
		return nil, corruption.New(path, at(topBlocks), "%d blocks of %d entries cannot hold %d entries", blocks, per, n)
	}
	if k == 0 || k > maxBloomK {
		return nil, corruption.New(path, at(topBloomK), "bloom filter hash count %d out of range 1..%d", k, maxBloomK)
	}
	if m == 0 || m/8 > size {
		return nil, corruption.New(path, at(topBloomM), "bloom filter of %d bits does not fit a %d-byte index", m, size)
	}
	w := wordsFor(m)
	if chunkWords == 0 || chunkWords > math.MaxInt32/8 || chunks != (w+chunkWords-1)/chunkWords {
		return nil, corruption.New(path, at(topChunks), "%d chunks of %d words cannot hold %d bloom words", chunks, chunkWords, w)
	}
	if bloomOff < fileHeaderSize || bloomOff > topOff || 8*w > topOff-bloomOff || rangeOff != bloomOff+8*w ||
		rangeLen > topOff-rangeOff || rangeOff+rangeLen != topOff {
		return nil, corruption.New(path, at(topBloomOff), "bloom filter [%d, +%d) and range section [%d, +%d) do not tile the space before the top block at %d",
			bloomOff, 8*w, rangeOff, rangeLen, topOff)
	}
	if keysLen > topLen || topFixed+tabEntry*blocks+8*chunks+keysLen+8 != topLen {
		return nil, corruption.New(path, at(topKeysLen), "top block of %d bytes does not hold %d blocks, %d chunks and %d key bytes", topLen, blocks, chunks, keysLen)
	}
	tab := top[topFixed : topFixed+tabEntry*blocks]
	chunkSums := top[topFixed+tabEntry*blocks : topFixed+tabEntry*blocks+8*chunks]
	firstKeys := top[topFixed+tabEntry*blocks+8*chunks:]

	ix := &Index{
		path: path, data: data, n: int(n), perBlock: int(per), blocks: int(blocks),
		tab: tab, chunkSums: chunkSums, firstKeys: firstKeys,
		bloomM: m, bloomK: int(k), bloom: data[bloomOff : bloomOff+8*w], chunks: int(chunks), chunkWords: int(chunkWords),
		checksum: sum, legacy: legacy, id: id, inKeyOrder: flags&flagInKeyOrder != 0,
		blockFile: flags&flagBlockFile != 0,
	}
	// Every block inside the space before the bloom filter and big enough
	// for its entries' fixed parts; first keys in the key area, strictly
	// increasing, sharing the prefix. Then every later read is in bounds.
	firstWords := make([]uint64, blocks)
	var prevKey []byte
	for b := uint64(0); b < blocks; b++ {
		e := tab[tabEntry*b:]
		off, length := le.Uint64(e), uint64(le.Uint32(e[8:]))
		keyOff, keyLen := uint64(le.Uint32(e[20:])), uint64(le.Uint32(e[24:]))
		cnt := min(per, n-b*per)
		if off < fileHeaderSize || off > bloomOff || length > bloomOff-off || length < cnt*(8+4+recordMeta)+4 {
			return nil, corruption.New(path, at(topFixed)+int64(tabEntry*b), "key block %d at [%d, +%d) is out of place for %d entries", b, off, length, cnt)
		}
		if keyOff > keysLen || keyLen > keysLen-keyOff {
			return nil, corruption.New(path, at(topFixed)+int64(tabEntry*b+20), "first key of block %d overruns the key area", b)
		}
		key := firstKeys[keyOff : keyOff+keyLen : keyOff+keyLen]
		if b == 0 {
			if prefixLen > keyLen {
				return nil, corruption.New(path, at(topPrefix), "common key prefix of %d bytes is longer than the first key (%d)", prefixLen, keyLen)
			}
			ix.prefix = key[:prefixLen:prefixLen]
		} else if bytes.Compare(prevKey, key) >= 0 {
			return nil, corruption.New(path, at(topFixed)+int64(tabEntry*b+20), "first key of block %d is not after block %d's", b, b-1)
		}
		if !bytes.HasPrefix(key, ix.prefix) {
			return nil, corruption.New(path, at(topFixed)+int64(tabEntry*b+20), "first key of block %d lacks the common prefix", b)
		}
		firstWords[b] = searchWord(key[prefixLen:])
		prevKey = key
	}
	if n == 0 && prefixLen != 0 {
		return nil, corruption.New(path, at(topPrefix), "empty index with a common key prefix of %d bytes", prefixLen)
	}
	ix.firstWords = firstWords
	if rangeLen > 0 {
		section := data[rangeOff : rangeOff+rangeLen]
		if s := xxhash.Sum64(section); s != rangeSum {
			return nil, corruption.New(path, int64(rangeOff), "range section checksum %016x, the top block says %016x", s, rangeSum)
		}
		ranges, err := decodeRanges(section)
		if err != nil {
			return nil, corruption.New(path, int64(rangeOff), "range section: %v", err)
		}
		if ranges.Len() == 0 {
			return nil, corruption.New(path, int64(rangeOff), "range section without ranges")
		}
		ix.ranges = ranges
	} else if rangeSum != 0 {
		return nil, corruption.New(path, at(topRangeSum), "checksum of an empty range section")
	}
	ix.state = make([]atomic.Uint32, blocks+chunks)
	// The caller's data is counted as heap; Load uncounts a mapping.
	ix.heapBytes = 8*len(firstWords) + 4*len(ix.state) + len(data)
	return ix, nil
}

// Write writes data to path: create (truncating any old file), one WriteAt,
// Close. It deliberately does not sync: the index is a cache that Load
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

// Close releases the mapping and the rebuilt index a heal installed. The
// Index (and every Entry.Key it returned) must not be used afterwards.
// Closing twice is harmless.
func (ix *Index) Close() error {
	ix.closed.Do(func() {
		if ix.unmap != nil {
			ix.closeErr = ix.unmap()
		}
		if h := ix.healed.Load(); h != nil {
			ix.closeErr = errors.Join(ix.closeErr, h.Close())
		}
	})
	return ix.closeErr
}

// Len returns the number of entries.
func (ix *Index) Len() int { return ix.n }

// BlockFile reports whether this is the index of a block data file: its
// entries are the file's blocks, in key order, each with the block's last
// key and the offset and length of its frame (Kind is KindPut and means
// nothing), while the bloom filter and the range section are those of the
// file's keys, as in any index. Len, At, Search and the Reader then count
// and walk blocks, and Lookup names the block that would hold a key (see
// Lookup).
func (ix *Index) BlockFile() bool { return ix.blockFile }

// InKeyOrder reports whether the records the entries point at lie in the
// data file in key order (a merge output or a sorted bulk load).
func (ix *Index) InKeyOrder() bool { return ix.inKeyOrder }

// Ranges returns the segment's range tombstones (empty if it has none).
func (ix *Index) Ranges() *rangedel.Set { return ix.ranges }

// Checksum returns the top block's checksum: the value a manifest written
// since version 3 records for the index.
func (ix *Index) Checksum() uint64 { return ix.checksum }

// Anchor returns the value the manifest records for this index: the legacy
// checksum of an upgraded index, else Checksum.
func (ix *Index) Anchor() uint64 {
	if ix.legacy != 0 {
		return ix.legacy
	}
	return ix.checksum
}

// Identity returns the identity of the data file the index describes.
func (ix *Index) Identity() Identity { return ix.id }

// Size returns the length of the encoded index (the index file's size):
// that of the rebuilt index once damage was healed.
func (ix *Index) Size() int64 {
	if h := ix.healed.Load(); h != nil {
		return h.Size()
	}
	return int64(len(ix.data))
}

// HeapBytes returns the Go heap the index holds: its per-block search words
// and verification states, plus the file itself when it was read rather
// than mapped, and the rebuilt index it answers from once healed.
func (ix *Index) HeapBytes() int {
	if h := ix.healed.Load(); h != nil {
		return ix.heapBytes + h.HeapBytes()
	}
	return ix.heapBytes
}

// Healed reports whether the index found damage after Load and now answers
// from an index rebuilt from the data file.
func (ix *Index) Healed() bool { return ix.healed.Load() != nil }

// Probe is a key prepared for lookups in several indexes: its bloom filter
// locations are computed once. The zero value is not usable; use NewProbe.
type Probe struct {
	key  []byte
	locs []uint64
}

// NewProbe returns a probe for key, which it borrows.
func NewProbe(key []byte) Probe { return Probe{key: key} }

// Key returns the probe's key.
func (p *Probe) Key() []byte { return p.key }

// locations returns the first k bloom locations of the key (the library's
// locations for k hashes are the first k of those for more).
func (p *Probe) locations(k int) []uint64 {
	if len(p.locs) < k {
		p.locs = bloom.Locations(p.key, uint(k))
	}
	return p.locs[:k]
}

// MayContain reports whether the probe's key may be in the index. False is
// definite; true is wrong for about 1% of absent keys.
func (ix *Index) MayContain(p *Probe) (bool, error) {
	if h := ix.healed.Load(); h != nil {
		return h.MayContain(p)
	}
	if ix.n == 0 {
		return false, nil
	}
	le := binary.LittleEndian
	for _, loc := range p.locations(ix.bloomK) {
		bit := loc % ix.bloomM
		w := bit / 64
		if err := ix.checkChunk(int(w) / ix.chunkWords); err != nil {
			h, herr := ix.heal(err)
			if herr != nil {
				return false, herr
			}
			return h.MayContain(p)
		}
		if le.Uint64(ix.bloom[8*w:])&(1<<(bit%64)) == 0 {
			return false, nil
		}
	}
	return true, nil
}

// Get returns the entry for the probe's key (in a block file's index, the
// block that would hold it: see Lookup). A missing key almost always
// costs one bloom test; a present one a bloom test, a search of the block
// words held in the heap and a search inside one block. The returned
// Entry.Key aliases the index.
func (ix *Index) Get(p *Probe) (Entry, bool, error) {
	e, found, _, err := ix.Lookup(p)
	return e, found, err
}

// Lookup is Get that also reports whether the bloom filter alone ruled the
// key out (filtered): what a store counts as a bloom negative, without a
// second bloom test.
//
// In a block file's index (BlockFile), found means that the bloom filter
// let the key through and a block's key range may hold it: e is that
// block's entry, and only the block says whether it holds the key and with
// which record.
func (ix *Index) Lookup(p *Probe) (e Entry, found, filtered bool, err error) {
	if h := ix.healed.Load(); h != nil {
		return h.Lookup(p)
	}
	ok, err := ix.MayContain(p)
	if err != nil {
		return Entry{}, false, false, err
	}
	if !ok {
		return Entry{}, false, true, nil
	}
	if ix.blockFile {
		e, found, err = ix.searchBlock(p.key)
	} else {
		e, found, err = ix.search(p)
	}
	return e, found, false, err
}

// searchBlock finds the block of a block file's index whose key range may
// hold key: the first whose last key is >= key.
func (ix *Index) searchBlock(key []byte) (Entry, bool, error) {
	i, err := ix.Search(key)
	if err != nil || i >= ix.Len() {
		return Entry{}, false, err
	}
	e, err := ix.At(i)
	return e, err == nil, err
}

// search finds the probe's key in the blocks, once the bloom filter let it
// through.
func (ix *Index) search(p *Probe) (Entry, bool, error) {
	b, blk, j, err := ix.locate(p.key)
	if err != nil {
		h, herr := ix.heal(err)
		if herr != nil {
			return Entry{}, false, herr
		}
		return h.Get(p)
	}
	if b < 0 || j == blk.n {
		return Entry{}, false, nil
	}
	e := blk.at(j)
	if !bytes.Equal(e.Key, p.key) {
		return Entry{}, false, nil
	}
	return e, true, nil
}

// Search returns the first position i in [0, Len()] whose key is >= key
// (Len() if none): the starting point of an iterator or range scan.
func (ix *Index) Search(key []byte) (int, error) {
	if h := ix.healed.Load(); h != nil {
		return h.Search(key)
	}
	b, _, j, err := ix.locate(key)
	if err != nil {
		h, herr := ix.heal(err)
		if herr != nil {
			return 0, herr
		}
		return h.Search(key)
	}
	switch {
	case b == -1:
		return 0, nil
	case b == -2:
		return ix.n, nil
	}
	// j == blk.n means the next block's first position, whose first key is
	// >= key.
	return b*ix.perBlock + j, nil
}

// locate finds the block b that would hold key (the last whose first key is
// <= key) and the first position j in it whose key is >= key (blk.n if
// none). b is -1 when key sorts before every key and -2 when after every
// key (both without reading a block). An error is a block failing its
// verification; the caller heals.
func (ix *Index) locate(key []byte) (b int, blk block, j int, err error) {
	if ix.n == 0 {
		return -1, block{}, 0, nil
	}
	// Every key starts with ix.prefix: a probe that does not is before or
	// after all of them.
	p := ix.prefix
	if len(key) < len(p) {
		// A proper prefix of p (or equal to one) sorts before every key.
		if bytes.Compare(key, p[:len(key)]) <= 0 {
			return -1, block{}, 0, nil
		}
		return -2, block{}, 0, nil
	}
	if c := bytes.Compare(key[:len(p)], p); c != 0 {
		if c < 0 {
			return -1, block{}, 0, nil
		}
		return -2, block{}, 0, nil
	}
	w := searchWord(key[len(p):])
	// The number of blocks whose first key is <= key; words coarsen the key
	// order, so the whole first key decides only on a tie.
	lo, hi := 0, ix.blocks
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		fw := ix.firstWords[mid]
		if fw < w || (fw == w && bytes.Compare(ix.firstKey(mid), key) <= 0) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return -1, block{}, 0, nil // key < the first key
	}
	b = lo - 1
	blk, err = ix.block(b)
	if err != nil {
		return 0, block{}, 0, err
	}
	// The next block's first word bounds this block's words from above: a
	// guess from the two fences, held in the heap, lands near the answer
	// for keys spread evenly, without touching the block.
	var guess int
	if b+1 < ix.blocks {
		guess = interpolate(ix.firstWords[b], ix.firstWords[b+1], w, blk.n)
	} else {
		guess = blk.n / 2
	}
	return b, blk, blk.search(key, w, guess), nil
}

// interpolate guesses the position of w among n words spread evenly from lo
// (position 0) to hi (position n, exclusive).
func interpolate(lo, hi, w uint64, n int) int {
	if w <= lo || hi <= lo {
		return 0
	}
	if w >= hi {
		return n - 1
	}
	g := int(float64(w-lo) / float64(hi-lo) * float64(n))
	return min(max(g, 0), n-1)
}

// At returns entry i, 0 <= i < Len(); like a slice index, an i out of range
// panics (a caller bug, not bad input). The returned Entry.Key aliases the
// index and has no spare capacity, so an append to it cannot overwrite the
// next record.
func (ix *Index) At(i int) (Entry, error) {
	if h := ix.healed.Load(); h != nil {
		return h.At(i)
	}
	if i < 0 || i >= ix.n {
		panic(fmt.Sprintf("index: position %d out of range [0, %d)", i, ix.n))
	}
	b := i / ix.perBlock
	blk, err := ix.block(b)
	if err != nil {
		h, herr := ix.heal(err)
		if herr != nil {
			return Entry{}, herr
		}
		return h.At(i)
	}
	return blk.at(i - b*ix.perBlock), nil
}

// Reader reads an index's entries by position, as At does, but keeps the
// key block of its last read: a walk over neighbouring positions (an
// iterator's steps) locates and checks each block once instead of once per
// entry. A block it keeps was verified when it was first read, like every
// block At serves; once the index is healed, a Reader moves to the rebuilt
// index at its next block, and the block it keeps still holds the same
// entries at the same positions. A Reader is not safe for concurrent use;
// the Index must stay open while it is used.
type Reader struct {
	ix   *Index
	blk  []byte // the kept block's bytes (see view)
	n    int    // its number of entries; 0: no block kept
	base int    // the position of its first entry
}

// NewReader returns a Reader of the index.
func (ix *Index) NewReader() Reader { return Reader{ix: ix} }

// Index returns the index the Reader reads.
func (r *Reader) Index() *Index { return r.ix }

// At returns entry i, 0 <= i < Len(), as Index.At does.
func (r *Reader) At(i int) (Entry, error) {
	if j := i - r.base; j >= 0 && j < r.n {
		return entryAt(r.blk, r.n, j), nil
	}
	return r.load(i)
}

// load reads entry i from its block and keeps the block.
func (r *Reader) load(i int) (Entry, error) {
	ix := r.ix
	if h := ix.healed.Load(); h != nil {
		ix = h
	}
	if i < 0 || i >= ix.n {
		panic(fmt.Sprintf("index: position %d out of range [0, %d)", i, ix.n))
	}
	b := i / ix.perBlock
	if ix.state[b].Load() != good {
		if err := ix.verifyBlock(b); err != nil {
			r.n = 0
			return ix.At(i) // heals, or fails
		}
	}
	r.blk, r.n, r.base = ix.blockBytes(b), min(ix.perBlock, ix.n-b*ix.perBlock), b*ix.perBlock
	return entryAt(r.blk, r.n, i-r.base), nil
}

// entryAt is block.at on the bytes of a block of n entries.
func entryAt(blk []byte, n, j int) Entry {
	le := binary.LittleEndian
	offs := blk[8*n : 12*n+4]
	r := blk[12*n+4:][le.Uint32(offs[4*j:]):le.Uint32(offs[4*(j+1):])]
	return Entry{
		Key:    r[recordMeta:len(r):len(r)],
		Kind:   segment.RecordKind(r[0]),
		Offset: int64(le.Uint64(r[1:])),
		Length: le.Uint32(r[9:]),
	}
}

// Key returns key i, 0 <= i < Len(), without decoding the rest of the entry:
// what a merge of several indexes compares. Like At's Entry.Key it aliases
// the index and has no spare capacity.
func (ix *Index) Key(i int) ([]byte, error) {
	e, err := ix.At(i)
	return e.Key, err
}

// Verify reads and checks every part of the index now: every key block and
// bloom chunk against its checksum and structure, keys strictly increasing
// across blocks, the common prefix, and the bloom filter exactly the one
// Encode builds from the keys. A file that passes is byte for byte what
// Encode produces for its entries and identity. It is for consistency
// checks (fsck) and tests; it does not heal. It returns a
// *corruption.Error naming the index's path.
//
// The bloom filter of a block file's index (BlockFile) holds keys the
// index does not list: only a rebuild from the data file proves it (a
// store's Check compares the rebuilt index with the loaded one). Verify
// checks the rest.
func (ix *Index) Verify() error {
	want := bloom.NewWithEstimates(uint(max(ix.n, 1)), falsePositiveRate)
	var prev []byte
	for b := range ix.blocks {
		if err := ix.verifyBlock(b); err != nil {
			return err
		}
		blk, _ := ix.block(b)
		for j := range blk.n {
			k := blk.key(j)
			if (b > 0 || j > 0) && bytes.Compare(prev, k) >= 0 {
				return corruption.New(ix.path, int64(ix.blockOff(b)), "key %d is not after key %d", b*ix.perBlock+j, b*ix.perBlock+j-1)
			}
			want.Add(k)
			prev = k
		}
	}
	for c := range ix.chunks {
		if err := ix.checkChunk(c); err != nil {
			return err
		}
	}
	if ix.blockFile {
		// The prefix is the one of the file's first and last keys, and
		// the first is not an entry. The entries are blocks: each a
		// KindPut entry whose frame ends before the next one starts.
		var end int64
		for i := range ix.n {
			e, _ := ix.At(i)
			if e.Kind != KindPut || e.Offset < end || e.Length == 0 {
				return corruption.New(ix.path, int64(ix.blockOff(i/ix.perBlock)), "block entry %d (kind %d, frame [%d, +%d)) is not a block after the previous one", i, e.Kind, e.Offset, e.Length)
			}
			end = e.Offset + int64(e.Length)
		}
		return nil
	}
	if ix.n > 0 {
		last, _ := ix.At(ix.n - 1)
		if p := commonPrefix(ix.firstKey(0), last.Key); p != len(ix.prefix) {
			return corruption.New(ix.path, -1, "common key prefix is %d bytes, the top block says %d", p, len(ix.prefix))
		}
	}
	if uint64(want.Cap()) != ix.bloomM || int(want.K()) != ix.bloomK {
		return corruption.New(ix.path, -1, "bloom filter has m=%d k=%d, %d keys give m=%d k=%d",
			ix.bloomM, ix.bloomK, ix.n, want.Cap(), want.K())
	}
	for i, wd := range want.BitSet().Words() {
		if 8*i >= len(ix.bloom) || binary.LittleEndian.Uint64(ix.bloom[8*i:]) != wd {
			return corruption.New(ix.path, -1, "bloom filter word %d differs from the one its keys build", i)
		}
	}
	// Last, byte for byte: the layout choices the reads above accept but
	// Encode never makes (block size, chunk size, the key-order flag,
	// gaps) must not pass a check that promises what Encode writes.
	entries := make([]Entry, ix.n)
	for i := range entries {
		entries[i], _ = ix.At(i) // every block verified above
	}
	again, _, err := encode(entries, ix.ranges, ix.id, ix.legacy, false)
	if err != nil || !bytes.Equal(again, ix.data) {
		return corruption.New(ix.path, -1, "index is not the file its entries encode to")
	}
	return nil
}

// Scrub verifies every key block and bloom chunk not verified yet, as
// reads would, healing the index (see LoadOptions.Repair) if one is
// damaged. It returns an error only when a part is damaged and healing
// failed. Unlike Verify it proves nothing about how the file was built; it
// makes every later read a verified one.
func (ix *Index) Scrub() error {
	if ix.healed.Load() != nil {
		return nil
	}
	var err error
	for b := 0; b < ix.blocks && err == nil; b++ {
		err = ix.verifyBlock(b)
	}
	for c := 0; c < ix.chunks && err == nil; c++ {
		err = ix.checkChunk(c)
	}
	if err != nil {
		_, err = ix.heal(err)
	}
	return err
}

// heal answers for a part that failed verification with cause: it rebuilds
// the index through the Repair function once, and every later call of
// every method delegates to the rebuilt index. The rebuilt index must hold
// the same entries at the same positions, which a deterministic encoding
// of the same data file gives; it is checked by its top block checksum.
func (ix *Index) heal(cause error) (*Index, error) {
	h, ran, err := ix.healLocked(cause)
	if ran.took >= 0 && ix.repaired != nil {
		ix.repaired(cause, ran.err, ran.took)
	}
	return h, err
}

// repairRun is what one call of Repair returned; took is negative when
// heal did not call it.
type repairRun struct {
	err  error
	took time.Duration
}

// healLocked is heal under healMu.
func (ix *Index) healLocked(cause error) (_ *Index, ran repairRun, _ error) {
	ran.took = -1
	ix.healMu.Lock()
	defer ix.healMu.Unlock()
	if h := ix.healed.Load(); h != nil {
		return h, ran, nil
	}
	if ix.healErr != nil {
		return nil, ran, ix.healErr
	}
	if ix.repair == nil {
		ix.healErr = cause
		return nil, ran, cause
	}
	start := time.Now()
	h, err := ix.repair(cause)
	ran = repairRun{err: err, took: time.Since(start)}
	if err == nil && (h == nil || h.checksum != ix.checksum || h.n != ix.n) {
		err = corruption.New(ix.path, -1, "the index rebuilt from the data file does not match the verified top block")
	}
	if err != nil {
		wrapped := fmt.Errorf("%w; rebuilding it from the data file failed: %w", cause, err)
		if errors.Is(err, corruption.ErrCorrupt) {
			// The data file itself does not rebuild to what the manifest
			// recorded: no later attempt can do better.
			ix.healErr = wrapped
		}
		// Anything else (an I/O error reading the data file) may pass:
		// the next read that needs the damaged part tries again.
		return nil, ran, wrapped
	}
	ix.healed.Store(h)
	return h, ran, nil
}

// block is a view of one verified key block.
type block struct {
	n     int
	words []byte // n big-endian search words
	offs  []byte // n+1 u32 record offsets
	recs  []byte
}

func (ix *Index) blockOff(b int) uint64 { return binary.LittleEndian.Uint64(ix.tab[tabEntry*b:]) }

func (ix *Index) firstKey(b int) []byte {
	e := ix.tab[tabEntry*b:]
	off, n := binary.LittleEndian.Uint32(e[20:]), binary.LittleEndian.Uint32(e[24:])
	return ix.firstKeys[off : off+n : off+n]
}

// view slices block b (bounds proved by Decode).
func (ix *Index) view(b int) block {
	n := min(ix.perBlock, ix.n-b*ix.perBlock)
	d := ix.blockBytes(b)
	return block{n: n, words: d[:8*n], offs: d[8*n : 12*n+4], recs: d[12*n+4:]}
}

// blockBytes returns the bytes of block b: n search words, n+1 record
// offsets, the records.
func (ix *Index) blockBytes(b int) []byte {
	e := ix.tab[tabEntry*b:]
	off, length := binary.LittleEndian.Uint64(e), uint64(binary.LittleEndian.Uint32(e[8:]))
	return ix.data[off : off+length]
}

// block returns block b, verifying it first if no read did yet.
func (ix *Index) block(b int) (block, error) {
	if ix.state[b].Load() != good {
		if err := ix.verifyBlock(b); err != nil {
			return block{}, err
		}
	}
	return ix.view(b), nil
}

// verifyBlock checks block b against its checksum and then its structure:
// record bounds and kinds, record locations inside the data file, keys
// strictly increasing, starting with the prefix and matching their search
// words, the first key equal to the top block's and the last below the
// next block's first. Afterwards every read of the block is in bounds and
// every search in it exact.
func (ix *Index) verifyBlock(b int) error {
	switch ix.state[b].Load() {
	case good:
		return nil
	case bad:
		return corruption.New(ix.path, int64(ix.blockOff(b)), "key block %d failed verification", b)
	}
	err := ix.checkBlock(b)
	if err != nil {
		ix.state[b].Store(bad)
		return err
	}
	ix.state[b].Store(good)
	return nil
}

func (ix *Index) checkBlock(b int) error {
	le := binary.LittleEndian
	e := ix.tab[tabEntry*b:]
	off, length, sum := le.Uint64(e), uint64(le.Uint32(e[8:])), le.Uint64(e[12:])
	at := int64(off)
	if got := xxhash.Sum64(ix.data[off : off+length]); got != sum {
		return corruption.New(ix.path, at, "key block %d checksum %016x, the top block says %016x (damaged)", b, got, sum)
	}
	blk := ix.view(b)
	recLen := uint32(len(blk.recs))
	if le.Uint32(blk.offs) != 0 || le.Uint32(blk.offs[4*blk.n:]) != recLen {
		return corruption.New(ix.path, at, "key block %d: record offsets do not span its record area", b)
	}
	p := len(ix.prefix)
	var prev []byte
	for j := range blk.n {
		lo, hi := le.Uint32(blk.offs[4*j:]), le.Uint32(blk.offs[4*(j+1):])
		if hi < lo || hi-lo < recordMeta || hi > recLen {
			return corruption.New(ix.path, at, "key block %d: record %d spans [%d, %d) of %d bytes", b, j, lo, hi, recLen)
		}
		r := blk.recs[lo:hi]
		if k := segment.RecordKind(r[0]); k != KindPut && k != KindDelete {
			return corruption.New(ix.path, at, "key block %d: record %d has unknown kind %d", b, j, r[0])
		}
		roff, rlen := int64(le.Uint64(r[1:])), int64(le.Uint32(r[9:]))
		if roff < 0 || roff > ix.id.DataLength-rlen {
			return corruption.New(ix.path, at, "key block %d: record %d points at [%d, +%d), outside the data file of length %d", b, j, roff, rlen, ix.id.DataLength)
		}
		key := r[recordMeta:]
		if j > 0 && bytes.Compare(prev, key) >= 0 {
			return corruption.New(ix.path, at, "key block %d: key %d is not after key %d", b, j, j-1)
		}
		if !bytes.HasPrefix(key, ix.prefix) || binary.BigEndian.Uint64(blk.words[8*j:]) != searchWord(key[p:]) {
			return corruption.New(ix.path, at, "key block %d: key %d does not match its search word or the common prefix", b, j)
		}
		prev = key
	}
	if !bytes.Equal(blk.key(0), ix.firstKey(b)) {
		return corruption.New(ix.path, at, "key block %d: first key differs from the top block's", b)
	}
	if b+1 < ix.blocks && bytes.Compare(prev, ix.firstKey(b+1)) >= 0 {
		return corruption.New(ix.path, at, "key block %d: last key is not before block %d's first", b, b+1)
	}
	return nil
}

// checkChunk verifies bloom chunk c on its first read.
func (ix *Index) checkChunk(c int) error {
	st := &ix.state[ix.blocks+c]
	switch st.Load() {
	case good:
		return nil
	case bad:
		return corruption.New(ix.path, -1, "bloom filter chunk %d failed verification", c)
	}
	lo := 8 * c * ix.chunkWords
	hi := min(lo+8*ix.chunkWords, len(ix.bloom))
	want := binary.LittleEndian.Uint64(ix.chunkSums[8*c:])
	if got := xxhash.Sum64(ix.bloom[lo:hi]); got != want {
		st.Store(bad)
		return corruption.New(ix.path, -1, "bloom filter chunk %d checksum %016x, the top block says %016x (damaged)", c, got, want)
	}
	st.Store(good)
	return nil
}

func (blk block) word(j int) uint64 { return binary.BigEndian.Uint64(blk.words[8*j:]) }

func (blk block) record(j int) []byte {
	le := binary.LittleEndian
	return blk.recs[le.Uint32(blk.offs[4*j:]):le.Uint32(blk.offs[4*(j+1):])]
}

func (blk block) key(j int) []byte {
	r := blk.record(j)
	return r[recordMeta:len(r):len(r)]
}

func (blk block) at(j int) Entry {
	r := blk.record(j)
	le := binary.LittleEndian
	return Entry{
		Key:    r[recordMeta:len(r):len(r)],
		Kind:   segment.RecordKind(r[0]),
		Offset: int64(le.Uint64(r[1:])),
		Length: le.Uint32(r[9:]),
	}
}

// search returns the first position in the block whose key is >= key, whose
// search word (after the common prefix) is w; blk.n if none. It starts at
// guess and gallops outwards to bracket the answer, then bisects the
// bracket: a good guess reads one or two cache lines of words, a bad one
// costs at most about twice a plain binary search.
func (blk block) search(key []byte, w uint64, guess int) int {
	// Bracket [lo, hi]: word(lo-1) < w (or lo == 0), word(hi) >= w (or
	// hi == n).
	lo, hi := 0, blk.n
	if blk.word(guess) < w {
		lo = guess + 1
		for step := 1; ; step *= 2 {
			next := lo + step - 1
			if next >= blk.n {
				break
			}
			if blk.word(next) >= w {
				hi = next
				break
			}
			lo = next + 1
		}
	} else {
		hi = guess
		for step := 1; ; step *= 2 {
			next := hi - step
			if next < 0 {
				break
			}
			if blk.word(next) < w {
				lo = next + 1
				break
			}
			hi = next
		}
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if blk.word(mid) < w {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == blk.n || blk.word(lo) != w {
		return lo // no key shares w: the answer without reading a record
	}
	// Keys whose words tie with w: order inside the tie run by whole key.
	hi = lo + 1
	for hi < blk.n && blk.word(hi) == w {
		hi++
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bytes.Compare(blk.key(mid), key) < 0 {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

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
