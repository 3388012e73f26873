package segstore

import (
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/vfs"
)

// counters are the store's running totals, updated with atomics so that
// Metrics is cheap enough to poll. The read counters come first and sit on
// cache lines of their own: every Get adds to them from every core, and
// sharing a line with counters the write path bumps would make readers and
// writers take the line from each other.
type counters struct {
	getHits     atomic.Int64
	getMisses   atomic.Int64
	getErrors   atomic.Int64
	bloomNegs   atomic.Int64
	readBytes   atomic.Int64
	_           [64 - 5*8%64]byte
	writes      atomic.Int64
	writeBytes  atomic.Int64
	_           [64 - 2*8%64]byte
	seals       atomic.Int64
	sealedBytes atomic.Int64

	sealDataSyncs  atomic.Int64
	sparesMade     atomic.Int64
	spareMisses    atomic.Int64
	filesRemoved   atomic.Int64
	merges         atomic.Int64
	rewrites       atomic.Int64
	mergedBytesIn  atomic.Int64
	mergedBytesOut atomic.Int64
	indexRebuilds  atomic.Int64
	writeStalls    atomic.Int64
	imports        atomic.Int64
	importBatches  atomic.Int64
	importedBytes  atomic.Int64
	rangeDrops     atomic.Int64
	bgErrors       atomic.Int64

	manifestCommits histogram
	dataSyncs       histogram
}

// HistogramBuckets is the number of buckets of a Histogram.
const HistogramBuckets = 20

// histogramFirstBound is the upper bound of a Histogram's first bucket;
// each later bucket's bound is twice the one before.
const histogramFirstBound = 8 * time.Microsecond

// Histogram is a latency distribution with fixed, exponential buckets:
// bucket i counts the observations d with
//
//	UpperBound(i-1) < d <= UpperBound(i)
//
// where UpperBound(i) = 8µs × 2^i for i < HistogramBuckets-1 (8µs, 16µs,
// 32µs ... about 2.1s), and the last bucket counts everything slower. The
// buckets are not cumulative; Count is their sum. The figures only grow:
// each is a counter, so a rate is the difference of two readings.
type Histogram struct {
	Count   int64                   // observations
	Sum     time.Duration           // their total duration
	Buckets [HistogramBuckets]int64 // observations per bucket, see UpperBound
}

// UpperBound returns the inclusive upper bound of bucket i; the last bucket
// (i = HistogramBuckets-1) has none and returns the largest Duration.
func (Histogram) UpperBound(i int) time.Duration {
	if i >= HistogramBuckets-1 {
		return time.Duration(1<<63 - 1)
	}
	return histogramFirstBound << i
}

// Mean returns Sum/Count, or 0 without observations.
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.Count)
}

// histogram is a Histogram updated with atomics: three adds per
// observation, no lock.
type histogram struct {
	count   atomic.Int64
	sum     atomic.Int64
	buckets [HistogramBuckets]atomic.Int64
}

// bucketOf returns the bucket of a duration: the smallest i with
// d <= 8µs << i, capped at the last bucket.
func bucketOf(d time.Duration) int {
	if d <= histogramFirstBound {
		return 0
	}
	// ceil(d / 8µs) as a power of two: the bit length of (q-1) for q > 1.
	q := (uint64(d) + uint64(histogramFirstBound) - 1) / uint64(histogramFirstBound)
	return min(bits.Len64(q-1), HistogramBuckets-1)
}

func (h *histogram) observe(d time.Duration) {
	h.count.Add(1)
	h.sum.Add(int64(d))
	h.buckets[bucketOf(d)].Add(1)
}

// since observes the time elapsed since start.
func (h *histogram) since(start time.Time) { h.observe(time.Since(start)) }

func (h *histogram) snapshot() Histogram {
	var out Histogram
	for i := range h.buckets {
		out.Buckets[i] = h.buckets[i].Load()
		out.Count += out.Buckets[i]
	}
	// Count is the sum of the buckets read, so that the two agree even
	// when an observation lands between the loads; Sum may then be one
	// observation ahead.
	out.Sum = time.Duration(h.sum.Load())
	return out
}

// Metrics is a point-in-time summary of the store. Every field is either a
// counter, a total since Open that only grows (a rate is the difference of
// two readings divided by the time between them), or a gauge, a current
// value that goes up and down. Counters start at zero at every Open.
type Metrics struct {
	Segments      int   // gauge: sealed segments
	SegmentBytes  int64 // gauge: bytes of sealed data files
	LiveBytes     int64 // gauge: bytes appended to the live file
	OpenFiles     int   // gauge: sealed segment files held open (file cache)
	Writes        int64 // counter: acknowledged Put/Delete/DeleteRange/Apply calls
	Seals         int64 // counter: live files sealed into segments (Seal, automatic, on Close)
	SealDataSyncs int64 // counter: seals that had to fdatasync the sealed file themselves
	SparesMade    int64 // counter: live files made ahead of need
	SpareMisses   int64 // counter: seals that found no spare ready and made one on their path
	ManifestSeq   uint64
	Merges        int64 // counter: merge steps committed
	// Rewrites counts the merge steps that rewrote one segment alone (for
	// its garbage or into key order), among Merges. A counter.
	Rewrites       int64
	MergedBytesIn  int64 // counter: data bytes read by merges (their inputs' data length)
	MergedBytesOut int64 // counter: data bytes written by merges (their outputs' data length)
	FilesRemoved   int64 // counter: data files removed after their last reader
	IndexRebuilds  int64 // counter: indexes rebuilt from their data file (at Open or later)
	WriteStalls    int64 // counter: writes that waited for a seal's switch
	OpenSnapshots  int64 // gauge: snapshots and iterators not yet closed
	Imported       int64 // counter: segments adopted by Import
	// RangeDropped counts sealed segments dropped whole because a newer
	// range tombstone covers every key they hold. A counter.
	RangeDropped int64
	// MergeBacklog is the number of segments the background merge would
	// take in its next step: 0 when it has nothing to do (or is disabled),
	// which includes that no segment's garbage reaches GarbageRatio. A
	// step in progress counts until it commits, so 0 also means no merge
	// is running. A gauge.
	MergeBacklog int
	// GarbageBytes estimates the bytes of sealed segments that no read can
	// reach: records that newer segments supersede or delete, and point
	// tombstones with nothing older left to delete. The merge rewrites a
	// segment without them once they reach MergeOptions.GarbageRatio of
	// it. A gauge.
	GarbageBytes int64

	// Gets is a counter of Get calls that returned (GetHits + GetMisses +
	// the calls that failed, with an error other than ErrNotFound).
	Gets int64
	// GetHits is a counter of Gets that found a value.
	GetHits int64
	// GetMisses is a counter of Gets that returned ErrNotFound.
	GetMisses int64
	// BloomNegatives is a counter of sealed segments a Get skipped because
	// their bloom filter ruled the key out (a Get that misses in every one
	// of n segments adds up to n): the reads the filters saved.
	BloomNegatives int64
	// ReadBytes is a counter of record bytes Get read and verified (key,
	// value and framing of each record found).
	ReadBytes int64
	// WriteBytes is a counter of the bytes of acknowledged writes appended
	// to the live file (the records, before the group's frame header).
	WriteBytes int64
	// SealedBytes is a counter of data bytes sealed into segments.
	SealedBytes int64
	// Imports is a counter of Import calls that committed at least one
	// segment; ImportedBytes of the data bytes of the segments they added.
	Imports       int64
	ImportedBytes int64
	// BackgroundErrors is a counter of failures of background work (a
	// seal, an interval sync, a merge step, making a spare, writing an
	// index file): each is also an EventListener.BackgroundError event.
	BackgroundErrors int64
	// Failed is a gauge: true once the store stopped accepting writes
	// (ErrFailed) until it is reopened.
	Failed bool

	// ManifestCommits is the latency of the store's manifest commits (a
	// seal, a merge step, an import, a ReplaceAll, a range drop): each is
	// one append and one fdatasync of the manifest log, or a wait for the
	// group it joined. Count is the number of commits.
	ManifestCommits Histogram
	// DataSyncs is the latency of the fdatasyncs of data files: those of
	// the live file (a group commit under SyncAlways, Sync, the interval
	// sync, a seal's barrier), of each merge or import output and of each
	// new live file. Count is the number of fdatasync calls, shared by
	// every write of a group.
	DataSyncs Histogram

	// Files is a gauge of the files the store keeps in its directory: the
	// sealed data files, one index file per sealed segment, the live file
	// (and a file being sealed), a spare live file when one is ready, and
	// the manifest log. The LOCK file is not counted.
	Files int
	// IndexBytes is a gauge of the bytes of the sealed segments' indexes
	// (their files' size).
	IndexBytes int64
	// ManifestBytes is a gauge of the current manifest log file's size
	// (checkpoint and the edits appended since).
	ManifestBytes int64
	// DiskBytes is a gauge of SegmentBytes + IndexBytes + ManifestBytes +
	// the written length of the live file (and of a file being sealed):
	// what the store's data takes on disk, not counting the space
	// preallocated ahead of the live file and spare files (up to
	// Options.SegmentSize each).
	DiskBytes int64
}

// Metrics returns the store's current metrics. It takes the read view's
// lock shared for a moment and the manifest log's lock briefly; call it as
// often as a scraper wants.
func (s *Store) Metrics() Metrics {
	m := Metrics{
		Writes:           s.stats.writes.Load(),
		Seals:            s.stats.seals.Load(),
		SealDataSyncs:    s.stats.sealDataSyncs.Load(),
		SparesMade:       s.stats.sparesMade.Load(),
		SpareMisses:      s.stats.spareMisses.Load(),
		OpenFiles:        s.files.openCount(),
		ManifestSeq:      s.mlog.Seq(),
		Merges:           s.stats.merges.Load(),
		Rewrites:         s.stats.rewrites.Load(),
		MergedBytesIn:    s.stats.mergedBytesIn.Load(),
		MergedBytesOut:   s.stats.mergedBytesOut.Load(),
		FilesRemoved:     s.stats.filesRemoved.Load(),
		IndexRebuilds:    s.stats.indexRebuilds.Load(),
		WriteStalls:      s.stats.writeStalls.Load(),
		OpenSnapshots:    s.snapshots.Load(),
		Imported:         s.stats.imports.Load(),
		RangeDropped:     s.stats.rangeDrops.Load(),
		GetHits:          s.stats.getHits.Load(),
		GetMisses:        s.stats.getMisses.Load(),
		BloomNegatives:   s.stats.bloomNegs.Load(),
		ReadBytes:        s.stats.readBytes.Load(),
		WriteBytes:       s.stats.writeBytes.Load(),
		SealedBytes:      s.stats.sealedBytes.Load(),
		Imports:          s.stats.importBatches.Load(),
		ImportedBytes:    s.stats.importedBytes.Load(),
		BackgroundErrors: s.stats.bgErrors.Load(),
		Failed:           s.failure.Load() != nil,
		ManifestCommits:  s.stats.manifestCommits.snapshot(),
		DataSyncs:        s.stats.dataSyncs.snapshot(),
	}
	m.Gets = m.GetHits + m.GetMisses + s.stats.getErrors.Load()
	ms := s.mlog.Stats()
	m.ManifestBytes = ms.CheckpointBytes + ms.BytesSinceCheckpoint
	m.Files = 1 // the manifest log
	// The estimates below need the segments' indexes, which Close
	// releases: once Close has begun they are left out.
	estimate := s.ops.enter() == nil
	if estimate {
		defer s.ops.leave()
	}
	s.mu.RLock()
	// One view for every figure of the segments: the garbage estimates and
	// the backlog are computed on this list, pinned, after mu is released.
	newestFirst, seq := slices.Clone(s.mu.segs), s.mu.segsSeq
	if estimate {
		for _, sg := range newestFirst {
			sg.df.pin()
		}
		defer func() {
			for _, sg := range newestFirst {
				sg.df.unpin()
			}
		}()
	}
	m.Segments = len(s.mu.segs)
	for _, sg := range s.mu.segs {
		m.SegmentBytes += sg.meta.DataLength
		m.IndexBytes += sg.index().Size()
	}
	m.LiveBytes = s.mu.tail.w.Offset()
	m.DiskBytes = m.LiveBytes
	m.Files += 2*m.Segments + 1
	if fr := s.mu.frozen; fr != nil {
		m.DiskBytes += fr.w.Offset()
		m.Files++
	}
	s.mu.RUnlock()
	s.spare.Lock()
	if s.spare.file != nil {
		m.Files++
	}
	s.spare.Unlock()
	m.DiskBytes += m.SegmentBytes + m.IndexBytes + m.ManifestBytes
	// The garbage estimates are refreshed here too, so that a backlog of
	// 0 means the space is reclaimed even before the merge goroutine has
	// looked at the latest commit. After the first refresh this costs
	// only the checks of what changed since the last one.
	if !estimate {
		return m
	}
	garbage := s.refreshGarbage(newestFirst, seq)
	for _, b := range garbage {
		m.GarbageBytes += b
	}
	if !s.mergeOpts.Disable && len(newestFirst) > 0 {
		oldestFirst := slices.Clone(newestFirst)
		slices.Reverse(oldestFirst)
		m.MergeBacklog = len(pickOwnRun(oldestFirst, s.mergeOpts, false, garbage.of))
	}
	return m
}

// syncTimedFile times the fdatasyncs of a data file into the store's
// DataSyncs histogram; everything else passes through.
type syncTimedFile struct {
	vfs.File
	h *histogram
}

// StartWriteback passes the hint on to the file, if it takes it.
func (f syncTimedFile) StartWriteback(off, n int64) error {
	if ws, ok := f.File.(vfs.WritebackStarter); ok {
		return ws.StartWriteback(off, n)
	}
	return nil
}

func (f syncTimedFile) Sync() error {
	start := time.Now()
	err := f.File.Sync()
	f.h.since(start)
	return err
}

// timedSyncs wraps a data file whose syncs DataSyncs counts.
func (s *Store) timedSyncs(f vfs.File) vfs.File {
	return syncTimedFile{File: f, h: &s.stats.dataSyncs}
}

// commitManifest is the manifest log's CommitEdit, timed into the
// ManifestCommits histogram.
func (s *Store) commitManifest(e manifestlog.Edit) (manifestlog.Committed, error) {
	start := time.Now()
	c, err := s.mlog.CommitEdit(e)
	s.stats.manifestCommits.since(start)
	return c, err
}
