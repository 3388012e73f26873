package segstore

import (
	"context"
	"fmt"
	"io"
	"slices"
)

// NewSealedSnapshot seals the live file (when it holds data) and returns a
// snapshot whose whole state lies in sealed segments: taken atomically with
// respect to writes (no write lands between the seal and the pin), so
// sn.Segments() lists every segment needed to reproduce exactly what
// sn.Get and its iterators see, and sn.Export streams each of them. This is
// how a replicated state machine snapshots a store: export the listed
// segments, and on the other side install them with ReplaceAll.
//
// The segments are pinned until the snapshot is closed, so merges that
// retire them meanwhile do not remove their files. The seal costs what Seal
// costs (at most one fdatasync of the sealed file and one manifest commit);
// writers wait only for the seal's switch, as for Seal, or, when the live
// file is empty, for the instant the segment list is pinned. Close the
// snapshot.
func (s *Store) NewSealedSnapshot() (*Snapshot, error) {
	if err := s.enter(true); err != nil {
		return nil, err
	}
	defer s.ops.leave()
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	for {
		if err := s.failed(); err != nil {
			return nil, err
		}
		// Under sealMu only a seal or a ReplaceAll changes the live file,
		// and both need sealMu: live stays the live file.
		s.mu.RLock()
		live := s.mu.tail
		s.mu.RUnlock()
		if live.empty() {
			// Nothing to seal, unless a write lands now: hold writers off
			// while the check is repeated and the segments are pinned.
			s.writeMu.Lock()
			if live.empty() {
				s.mu.RLock()
				sn := s.pinSealed(nil)
				s.mu.RUnlock()
				s.writeMu.Unlock()
				return sn, nil
			}
			s.writeMu.Unlock()
		}
		var sn *Snapshot
		seg, err := s.sealLocked(func(frozen *tail) {
			// At the switch: writers are held off and every write before
			// it is in frozen, which becomes seg.
			sn = s.pinSealed(frozen)
		}, nil)
		if err != nil {
			if sn != nil {
				sn.Close()
			}
			return nil, err
		}
		if seg == nil {
			// Found empty after all (records only grow, so not in
			// practice): take the empty path again.
			continue
		}
		// The pin taken on frozen's data file at the switch is the one on
		// seg's: a sealed segment keeps its live file's data file.
		sn.segs = append([]*sealed{seg}, sn.segs...)
		sn.pinnedFrozen = nil
		// The seal's commit may not be the only one since the pin (a
		// merge may have committed between): the snapshot's list is a
		// manifest state only if it is the installed one now.
		sn.seq = 0
		s.mu.RLock()
		if slices.Equal(s.mu.segs, sn.segs) {
			sn.seq = s.mu.segsSeq
		}
		s.mu.RUnlock()
		return sn, nil
	}
}

// pinSealed returns a snapshot of the sealed segments, pinned, and, if
// frozen is not nil, a pin on the data file of the live file being sealed,
// whose segment the caller adds once its seal has committed. mu held
// (shared or exclusive) and no write in progress (writeMu held, or the
// seal's switch).
func (s *Store) pinSealed(frozen *tail) *Snapshot {
	sn := &Snapshot{s: s, segs: slices.Clone(s.mu.segs), seq: s.mu.segsSeq}
	for _, sg := range sn.segs {
		sg.df.pin()
	}
	if frozen != nil {
		frozen.df.pin()
		sn.pinnedFrozen = frozen.df
	}
	s.snapshots.Add(1)
	return sn
}

// Segments lists the sealed segments the snapshot pins, oldest first
// (ascending Order), as they were when it was taken. For a snapshot from
// NewSnapshot the live file's writes are not among them; for one from
// NewSealedSnapshot they are the snapshot's whole state. It is metadata
// only and answers after Close too.
func (sn *Snapshot) Segments() []SegmentInfo {
	out := make([]SegmentInfo, len(sn.segs))
	for i, sg := range sn.segs {
		out[len(sn.segs)-1-i] = infoOf(sg.meta)
	}
	return out
}

// ManifestSeq returns the ManifestSeq of the manifest state whose sealed
// segments are exactly those Segments lists: the commit that installed
// them, so a caller that records (ManifestSeq, Segments) pairs, as a backup
// does, never labels a list with a commit it does not reflect (the store's
// own ManifestSeq can run ahead of the segments readers see, between a
// commit and its install). For NewSnapshot it is always known. For
// NewSealedSnapshot it is 0 (unknown) when another commit (a merge)
// changed the segments between the seal's switch and the snapshot's
// return, since the list is then no manifest state at all.
func (sn *Snapshot) ManifestSeq() uint64 { return sn.seq }

// Export streams one of the snapshot's pinned segments to w: the same
// stream as Store.Export, checked against the digest the snapshot lists. A
// merge that retires the segment after the snapshot was taken does not make
// it fail (the pin keeps the file). It returns ErrNoSegment for an id the
// snapshot does not hold, and ErrClosed once the snapshot or the store is
// closed (also when that happens mid-stream). Closing the snapshot does not
// wait for an export in progress; the export keeps the file until it is
// done.
func (sn *Snapshot) Export(ctx context.Context, id uint64, w io.Writer) (int64, error) {
	if ctx == nil || w == nil {
		return 0, fmt.Errorf("%w: nil context or writer", ErrInvalidOption)
	}
	s := sn.s
	if err := s.enter(false); err != nil {
		return 0, err
	}
	defer s.ops.leave()
	ctx, done := s.opContext(ctx)
	defer done()
	sn.readMu.RLock()
	if sn.closed.Load() {
		sn.readMu.RUnlock()
		return 0, ErrClosed
	}
	var sg *sealed
	for _, c := range sn.segs {
		if c.meta.ID == id {
			sg = c
			break
		}
	}
	if sg != nil {
		// A pin of the export's own: closing the snapshot meanwhile drops
		// the snapshot's, and the file must stay until the export is done.
		sg.df.pin()
	}
	sn.readMu.RUnlock()
	if sg == nil {
		return 0, fmt.Errorf("%w: %d (not in the snapshot)", ErrNoSegment, id)
	}
	defer sg.df.unpin()
	return s.exportSegment(ctx, sg, w, func() error {
		if sn.closed.Load() {
			return ErrClosed
		}
		return nil
	})
}
