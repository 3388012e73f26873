package index

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// WriterParams describe the index a Writer encodes. The count and the first
// and last keys come first because the format needs them before the first
// block: the bloom filter is sized by the count, and every search word is
// taken after the prefix the first and last keys share.
type WriterParams struct {
	// Count is the number of entries Add will be given: one per key.
	Count int
	// FirstKey and LastKey are the first and last entries' keys (ignored
	// when Count is 0).
	FirstKey, LastKey []byte
	// BlockFile makes the index of a block data file (segment.BlockVersion):
	// Add is still given every key, whose Offset and Length name the frame
	// of the block holding it, but the file holds one entry per block (its
	// last key, its frame) and the bloom filter of every key. See
	// Index.BlockFile.
	BlockFile bool
	// ID is the data file the entries point into.
	ID Identity
	// Ranges is the union of the segment's range tombstones, or nil.
	Ranges *rangedel.Set
	// Legacy is the version 1/2 checksum the file stands in for (see
	// EncodeUpgrade), or 0.
	Legacy uint64
}

// Writer encodes an index file in one pass over its entries in key order,
// writing each key block as it fills: it holds the bloom filter, the block
// table and the blocks' first keys (about 1.5 bytes per key), never the
// entries, so an index of any size is written in bounded memory. Encode is
// a Writer into a buffer, so both write the same bytes for the same
// entries.
type Writer struct {
	w      io.Writer
	p      WriterParams
	prefix int
	filter *bloom.BloomFilter

	off        uint64 // bytes written so far
	added      int    // entries Add was given
	written    int    // entries encoded: added, or in a block file's index one per block
	prev       Entry  // the last entry Add was given; its key in prevKey
	prevKey    []byte
	inKeyOrder bool
	// group is, in a block file's index, the block whose keys Add is
	// being given: its entry is encoded once a key of the next block (or
	// Finish) shows it is complete.
	group     Entry
	groupKey  []byte
	inGroup   bool
	blk       []Entry // the block being filled; keys borrowed until it is written
	keyBuf    []byte  // copies of the block's keys
	buf       []byte  // one encoded block
	tab       []byte
	firstKeys []byte
	err       error
}

// NewWriter starts an index file on w. It writes the file header at once.
func NewWriter(w io.Writer, p WriterParams) (*Writer, error) {
	if p.Count < 0 || p.ID.DataLength < 0 {
		return nil, fmt.Errorf("%w: count %d, data length %d", ErrInvalidEntries, p.Count, p.ID.DataLength)
	}
	if p.Count > 0 && bytes.Compare(p.FirstKey, p.LastKey) > 0 {
		return nil, fmt.Errorf("%w: first key %q is after the last %q", ErrInvalidEntries, truncKey(p.FirstKey), truncKey(p.LastKey))
	}
	iw := &Writer{w: w, p: p, inKeyOrder: true, blk: make([]Entry, 0, BlockEntries)}
	iw.filter = bloom.NewWithEstimates(uint(max(p.Count, 1)), falsePositiveRate)
	if uint64(len(iw.filter.BitSet().Words())) < wordsFor(uint64(iw.filter.Cap())) || iw.filter.K() > maxBloomK {
		// Cannot happen with the library's estimates; refuse rather than
		// write a file this package would not read back.
		return nil, fmt.Errorf("index: bloom filter with m=%d k=%d is not encodable", iw.filter.Cap(), iw.filter.K())
	}
	if p.Count > 0 {
		iw.prefix = commonPrefix(p.FirstKey, p.LastKey)
	}
	le := binary.LittleEndian
	hdr := make([]byte, 0, fileHeaderSize)
	hdr = append(hdr, Magic...)
	hdr = le.AppendUint32(hdr, Version)
	hdr = le.AppendUint32(hdr, 0)
	if err := iw.write(hdr); err != nil {
		return nil, err
	}
	return iw, nil
}

func (iw *Writer) write(b []byte) error {
	if iw.err != nil {
		return iw.err
	}
	if _, err := iw.w.Write(b); err != nil {
		iw.err = fmt.Errorf("index: write: %w", err)
		return iw.err
	}
	iw.off += uint64(len(b))
	return nil
}

// fail records the first error, so that every later call returns it.
func (iw *Writer) fail(err error) error {
	if iw.err == nil {
		iw.err = err
	}
	return iw.err
}

// Add appends the next entry: its key must follow the previous one's, its
// kind be known and its record lie inside the data file. The key is copied.
func (iw *Writer) Add(e Entry) error {
	if iw.err != nil {
		return iw.err
	}
	i := iw.added
	switch {
	case i >= iw.p.Count:
		return iw.fail(fmt.Errorf("%w: entry %d beyond the announced count %d", ErrInvalidEntries, i, iw.p.Count))
	case i > 0 && bytes.Compare(iw.prev.Key, e.Key) >= 0:
		return iw.fail(fmt.Errorf("%w: entry %d (key %q) is not after entry %d (key %q)",
			ErrInvalidEntries, i, truncKey(e.Key), i-1, truncKey(iw.prev.Key)))
	case e.Kind != KindPut && e.Kind != KindDelete:
		return iw.fail(fmt.Errorf("%w: entry %d (key %q) has unknown kind %d", ErrInvalidEntries, i, truncKey(e.Key), e.Kind))
	case e.Offset < 0 || e.Offset > iw.p.ID.DataLength-int64(e.Length):
		return iw.fail(fmt.Errorf("%w: entry %d (key %q): record [%d, +%d) is outside the data file of length %d",
			ErrInvalidEntries, i, truncKey(e.Key), e.Offset, e.Length, iw.p.ID.DataLength))
	case i == 0 && !bytes.Equal(e.Key, iw.p.FirstKey):
		return iw.fail(fmt.Errorf("%w: first entry's key %q is not the announced first key %q", ErrInvalidEntries, truncKey(e.Key), truncKey(iw.p.FirstKey)))
	case bytes.Compare(e.Key, iw.p.LastKey) > 0:
		// (Between the first and last keys, every key has their prefix.)
		return iw.fail(fmt.Errorf("%w: entry %d (key %q) is after the announced last key %q", ErrInvalidEntries, i, truncKey(e.Key), truncKey(iw.p.LastKey)))
	}
	if iw.p.BlockFile && (e.Length == 0 || iw.p.Legacy != 0) {
		return iw.fail(fmt.Errorf("%w: entry %d (key %q): an empty block, or a legacy checksum, in a block file's index", ErrInvalidEntries, i, truncKey(e.Key)))
	}
	if i > 0 && e.Offset < iw.prev.Offset {
		if iw.p.BlockFile {
			return iw.fail(fmt.Errorf("%w: entry %d (key %q): block at %d is before the previous key's at %d",
				ErrInvalidEntries, i, truncKey(e.Key), e.Offset, iw.prev.Offset))
		}
		iw.inKeyOrder = false
	}
	iw.filter.Add(e.Key)
	iw.prevKey = append(iw.prevKey[:0], e.Key...)
	iw.prev = e
	iw.prev.Key = iw.prevKey
	iw.added++
	if !iw.p.BlockFile {
		return iw.encodeEntry(e)
	}
	if iw.inGroup && e.Offset == iw.group.Offset {
		if e.Length != iw.group.Length {
			return iw.fail(fmt.Errorf("%w: entry %d (key %q): block at %d is %d bytes long, the previous key's %d",
				ErrInvalidEntries, i, truncKey(e.Key), e.Offset, e.Length, iw.group.Length))
		}
		iw.groupKey = append(iw.groupKey[:0], e.Key...)
		return nil
	}
	if iw.inGroup && e.Offset < iw.group.Offset+int64(iw.group.Length) {
		return iw.fail(fmt.Errorf("%w: entry %d (key %q): block at %d overlaps the previous one, [%d, +%d)",
			ErrInvalidEntries, i, truncKey(e.Key), e.Offset, iw.group.Offset, iw.group.Length))
	}
	if err := iw.endGroup(); err != nil {
		return err
	}
	iw.groupKey = append(iw.groupKey[:0], e.Key...)
	iw.group, iw.inGroup = Entry{Kind: KindPut, Offset: e.Offset, Length: e.Length}, true
	return nil
}

// endGroup encodes the entry of the block whose keys were given last (in
// a block file's index): its last key and its frame.
func (iw *Writer) endGroup() error {
	if !iw.inGroup {
		return nil
	}
	e := iw.group
	e.Key = iw.groupKey
	iw.inGroup = false
	return iw.encodeEntry(e)
}

// encodeEntry appends e to the key block being filled, copying its key,
// and writes the block once it is full.
func (iw *Writer) encodeEntry(e Entry) error {
	start := len(iw.keyBuf)
	iw.keyBuf = append(iw.keyBuf, e.Key...)
	e.Key = iw.keyBuf[start:len(iw.keyBuf):len(iw.keyBuf)]
	iw.blk = append(iw.blk, e)
	iw.written++
	if len(iw.blk) == BlockEntries {
		return iw.flushBlock()
	}
	return nil
}

// flushBlock encodes and writes the block being filled: the search words,
// the record offsets, then the records.
func (iw *Writer) flushBlock() error {
	if len(iw.blk) == 0 {
		return nil
	}
	le := binary.LittleEndian
	buf := iw.buf[:0]
	for _, e := range iw.blk {
		buf = binary.BigEndian.AppendUint64(buf, searchWord(e.Key[iw.prefix:]))
	}
	pos := uint32(0)
	for _, e := range iw.blk {
		buf = le.AppendUint32(buf, pos)
		pos += recordMeta + uint32(len(e.Key))
	}
	buf = le.AppendUint32(buf, pos)
	for _, e := range iw.blk {
		buf = append(buf, byte(e.Kind))
		buf = le.AppendUint64(buf, uint64(e.Offset))
		buf = le.AppendUint32(buf, e.Length)
		buf = append(buf, e.Key...)
	}
	first := iw.blk[0].Key
	if uint64(len(buf)) > math.MaxUint32 || len(iw.firstKeys)+len(first) > math.MaxUint32 {
		return iw.fail(fmt.Errorf("%w: block %d exceeds 4 GiB", ErrInvalidEntries, len(iw.tab)/tabEntry))
	}
	iw.tab = le.AppendUint64(iw.tab, iw.off)
	iw.tab = le.AppendUint32(iw.tab, uint32(len(buf)))
	iw.tab = le.AppendUint64(iw.tab, xxhash.Sum64(buf))
	iw.tab = le.AppendUint32(iw.tab, uint32(len(iw.firstKeys)))
	iw.tab = le.AppendUint32(iw.tab, uint32(len(first)))
	iw.firstKeys = append(iw.firstKeys, first...)
	iw.buf = buf
	if err := iw.write(buf); err != nil {
		return err
	}
	// The block's keys are written: the buffers are reused for the next.
	iw.blk, iw.keyBuf = iw.blk[:0], iw.keyBuf[:0]
	return nil
}

// Finish writes the last block, the bloom filter, the range section, the
// top block and the footer, and returns the checksum the manifest records
// for the index (for an upgraded file, its legacy checksum) and the file's
// size. It fails if Add was given fewer entries than announced or the last
// entry's key is not the announced last key.
func (iw *Writer) Finish() (checksum uint64, size int64, err error) {
	if iw.err != nil {
		return 0, 0, iw.err
	}
	if iw.added != iw.p.Count {
		return 0, 0, iw.fail(fmt.Errorf("%w: %d entries added, %d announced", ErrInvalidEntries, iw.added, iw.p.Count))
	}
	if iw.added > 0 && !bytes.Equal(iw.prev.Key, iw.p.LastKey) {
		return 0, 0, iw.fail(fmt.Errorf("%w: last entry's key %q is not the announced last key %q", ErrInvalidEntries, truncKey(iw.prev.Key), truncKey(iw.p.LastKey)))
	}
	if err := iw.endGroup(); err != nil {
		return 0, 0, err
	}
	if err := iw.flushBlock(); err != nil {
		return 0, 0, err
	}
	le := binary.LittleEndian

	m, k := uint64(iw.filter.Cap()), uint64(iw.filter.K())
	words := iw.filter.BitSet().Words()[:wordsFor(m)]
	bloomOff := iw.off
	chunks := (len(words) + bloomChunkWords - 1) / bloomChunkWords
	chunkSums := make([]byte, 0, 8*chunks)
	buf := iw.buf[:0]
	for c := range chunks {
		buf = buf[:0]
		for _, w := range words[c*bloomChunkWords : min(len(words), (c+1)*bloomChunkWords)] {
			buf = le.AppendUint64(buf, w)
		}
		chunkSums = le.AppendUint64(chunkSums, xxhash.Sum64(buf))
		if err := iw.write(buf); err != nil {
			return 0, 0, err
		}
	}

	rangeOff := iw.off
	var rangeSum uint64
	var rangeLen int
	if iw.p.Ranges.Len() > 0 {
		rs := appendRanges(nil, iw.p.Ranges)
		rangeSum, rangeLen = xxhash.Sum64(rs), len(rs)
		if err := iw.write(rs); err != nil {
			return 0, 0, err
		}
	}

	topOff := iw.off
	var flags uint32
	if iw.inKeyOrder {
		flags |= flagInKeyOrder
	}
	if iw.p.BlockFile {
		flags |= flagBlockFile
	}
	blocks := len(iw.tab) / tabEntry
	top := make([]byte, 0, topFixed+len(iw.tab)+len(chunkSums)+len(iw.firstKeys)+8+footerSize)
	top = le.AppendUint32(top, Version)
	top = le.AppendUint32(top, flags)
	top = le.AppendUint64(top, uint64(iw.written))
	top = le.AppendUint64(top, uint64(iw.p.ID.DataLength))
	top = le.AppendUint64(top, iw.p.ID.DataDigest)
	top = le.AppendUint64(top, iw.p.Legacy)
	top = le.AppendUint32(top, BlockEntries)
	top = le.AppendUint32(top, uint32(blocks))
	top = le.AppendUint32(top, uint32(iw.prefix))
	top = le.AppendUint32(top, uint32(k))
	top = le.AppendUint64(top, m)
	top = le.AppendUint64(top, bloomOff)
	top = le.AppendUint32(top, bloomChunkWords)
	top = le.AppendUint32(top, uint32(chunks))
	top = le.AppendUint64(top, rangeOff)
	top = le.AppendUint64(top, uint64(rangeLen))
	top = le.AppendUint64(top, rangeSum)
	top = le.AppendUint64(top, uint64(len(iw.firstKeys)))
	top = append(top, iw.tab...)
	top = append(top, chunkSums...)
	top = append(top, iw.firstKeys...)
	sum := xxhash.Sum64(top)
	top = le.AppendUint64(top, sum)
	topLen := uint64(len(top))

	top = le.AppendUint64(top, topOff)
	top = le.AppendUint64(top, topLen)
	top = append(top, Magic...)
	top = le.AppendUint32(top, Version)
	top = le.AppendUint32(top, 0)
	if err := iw.write(top); err != nil {
		return 0, 0, err
	}
	iw.err = errFinished
	if iw.p.Legacy != 0 {
		sum = iw.p.Legacy
	}
	return sum, int64(iw.off), nil
}

// ctxCheckBytes is how much of a data file WriteOrdered reads between two
// looks at its context.
const ctxCheckBytes = 256 << 10

var errFinished = fmt.Errorf("index: writer already finished")

// WriteOrdered writes the index file at indexPath for the data file at
// dataPath whose point records are in strictly increasing key order, one
// per key, after all of its range tombstones: a merge output. It replays the
// file and streams its entries through a Writer, so that its heap does not
// grow with the file, whatever its size, and writes the same bytes as
// Build would. p carries what the file's writer (or the manifest) knows
// already: the count, the first and last keys and the file's identity;
// p.Ranges and p.BlockFile are ignored: the union of the file's range
// tombstones is taken from the file, and whether it is a block file from
// its header. A file that does not match p, or whose records are not in
// that order, is refused with ErrInvalidEntries (or a *corruption.Error for
// damage) and leaves no index file. Like Write, it does not sync: the index
// is a cache. It returns the index's checksum, or ctx's error if ctx ends
// first.
func WriteOrdered(ctx context.Context, fsys vfs.FS, dataPath, indexPath string, p WriterParams) (checksum uint64, err error) {
	data, err := fsys.Open(dataPath)
	if err != nil {
		return 0, fmt.Errorf("index: open %s: %w", dataPath, err)
	}
	defer data.Close()
	out, err := fsys.Create(indexPath)
	if err != nil {
		return 0, fmt.Errorf("index: create %s: %w", indexPath, err)
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("index: close %s: %w", indexPath, cerr)
		}
		if err != nil {
			_ = fsys.Remove(indexPath) // a partial index must not be left to be loaded
		}
	}()
	// The data file's header says whether it is a block file, not p.
	hdr := make([]byte, segment.HeaderSize)
	if _, err := data.ReadAt(hdr, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, corruption.New(dataPath, 0, "data file is shorter than its header")
		}
		return 0, fmt.Errorf("index: read header of %s: %w", dataPath, err)
	}
	if err := segment.CheckHeader(dataPath, hdr); err != nil {
		return 0, err
	}
	p.BlockFile = segment.HeaderVersion(hdr) >= segment.BlockVersion
	bw := bufio.NewWriterSize(vfs.NewWriter(out, 0), 1<<20)
	iw, err := NewWriter(bw, p)
	if err != nil {
		return 0, err
	}
	points := 0
	var nextCheck int64 // offset at which ctx is next checked
	var spans []rangedel.Span
	rr, err := segment.ReplayFile(data, dataPath, p.ID.DataLength, func(r segment.Record, off int64, length int) error {
		if r.Kind == segment.KindRangeDelete {
			if points > 0 {
				return fmt.Errorf("%w: %s: range tombstone at %d after a point record", ErrInvalidEntries, dataPath, off)
			}
			spans = append(spans, rangedel.Span{Start: bytes.Clone(r.Key), End: bytes.Clone(r.Value)})
			return nil
		}
		points++
		if off >= nextCheck {
			// A pass over a large merge output must not hold up a Close:
			// look at ctx once per ctxCheckBytes of data read.
			if err := ctx.Err(); err != nil {
				return err
			}
			nextCheck = off + ctxCheckBytes
		}
		return iw.Add(Entry{Key: r.Key, Kind: r.Kind, Offset: off, Length: uint32(length)})
	})
	if err != nil {
		return 0, fmt.Errorf("index: index %s: %w", dataPath, err)
	}
	if rr.Scan.End != p.ID.DataLength {
		return 0, corruption.New(dataPath, rr.Scan.End, "data file ends at %d, %d expected", rr.Scan.End, p.ID.DataLength)
	}
	// The range section comes after the blocks: the tombstones, first in
	// the file, are all known by now. Build takes their union alike.
	iw.p.Ranges = rangedel.Union(spans...)
	if checksum, _, err = iw.Finish(); err != nil {
		return 0, fmt.Errorf("index: index %s: %w", dataPath, err)
	}
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("index: write %s: %w", indexPath, err)
	}
	return checksum, nil
}
