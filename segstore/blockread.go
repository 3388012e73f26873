package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/wal"
)

// This file owns reads from block data files (segment.BlockVersion, the
// files merges write): finding out whether a data file is one, and reading a
// key's record out of the compressed block its index entry names, through a
// small cache of decoded blocks that a scan or a merge keeps for the files
// it walks.

// A data file's format, as its header says; formatUnknown until the first
// read that needs it.
const (
	formatUnknown uint32 = iota
	formatRecords        // versions 1 and 2: an index entry names a record
	formatBlocks         // version 3: an index entry names a block
)

// setFormat records the format of a file whose header version is known
// (a file this store just wrote).
func (d *dataFile) setFormat(version uint32) {
	if version >= segment.BlockVersion {
		d.format.Store(formatBlocks)
	} else {
		d.format.Store(formatRecords)
	}
}

// blockFormat reports whether d is a block data file, reading and checking
// its header the first time. The caller keeps d pinned (or holds mu).
func (d *dataFile) blockFormat() (bool, error) {
	switch d.format.Load() {
	case formatRecords:
		return false, nil
	case formatBlocks:
		return true, nil
	}
	h := make([]byte, segment.HeaderSize)
	if m := d.reader(); m != nil && len(m.data) >= segment.HeaderSize {
		copy(h, m.data)
	} else {
		fh, err := d.s.files.acquire(d.id, d.path)
		if err != nil {
			return false, err
		}
		_, err = fh.f.ReadAt(h, 0)
		d.s.files.release(fh)
		if errors.Is(err, io.EOF) {
			return false, corruption.New(d.path, 0, "data file is shorter than its header")
		}
		if err != nil {
			return false, fmt.Errorf("segkv: read header of %s: %w", d.path, err)
		}
	}
	if err := segment.CheckHeader(d.path, h); err != nil {
		return false, err
	}
	d.setFormat(segment.HeaderVersion(h))
	return d.format.Load() == formatBlocks, nil
}

// blockCache keeps the decoded block last read from each of a few data
// files, so that a walk in key order (an iterator, a merge, a check)
// decodes each block once however many of its keys it reads. Not safe for
// concurrent use; the zero value is ready. Whoever holds one keeps the
// files it names pinned, or drops it (reset) before unpinning them.
type blockCache struct {
	slots []blockSlot
	next  int // the slot a file not cached replaces once slots is full
	// point holds the buffers of pointRecord, which decodes a block for
	// one key and keeps nothing of it.
	point decodedBlock
}

// maxBlockSlots bounds the files a blockCache holds a block of: more than
// the segments a scan merges in the common case, few enough that finding
// a file's slot is a short loop.
const maxBlockSlots = 16

// blockSlot is one file's last decoded block.
type blockSlot struct {
	df *dataFile
	decodedBlock
	// cur is the record last read, whose successor a walk reads next.
	cur int
}

// decodedBlock is a block of a block file, decoded and verified (frame
// checksum, codec, size, record headers and order), with the buffers it
// reuses for the next block.
type decodedBlock struct {
	off     int64  // the block's frame offset; valid when records is not nil
	length  uint32 // and its frame's length
	records []byte // its records, decoded (aliases dec)
	bi      segment.BlockIndex
	dec     []byte // decoded records' buffer, reused
	frame   []byte // read buffer for a file read without a mapping
}

// read decodes the block whose frame is [off, off+length) in block file d
// into b; each record's own checksum is verified when it is read. A failed
// read leaves b holding no block.
func (b *decodedBlock) read(d *dataFile, off int64, length uint32) error {
	// A large value's buffers are dropped as soon as the walk moves on.
	b.dropBuffers()
	var frame []byte
	if m := d.reader(); m != nil && off >= 0 && off+int64(length) <= int64(len(m.data)) {
		frame = m.data[off : off+int64(length)]
	} else {
		var err error
		if b.frame, err = d.readFrame(b.frame, off, length); err != nil {
			return err
		}
		frame = b.frame
	}
	payload, err := wal.CheckFrame(frame, d.path, off)
	if err != nil {
		return err
	}
	records, dec, err := segment.DecodeBlock(b.dec, payload, segment.MaxBlockRecords, d.path, off)
	b.dec = dec
	if err != nil {
		return err
	}
	if segment.Codec(payload[0]) == segment.CodecNone {
		// Stored raw: keep a copy, not a slice of the mapping or of the
		// read buffer.
		b.dec = append(b.dec[:0], records...)
		records = b.dec
	}
	if err := segment.IndexBlock(&b.bi, records, d.path, off); err != nil {
		return err
	}
	b.off, b.length, b.records = off, length, records
	return nil
}

// dropBuffers forgets the block, and its buffers if they are large.
func (b *decodedBlock) dropBuffers() {
	b.records = nil
	if cap(b.dec) > maxKeptBlockBuf {
		b.dec = nil
	}
	if cap(b.frame) > maxKeptBlockBuf {
		b.frame = nil
	}
}

// reset forgets every block, keeping the buffers, so that the cache holds no
// file alive.
func (c *blockCache) reset() {
	for i := range c.slots {
		sl := &c.slots[i]
		sl.df = nil
		// A block of one large value is not kept for the cache's next
		// user (a pooled iterator, the next point read).
		sl.dropBuffers()
	}
	c.point.dropBuffers()
	c.next = 0
}

// maxKeptBlockBuf bounds the buffers a reset cache keeps: several blocks
// of small records, not a large value's.
const maxKeptBlockBuf = 64 << 10

// slot returns d's slot, or the one d takes over.
func (c *blockCache) slot(d *dataFile) *blockSlot {
	for i := range c.slots {
		if c.slots[i].df == d {
			return &c.slots[i]
		}
	}
	if len(c.slots) < maxBlockSlots {
		c.slots = append(c.slots, blockSlot{})
		sl := &c.slots[len(c.slots)-1]
		sl.df = d
		return sl
	}
	sl := &c.slots[c.next]
	c.next = (c.next + 1) % len(c.slots)
	sl.df, sl.records = d, nil
	return sl
}

// block returns the slot holding the decoded records of the block whose frame is
// [off, off+length) in block file d, verified (frame checksum, codec,
// size); each record is verified when it is read (blockRecord).
func (c *blockCache) block(d *dataFile, off int64, length uint32) (*blockSlot, error) {
	sl := c.slot(d)
	if sl.records != nil && sl.off == off {
		return sl, nil
	}
	if err := sl.read(d, off, length); err != nil {
		return nil, err
	}
	sl.cur = -1
	return sl, nil
}

// readFrame reads [off, off+length) of d through the file cache into buf
// (grown if needed).
func (d *dataFile) readFrame(buf []byte, off int64, length uint32) ([]byte, error) {
	h, err := d.s.files.acquire(d.id, d.path)
	if err != nil {
		return buf, err
	}
	defer d.s.files.release(h)
	if cap(buf) < int(length) {
		buf = make([]byte, length)
	}
	buf = buf[:length]
	if _, err := h.f.ReadAt(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			return buf, corruption.New(d.path, off, "block of %d bytes runs past the end of the file", length)
		}
		return buf, fmt.Errorf("segkv: read %s at %d: %w", d.path, off, err)
	}
	return buf, nil
}

// blockRecord returns key's record, verified, from the block [off,
// off+length) of block file d, through c: raw is the whole encoded record
// and rec its decoding, both aliasing c's buffer until c's next read of d.
// The block must hold the key with the kind the index gave.
func (c *blockCache) blockRecord(d *dataFile, off int64, length uint32, kind segment.RecordKind, key []byte) (rec segment.Record, raw []byte, err error) {
	sl, err := c.block(d, off, length)
	if err != nil {
		return segment.Record{}, nil, err
	}
	rec, raw, found, err := sl.find(d, key)
	if err != nil {
		return segment.Record{}, nil, err
	}
	if !found {
		return segment.Record{}, nil, corruption.New(d.path, off, "block holds no record of the key the index names")
	}
	if rec.Kind != kind {
		return segment.Record{}, nil, kindError(d.path, off, rec.Kind, kind)
	}
	return rec, raw, nil
}

// findRecord is blockRecord for a lookup through a block file's index
// (index.Index.BlockFile), which names the block that would hold key but
// not whether it does: found reports it, and the record's kind is the
// record's own.
func (c *blockCache) findRecord(d *dataFile, off int64, length uint32, key []byte) (rec segment.Record, found bool, err error) {
	sl, err := c.block(d, off, length)
	if err != nil {
		return segment.Record{}, false, err
	}
	rec, _, found, err = sl.find(d, key)
	return rec, found, err
}

// pointRecord is findRecord for a point read, which reads one key of the
// block: the block is decoded but not kept, and walked only as far as the
// key (segment.FindBlockRecord), without the record table a walk in key
// order builds. The frame's checksum is verified before anything in it is
// trusted: a record's own checksum proves the record's bytes but not that
// they belong there (a stale or misdirected write of the key's older
// record, byte for byte, passes it; the frame's does not). Absence is said
// only of a block whose every record verifies as well, so that a record
// damaged under a frame checksum that holds (a block written so) cannot
// hide the key it carries and let an older version answer.
func (c *blockCache) pointRecord(d *dataFile, off int64, length uint32, key []byte) (rec segment.Record, found bool, err error) {
	b := &c.point
	b.dropBuffers()
	var frame []byte
	if m := d.reader(); m != nil && off >= 0 && off+int64(length) <= int64(len(m.data)) {
		frame = m.data[off : off+int64(length)]
	} else {
		if b.frame, err = d.readFrame(b.frame, off, length); err != nil {
			return segment.Record{}, false, err
		}
		frame = b.frame
	}
	payload, err := wal.CheckFrame(frame, d.path, off)
	if err != nil {
		return segment.Record{}, false, err
	}
	records, dec, err := segment.DecodeBlock(b.dec, payload, segment.MaxBlockRecords, d.path, off)
	b.dec = dec
	if err != nil {
		return segment.Record{}, false, err
	}
	raw, found, err := segment.FindBlockRecord(records, key, d.path, off)
	if err != nil {
		return segment.Record{}, false, err
	}
	if !found {
		// Rare: the bloom filter let an absent key through.
		err = segment.ForEachBlockRecord(d.path, off, int(length), records, func(segment.Record, int64, int) error { return nil })
		return segment.Record{}, false, err
	}
	if segment.Codec(payload[0]) == segment.CodecNone {
		// Stored raw, raw aliases the mapping: the record is copied out
		// before it is verified, so that the bytes returned are the bytes
		// checked.
		b.dec = append(b.dec[:0], raw...)
		raw = b.dec
	}
	rec, n, err := segment.DecodeRecord(raw)
	switch {
	case err != nil || n != len(raw):
		return segment.Record{}, false, corruption.New(d.path, off, "record of key %q in the block: %v", key, err)
	case !bytes.Equal(rec.Key, key):
		return segment.Record{}, false, corruption.New(d.path, off, "record in the block is not the one of key %q", key)
	}
	return rec, true, nil
}

// find returns key's record in the slot's block, verified, if the block
// holds it.
func (sl *blockSlot) find(d *dataFile, key []byte) (rec segment.Record, raw []byte, found bool, err error) {
	i, found := sl.bi.Search(sl.records, key, sl.cur+1)
	if !found {
		return segment.Record{}, nil, false, nil
	}
	raw = sl.bi.Raw(sl.records, i)
	if rec, err = verifyBlockRecord(d, sl.off, i, raw); err != nil {
		return segment.Record{}, nil, false, err
	}
	sl.cur = i
	return rec, raw, true, nil
}

// verifyBlockRecord decodes record i of the block at off of d, raw, and
// verifies its checksum.
func verifyBlockRecord(d *dataFile, off int64, i int, raw []byte) (segment.Record, error) {
	rec, n, err := segment.DecodeRecord(raw)
	if err != nil || n != len(raw) {
		return segment.Record{}, corruption.New(d.path, off, "record %d of the block: %v", i, err)
	}
	return rec, nil
}

// rawValue verifies the record a block cursor gave for key (e.raw) and
// copies its value into buf (grown if needed).
func rawValue(e iterEntry, buf, key []byte) (value, _ []byte, err error) {
	rec, err := verifyRaw(e, key)
	if err != nil {
		return nil, buf, err
	}
	return copyValue(buf, rec.Value)
}

// copyValue copies v into buf (grown if needed) and returns the copy and
// the buffer it aliases.
func copyValue(buf, v []byte) (value, _ []byte, err error) {
	if cap(buf) < len(v) {
		buf = make([]byte, len(v))
	}
	buf = append(buf[:0], v...)
	return buf, buf, nil
}

// verifyRaw decodes and verifies the record a block cursor gave for key
// (e.raw): its checksum, key and kind.
func verifyRaw(e iterEntry, key []byte) (segment.Record, error) {
	rec, n, err := segment.DecodeRecord(e.raw)
	if err != nil || n != len(e.raw) {
		return segment.Record{}, corruption.New(e.df.path, e.off, "record of key %q in the block: %v", key, err)
	}
	if !bytes.Equal(rec.Key, key) || rec.Kind != e.kind {
		return segment.Record{}, corruption.New(e.df.path, e.off, "record in the block is not the one its key was read from")
	}
	return rec, nil
}

// borrowBlockCache returns a cache from the store's pool for one point
// read or probe; give it back with returnBlockCache.
func (s *Store) borrowBlockCache() *blockCache {
	if c, ok := s.blockCaches.Get().(*blockCache); ok {
		return c
	}
	return new(blockCache)
}

// returnBlockCache resets c and puts it back in the pool.
func (s *Store) returnBlockCache(c *blockCache) {
	c.reset()
	s.blockCaches.Put(c)
}

// blockCursor walks a sealed block file through its index, whose entries
// are the file's blocks (index.Index.BlockFile): it decodes each block once
// and steps through its records, so a scan or a merge reads keys and
// values from the decoded block. It keeps the block it left last beside
// the current one, so the record of the key a mergingIter took last (its
// entry's raw) stays readable while the cursor has moved one step on,
// into the next block.
type blockCursor struct {
	df  *dataFile
	r   index.Reader
	n   int // blocks
	pos int // the current block's position, -1 or n off the ends
	// bufs hold the current block (bufs[cur]) and the one before it;
	// blockAt[i] is the position of the block bufs[i] holds, or -1.
	bufs    [2]decodedBlock
	blockAt [2]int
	cur     int
	i       int // the current record in the current block
	kind    segment.RecordKind
	k       []byte
	e       error
}

// init sets the cursor up for df, whose index is ix, with bufs' buffers
// (zero: none yet).
func (c *blockCursor) init(df *dataFile, ix *index.Index, bufs [2]decodedBlock) {
	*c = blockCursor{df: df, r: ix.NewReader(), n: ix.Len(), pos: -1, blockAt: [2]int{-1, -1}, bufs: bufs}
	for i := range c.bufs {
		c.bufs[i].records = nil
	}
}

// release forgets the file and the blocks and returns the buffers, the
// large ones dropped, for another cursor.
func (c *blockCursor) release() [2]decodedBlock {
	bufs := c.bufs
	for i := range bufs {
		bufs[i].dropBuffers()
	}
	*c = blockCursor{}
	return bufs
}

// load makes block pos the current one, decoding it unless one of the
// buffers holds it.
func (c *blockCursor) load(pos int) bool {
	if c.e != nil || pos < 0 || pos >= c.n {
		c.pos = max(min(pos, c.n), -1)
		return false
	}
	c.pos = pos
	if c.blockAt[c.cur] == pos {
		return true
	}
	if c.blockAt[c.cur^1] == pos {
		c.cur ^= 1
		return true
	}
	e, err := c.r.At(pos)
	if err != nil {
		c.e = err
		return false
	}
	c.cur ^= 1
	c.blockAt[c.cur] = -1
	b := &c.bufs[c.cur]
	if err := b.read(c.df, e.Offset, e.Length); err != nil {
		c.e = err
		return false
	}
	if !b.bi.Points() || b.bi.Len() == 0 {
		c.e = corruption.New(c.df.path, e.Offset, "the index names a block without point records")
		return false
	}
	// The index's entry is the block's last key: a block that ends
	// elsewhere is not the block the index was built from.
	if _, last := b.bi.Entry(b.records, b.bi.Len()-1); !bytes.Equal(last, e.Key) {
		c.e = corruption.New(c.df.path, e.Offset, "block's last key is not the one its index entry names")
		return false
	}
	c.blockAt[c.cur] = pos
	return true
}

// at makes record i of the current block the current one.
func (c *blockCursor) at(i int) bool {
	b := &c.bufs[c.cur]
	c.i = i
	c.kind, c.k = b.bi.Entry(b.records, i)
	return true
}

func (c *blockCursor) seekGE(key []byte) bool {
	c.e = nil
	pos := 0
	if key != nil {
		if pos, c.e = c.r.Index().Search(key); c.e != nil {
			return false
		}
	}
	if !c.load(pos) {
		return false
	}
	i := 0
	if key != nil {
		b := &c.bufs[c.cur]
		i, _ = b.bi.Search(b.records, key, -1)
	}
	// The block's last key is >= key, so i is a record of it.
	return c.at(i)
}

func (c *blockCursor) seekLT(key []byte) bool {
	c.e = nil
	pos := c.n - 1
	if key != nil {
		if pos, c.e = c.r.Index().Search(key); c.e != nil {
			return false
		}
		if pos < c.n {
			if !c.load(pos) {
				return false
			}
			b := &c.bufs[c.cur]
			if i, _ := b.bi.Search(b.records, key, -1); i > 0 {
				return c.at(i - 1)
			}
		}
		pos-- // every key of block pos is >= key
	}
	if !c.load(pos) {
		return false
	}
	return c.at(c.bufs[c.cur].bi.Len() - 1)
}

func (c *blockCursor) next() bool {
	if c.pos >= 0 && c.pos < c.n && c.i+1 < c.bufs[c.cur].bi.Len() {
		return c.at(c.i + 1)
	}
	if c.pos >= c.n || !c.load(c.pos+1) {
		return false
	}
	return c.at(0)
}

func (c *blockCursor) prev() bool {
	if c.pos >= 0 && c.pos < c.n && c.i > 0 {
		return c.at(c.i - 1)
	}
	if c.pos < 0 || !c.load(c.pos-1) {
		return false
	}
	return c.at(c.bufs[c.cur].bi.Len() - 1)
}

func (c *blockCursor) key() []byte { return c.k }

// entry names the current record's block, as the entries of a block file's
// dense index do.
func (c *blockCursor) entry() (int64, uint32, segment.RecordKind) {
	b := &c.bufs[c.cur]
	return b.off, b.length, c.kind
}

// raw returns the current record's encoding, unverified (its frame was):
// valid until the cursor moves two blocks on.
func (c *blockCursor) raw() []byte {
	b := &c.bufs[c.cur]
	return b.bi.Raw(b.records, c.i)
}

func (c *blockCursor) err() error { return c.e }

// readBlockValue is readRecord for a block file: key's value copied into
// buf (grown if needed), read through c, or through a cache from the
// store's pool when c is nil (a point read, which has no walk to share a
// block with).
func (s *Store) readBlockValue(d *dataFile, c *blockCache, buf []byte, off int64, length uint32, kind segment.RecordKind, key []byte) (value, _ []byte, err error) {
	if c == nil {
		c = s.borrowBlockCache()
		defer s.returnBlockCache(c)
	}
	rec, _, err := c.blockRecord(d, off, length, kind, key)
	if err != nil {
		return nil, buf, err
	}
	return copyValue(buf, rec.Value)
}
