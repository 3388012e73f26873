package segstore

import (
	"bytes"
	"log/slog"
	"math"

	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
)

// A range tombstone makes every sealed segment it covers whole dead (see
// coveredByRanges). A seal's commit drops those segments once the
// tombstone is in a sealed segment; but a log that truncates its head (a
// raft log store) wants the space back when the DeleteRange returns, not a
// segment later. So an Apply whose batch holds range tombstones, under
// SyncAlways, seals the live file at once when they cover a sealed segment
// whole: the seal's one manifest commit names the segment that now holds
// the tombstone and drops the segments it covers, together.
//
// Why together: every manifest commit must name a set of segments that,
// read alone, is a state the store held, because followers, backups and
// snapshots read exactly that set. A commit that dropped the covered
// segments while the tombstone was still only in the live file would name
// a state without the covered keys and without the tombstone, in which an
// older segment's value of a covered key (hidden by the dropped segment
// until then) would come back. The seal commits the tombstone (and every
// write before it) with the drop.
//
// Only segments older than the sealed file are dropped (coveredByRanges
// judges age by Order): a segment committed after the batch was written but
// before the seal (an import, sealed beneath the live file; the re-added
// set of a ReplaceAll, which discarded the live file and the tombstone with
// it) is either shadowed by the tombstone in the sealed file, or not
// covered by any tombstone of the file sealed.

// rangeSpans returns copies of the batch's range tombstones, nil if it has
// none.
func (b *Batch) rangeSpans() []rangedel.Span {
	var out []rangedel.Span
	for _, e := range b.entries {
		if e.kind != segment.KindRangeDelete {
			continue
		}
		start := b.key(e)
		end := b.buf[e.keyOff+e.keyLen : e.keyOff+e.keyLen+e.valLen]
		out = append(out, rangedel.Span{Start: bytes.Clone(start), End: bytes.Clone(end)})
	}
	return out
}

// anyCovered reports whether the union of spans covers an installed
// segment whole (one a seal with these tombstones would drop). It is the
// cheap test that decides whether a range delete seals at once.
func (s *Store) anyCovered(spans []rangedel.Span) bool {
	set := rangedel.Union(spans...)
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.appendCoveredLocked(nil, set, math.MaxUint64, nil)) > 0
}

// sealForRangeDrop seals the live file, which holds the durable range
// tombstones spans, when they cover a sealed segment whole: the seal's
// commit drops the covered segments (commitLocked). A failed seal fails
// the store (as every failed seal does); the batch itself stays
// acknowledged.
func (s *Store) sealForRangeDrop(spans []rangedel.Span) {
	// Admitted like any operation, so that Close waits for the seal
	// instead of closing the manifest under it.
	if err := s.enter(true); err != nil {
		return
	}
	defer s.ops.leave()
	if !s.anyCovered(spans) {
		return
	}
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if _, err := s.sealLocked(nil, nil); err != nil {
		s.log.Error("segkv: sealing a range tombstone to drop the segments it covers failed", slog.Any("err", err))
	}
}
