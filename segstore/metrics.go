package segstore

import (
	"slices"
	"sync/atomic"
)

// counters are the store's running totals, updated with atomics so that
// Metrics is cheap enough to poll.
type counters struct {
	writes         atomic.Int64
	seals          atomic.Int64
	sealDataSyncs  atomic.Int64
	sparesMade     atomic.Int64
	spareMisses    atomic.Int64
	filesRemoved   atomic.Int64
	merges         atomic.Int64
	mergedBytesIn  atomic.Int64
	mergedBytesOut atomic.Int64
	indexRebuilds  atomic.Int64
	writeStalls    atomic.Int64
	imports        atomic.Int64
	rangeDrops     atomic.Int64
}

// Metrics is a point-in-time summary of the store.
type Metrics struct {
	Segments       int   // sealed segments
	SegmentBytes   int64 // bytes of sealed data files
	LiveBytes      int64 // bytes appended to the live file
	OpenFiles      int   // sealed segment files held open
	Writes         int64 // acknowledged Put/Delete/Apply calls
	Seals          int64
	SealDataSyncs  int64 // seals that had to fdatasync the sealed file themselves
	SparesMade     int64 // live files made ahead of need
	SpareMisses    int64 // seals that found no spare ready and made one on their path
	ManifestSeq    uint64
	Merges         int64 // merge steps committed
	MergedBytesIn  int64 // data bytes read by merges
	MergedBytesOut int64 // data bytes written by merges
	FilesRemoved   int64 // data files removed after their last reader
	IndexRebuilds  int64 // indexes rebuilt from their data file (at Open or later)
	WriteStalls    int64 // writes that waited for a seal's switch
	OpenSnapshots  int64 // snapshots and iterators not yet closed
	Imported       int64 // segments adopted by Import
	// RangeDropped counts sealed segments dropped whole because a newer
	// range tombstone covers every key they hold.
	RangeDropped int64
	// MergeBacklog is the number of segments the background merge would
	// take in its next step: 0 when it has nothing to do (or is disabled).
	// A step in progress counts until it commits, so 0 also means no merge
	// is running. A gauge.
	MergeBacklog int
}

// Metrics returns the store's current metrics.
func (s *Store) Metrics() Metrics {
	m := Metrics{
		Writes:         s.stats.writes.Load(),
		Seals:          s.stats.seals.Load(),
		SealDataSyncs:  s.stats.sealDataSyncs.Load(),
		SparesMade:     s.stats.sparesMade.Load(),
		SpareMisses:    s.stats.spareMisses.Load(),
		OpenFiles:      s.files.openCount(),
		ManifestSeq:    s.mlog.Seq(),
		Merges:         s.stats.merges.Load(),
		MergedBytesIn:  s.stats.mergedBytesIn.Load(),
		MergedBytesOut: s.stats.mergedBytesOut.Load(),
		FilesRemoved:   s.stats.filesRemoved.Load(),
		IndexRebuilds:  s.stats.indexRebuilds.Load(),
		WriteStalls:    s.stats.writeStalls.Load(),
		OpenSnapshots:  s.snapshots.Load(),
		Imported:       s.stats.imports.Load(),
		RangeDropped:   s.stats.rangeDrops.Load(),
	}
	s.mu.RLock()
	m.Segments = len(s.mu.segs)
	for _, sg := range s.mu.segs {
		m.SegmentBytes += sg.meta.DataLength
	}
	m.LiveBytes = s.mu.tail.w.Offset()
	var oldestFirst []*sealed
	if !s.mergeOpts.Disable {
		oldestFirst = slices.Clone(s.mu.segs)
	}
	s.mu.RUnlock()
	if len(oldestFirst) > 0 {
		slices.Reverse(oldestFirst)
		run := pickRun(oldestFirst, s.mergeOpts, false)
		if len(run) == 0 {
			run = pickUnordered(oldestFirst, s.mergeOpts)
		}
		m.MergeBacklog = len(run)
	}
	return m
}
