package segstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
)

// Check verifies the store's internal consistency: every record of the live
// file decodes, the key directory points at exactly the newest record of
// every key and at nothing else, and every index entry of every sealed
// segment points at a record holding its key whose checksum verifies. It
// reads everything, so it is meant for tests and offline checks, not for a
// hot path. Writes may continue meanwhile; Check looks at a consistent view
// by holding writers off for its duration.
func (s *Store) Check() error {
	if err := s.enter(false); err != nil {
		return err
	}
	defer s.ops.leave()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range [2]*tail{s.mu.frozen, s.mu.tail} {
		if t == nil {
			continue
		}
		if err := s.checkTail(t); err != nil {
			return err
		}
	}
	for _, sg := range s.mu.segs {
		if err := s.checkSegment(sg); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) checkTail(t *tail) error {
	if t.file == nil {
		return nil // the empty stand-in of a read-only store with no live file
	}
	// The directory the file implies, built by the same rule publishes use.
	want := newTail(s, t.id)
	res, err := segment.ReplayFile(t.file, t.path, t.w.Offset(), func(r segment.Record, off int64, n int) error {
		want.apply(r.Kind, r.Key, r.Value, off, n)
		return nil
	})
	if err != nil {
		return fmt.Errorf("segkv: check %s: %w", t.path, err)
	}
	if res.Scan.End != t.w.Offset() {
		return fmt.Errorf("segkv: check %s: valid data ends at %d, writer is at %d", t.path, res.Scan.End, t.w.Offset())
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if want.records != t.records {
		return fmt.Errorf("segkv: check %s: file holds %d records, key directory counted %d", t.path, want.records, t.records)
	}
	if want.keys.len() != t.keys.len() {
		return fmt.Errorf("segkv: check %s: file holds %d keys, key directory %d", t.path, want.keys.len(), t.keys.len())
	}
	if !slices.EqualFunc(want.ranges.Set().Spans(), t.ranges.Set().Spans(), func(a, b rangedel.Span) bool {
		return bytes.Equal(a.Start, b.Start) && bytes.Equal(a.End, b.End)
	}) {
		return fmt.Errorf("segkv: check %s: file holds range tombstones %q, key directory %q", t.path, want.ranges.Set().Spans(), t.ranges.Set().Spans())
	}
	var bad error
	var prev *liveEntry
	t.keys.tr.Scan(func(l liveEntry) bool {
		if w, ok := want.keys.tr.Get(l); !ok || w != l {
			bad = fmt.Errorf("segkv: check %s: key %q at %+v in the key directory, newest record at %+v", t.path, l.key, l, w)
		} else if prev != nil && l.key <= prev.key {
			bad = fmt.Errorf("segkv: check %s: key directory out of order at %q after %q", t.path, l.key, prev.key)
		}
		prev = &l
		return bad == nil
	})
	return bad
}

func (s *Store) checkSegment(sg *sealed) error {
	h, err := s.files.acquire(sg.df.id, sg.df.path)
	if err != nil {
		return err
	}
	defer s.files.release(h)
	digest, err := segment.Digest(h.f, sg.meta.DataLength)
	if err != nil {
		return err
	}
	if digest != sg.meta.DataDigest {
		return fmt.Errorf("%w: %s: digest %016x, manifest has %016x", ErrCorrupt, sg.df.path, digest, sg.meta.DataDigest)
	}
	// Rebuilding proves the index holds exactly the newest record of every
	// key of the data file, no more and no less.
	built, err := index.Build(s.fs, sg.df.path, sg.meta.DataLength)
	if err != nil {
		return fmt.Errorf("segkv: check %s: %w", sg.df.path, err)
	}
	ix := sg.index()
	id := index.Identity{DataLength: sg.meta.DataLength, DataDigest: sg.meta.DataDigest}
	data, err := built.Anchored(sg.meta.IndexChecksum)
	if err != nil {
		return fmt.Errorf("%w: check %s: %v", ErrCorrupt, sg.df.path, err)
	}
	rebuilt, err := index.Decode(sg.df.path, data, sg.meta.IndexChecksum, id)
	if err != nil {
		return fmt.Errorf("segkv: check %s: %w", sg.df.path, err)
	}
	if rebuilt.Checksum() != ix.Checksum() || ix.Anchor() != sg.meta.IndexChecksum {
		return fmt.Errorf("%w: check %s: rebuilt index %016x, loaded %016x (anchor %016x), manifest %016x",
			ErrCorrupt, sg.df.path, rebuilt.Checksum(), ix.Checksum(), ix.Anchor(), sg.meta.IndexChecksum)
	}
	// Every block and bloom chunk of the loaded index, not only those reads
	// reached so far; a damaged one heals the index (it is a cache), and
	// what is compared below is what reads answer from.
	if err := ix.Scrub(); err != nil {
		return fmt.Errorf("segkv: check %s: %w", sg.df.path, err)
	}
	blocks, err := sg.df.blockFormat()
	if err != nil {
		return fmt.Errorf("segkv: check %s: %w", sg.df.path, err)
	}
	var cache blockCache
	defer cache.reset()
	if ix.BlockFile() {
		return checkBlockEntries(sg, ix, &cache)
	}
	if uint64(ix.Len()) != sg.meta.Keys {
		return fmt.Errorf("segkv: check %s: index has %d keys, manifest %d", sg.df.path, ix.Len(), sg.meta.Keys)
	}
	for i := 0; i < ix.Len(); i++ {
		e, err := ix.At(i)
		if err != nil {
			return fmt.Errorf("segkv: check %s entry %d: %w", sg.df.path, i, err)
		}
		var rec segment.Record
		if blocks {
			rec, _, err = cache.blockRecord(sg.df, e.Offset, e.Length, e.Kind, e.Key)
		} else {
			rec, err = segment.ReadRecord(h.f, sg.df.path, e.Offset, int(e.Length), e.Key)
		}
		if err != nil {
			return fmt.Errorf("segkv: check %s entry %d: %w", sg.df.path, i, err)
		}
		if rec.Kind != e.Kind {
			return fmt.Errorf("segkv: check %s entry %d: record is a %v, index says %v", sg.df.path, i, rec.Kind, e.Kind)
		}
	}
	return nil
}

// VerifyReport lists what a Verify scrub found.
type VerifyReport struct {
	Segments int     // sealed segments checked
	Bytes    int64   // data bytes read
	Damaged  []error // one *CorruptionError (or I/O error) per damaged segment
}

// Verify scrubs every sealed segment: it reads each data file in full and
// compares it with the digest the manifest recorded, then checks every frame
// and record. It reports damage instead of stopping at the first: a damaged
// segment is listed with its file and offset, and the others are still
// checked. Reads and writes continue meanwhile; segments merged away during
// the scrub stay readable until it is done.
//
// Close cancels a Verify in progress: it returns ErrClosed after the
// segment it is reading, and Close waits for that.
func (s *Store) Verify(ctx context.Context) (VerifyReport, error) {
	if ctx == nil {
		return VerifyReport{}, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	if err := s.enter(false); err != nil {
		return VerifyReport{}, err
	}
	defer s.ops.leave()
	ctx, done := s.opContext(ctx)
	defer done()
	sn, err := s.NewSnapshot()
	if err != nil {
		return VerifyReport{}, err
	}
	defer sn.Close()
	var rep VerifyReport
	for _, sg := range sn.segs {
		if err := ctxErr(ctx); err != nil {
			return rep, err
		}
		rep.Segments++
		rep.Bytes += sg.meta.DataLength
		if err := s.verifySegment(sg); err != nil {
			rep.Damaged = append(rep.Damaged, err)
		}
	}
	return rep, nil
}

func (s *Store) verifySegment(sg *sealed) error {
	h, err := s.files.acquire(sg.df.id, sg.df.path)
	if err != nil {
		return err
	}
	defer s.files.release(h)
	size, err := h.f.Size()
	if err != nil {
		return fmt.Errorf("segkv: verify %s: %w", sg.df.path, err)
	}
	if size < sg.meta.DataLength {
		return corruption.New(sg.df.path, size, "file is %d bytes, the manifest recorded %d", size, sg.meta.DataLength)
	}
	// Frames and records first: they locate damage to the byte.
	res, err := segment.ReplayFile(h.f, sg.df.path, sg.meta.DataLength, func(segment.Record, int64, int) error { return nil })
	if err != nil {
		return err
	}
	if res.Scan.End != sg.meta.DataLength {
		return corruption.New(sg.df.path, res.Scan.End, "frames end at %d, the manifest recorded %d bytes", res.Scan.End, sg.meta.DataLength)
	}
	digest, err := segment.Digest(h.f, sg.meta.DataLength)
	if err != nil {
		return err
	}
	if digest != sg.meta.DataDigest {
		return corruption.New(sg.df.path, -1, "digest %016x, the manifest recorded %016x", digest, sg.meta.DataDigest)
	}
	return nil
}

// checkBlockEntries checks each block a block file's index names: it
// decodes, every record in it verifies, and its last key is the entry's;
// and the blocks hold as many keys as the manifest recorded.
func checkBlockEntries(sg *sealed, ix *index.Index, c *blockCache) error {
	var keys uint64
	for i := 0; i < ix.Len(); i++ {
		e, err := ix.At(i)
		if err != nil {
			return fmt.Errorf("segkv: check %s block entry %d: %w", sg.df.path, i, err)
		}
		sl, err := c.block(sg.df, e.Offset, e.Length)
		if err != nil {
			return fmt.Errorf("segkv: check %s block entry %d: %w", sg.df.path, i, err)
		}
		n := sl.bi.Len()
		for j := range n {
			if _, err := verifyBlockRecord(sg.df, e.Offset, j, sl.bi.Raw(sl.records, j)); err != nil {
				return fmt.Errorf("segkv: check %s: %w", sg.df.path, err)
			}
		}
		if _, last := sl.bi.Entry(sl.records, max(n-1, 0)); n == 0 || !sl.bi.Points() || !bytes.Equal(last, e.Key) {
			return fmt.Errorf("%w: check %s block entry %d: the block at %d does not end with the entry's key", ErrCorrupt, sg.df.path, i, e.Offset)
		}
		keys += uint64(n)
	}
	if keys != sg.meta.Keys {
		return fmt.Errorf("segkv: check %s: index's blocks hold %d keys, manifest %d", sg.df.path, keys, sg.meta.Keys)
	}
	return nil
}
