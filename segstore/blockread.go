package segstore

import (
	"errors"
	"fmt"
	"io"

	"github.com/segkv/segkv/corruption"
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
}

// maxBlockSlots bounds the files a blockCache holds a block of: more than
// the segments a scan merges in the common case, few enough that finding
// a file's slot is a short loop.
const maxBlockSlots = 16

// blockSlot is one file's last decoded block.
type blockSlot struct {
	df      *dataFile
	off     int64  // the block's frame offset; valid when records is not nil
	records []byte // its records, decoded (aliases dec)
	// bi locates records' records; cur is the record last read, whose
	// successor a walk reads next.
	bi    segment.BlockIndex
	cur   int
	dec   []byte // decoded records' buffer, reused
	frame []byte // read buffer for a file read without a mapping
}

// reset forgets every block, keeping the buffers, so that the cache holds no
// file alive.
func (c *blockCache) reset() {
	for i := range c.slots {
		sl := &c.slots[i]
		sl.df, sl.records = nil, nil
		// A block of one large value is not kept for the cache's next
		// user (a pooled iterator, the next point read).
		if cap(sl.dec) > maxKeptBlockBuf {
			sl.dec = nil
		}
		if cap(sl.frame) > maxKeptBlockBuf {
			sl.frame = nil
		}
	}
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
	sl.records = nil
	// A large value's buffers are dropped as soon as the walk moves on.
	if cap(sl.dec) > maxKeptBlockBuf {
		sl.dec = nil
	}
	if cap(sl.frame) > maxKeptBlockBuf {
		sl.frame = nil
	}
	var frame []byte
	if m := d.reader(); m != nil && off >= 0 && off+int64(length) <= int64(len(m.data)) {
		frame = m.data[off : off+int64(length)]
	} else {
		var err error
		if sl.frame, err = d.readFrame(sl.frame, off, length); err != nil {
			return nil, err
		}
		frame = sl.frame
	}
	payload, err := wal.CheckFrame(frame, d.path, off)
	if err != nil {
		return nil, err
	}
	records, dec, err := segment.DecodeBlock(sl.dec, payload, segment.MaxBlockRecords, d.path, off)
	sl.dec = dec
	if err != nil {
		return nil, err
	}
	if segment.Codec(payload[0]) == segment.CodecNone {
		// Stored raw: keep a copy, not a slice of the mapping or of the
		// read buffer.
		sl.dec = append(sl.dec[:0], records...)
		records = sl.dec
	}
	if err := segment.IndexBlock(&sl.bi, records, d.path, off); err != nil {
		return nil, err
	}
	sl.off, sl.records, sl.cur = off, records, -1
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
	i, found := sl.bi.Search(sl.records, key, sl.cur+1)
	if !found {
		return segment.Record{}, nil, corruption.New(d.path, off, "block holds no record of the key the index names")
	}
	raw = sl.bi.Raw(sl.records, i)
	rec, n, err := segment.DecodeRecord(raw)
	if err != nil || n != len(raw) {
		return segment.Record{}, nil, corruption.New(d.path, off, "record %d of the block: %v", i, err)
	}
	if rec.Kind != kind {
		return segment.Record{}, nil, kindError(d.path, off, rec.Kind, kind)
	}
	sl.cur = i
	return rec, raw, nil
}

// readBlockValue is readRecord for a block file: key's value copied into
// buf (grown if needed), read through c, or through a cache from the
// store's pool when c is nil (a point read, which has no walk to share a
// block with).
func (s *Store) readBlockValue(d *dataFile, c *blockCache, buf []byte, off int64, length uint32, kind segment.RecordKind, key []byte) (value, _ []byte, err error) {
	if c == nil {
		pc, ok := s.blockCaches.Get().(*blockCache)
		if !ok {
			pc = new(blockCache)
		}
		defer func() {
			pc.reset()
			s.blockCaches.Put(pc)
		}()
		c = pc
	}
	rec, _, err := c.blockRecord(d, off, length, kind, key)
	if err != nil {
		return nil, buf, err
	}
	if cap(buf) < len(rec.Value) {
		buf = make([]byte, len(rec.Value))
	}
	buf = append(buf[:0], rec.Value...)
	return buf, buf, nil
}
