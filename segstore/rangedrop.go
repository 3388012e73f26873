package segstore

import (
	"bytes"
	"log/slog"

	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
)

// A range tombstone makes every sealed segment it covers whole dead (see
// coveredByRanges). A seal's commit drops those segments once the
// tombstone is in a sealed segment; but a log that truncates its head (a
// raft log store) wants the space back when the DeleteRange returns, not a
// segment later. So an Apply whose batch holds range tombstones, under
// SyncAlways, drops the sealed segments they cover right away, with one
// manifest commit of removals.
//
// Why that is safe: the tombstone is durable (SyncAlways) before the
// commit, and it stays in the live file, then in the segment sealed from
// it, so every state a crash can leave holds it: before the commit, the
// covered segments are still there but hidden by it; after, they are gone.
// Only segments older than the tombstone may go, and age is judged by
// Order: orderBoundary, read before the batch was written, is the highest
// Order then installed. A segment with a higher Order was committed after
// the batch was written: the live file it went into, sealed (alone or
// merged), an import, or the re-added set of a ReplaceAll (which may have
// discarded the tombstone with the live file). Such a segment may hold
// writes newer than the tombstone, and is never dropped here.

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

// orderBoundary returns the highest Order among the installed segments, and
// false when there are none (nothing to drop).
func (s *Store) orderBoundary() (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var max uint64
	for _, sg := range s.mu.segs {
		if sg.meta.Order > max {
			max = sg.meta.Order
		}
	}
	return max, len(s.mu.segs) > 0
}

// dropCovered removes, in one manifest commit, the installed segments with
// an Order at most boundary that spans covers whole. The batch holding
// spans is durable. A failed commit fails the store (as every failed
// manifest commit does); the batch itself stays acknowledged.
func (s *Store) dropCovered(spans []rangedel.Span, boundary uint64) {
	// Admitted like any operation, so that Close waits for the commit
	// instead of closing the manifest under it.
	if err := s.enter(true); err != nil {
		return
	}
	defer s.ops.leave()
	set := rangedel.Union(spans...)
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	// merging (the inputs of a merge step, or the segments a ReplaceAll
	// keeps) is left out: their commit decides their fate.
	s.mu.RLock()
	covered := s.appendCoveredLocked(nil, set, boundary, nil)
	s.mu.RUnlock()
	if len(covered) == 0 {
		return
	}
	if err := s.commitSegmentsLocked(nil, covered, 0, nil); err != nil {
		s.log.Error("segkv: dropping segments under a range tombstone failed", slog.Any("segments", covered), slog.Any("err", err))
		return
	}
	s.stats.rangeDrops.Add(int64(len(covered)))
	s.log.Debug("segkv: dropped segments under a range tombstone", slog.Any("segments", covered))
}
