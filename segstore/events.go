package segstore

import (
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/segkv/segkv/segment"
)

// EventListener receives the store's significant events, each with the
// figures that describe it. Every field is optional: a nil func is skipped,
// so the zero value listens to nothing. It is set once, in Options.Events,
// and the store calls it without synchronisation of its own: a listener
// that keeps state shared with other goroutines protects it itself.
//
// When listeners run: on the goroutine that does the work, synchronously,
// as the work begins or ends. A seal's events run on the goroutine of the
// Seal call, of the background (an automatic seal) or of Close; a merge's
// on the background merge goroutine or the Compact caller's; an import's on
// the Import caller's; a rotation's on the manifest log's rotation
// goroutine; the repairs of Open on Open's, before Open returns.
//
// Locks: no listener runs with a lock that readers or writers wait for (the
// read view, the write gate, the manifest commit lock), except StoreFailed,
// which may run under the manifest commit lock or the live file's sync
// path. The events of a seal, merge or import do run under that operation's
// own serialising lock (one seal, one merge step, one import commit at a
// time), so another operation of the same kind waits for the listener.
//
// So a listener must return promptly (hand slow work, such as a network
// call, to a goroutine of its own) and must not call back into the store
// except for Get, Metrics and the other reads; it must never call Seal,
// Compact, Import, ReplaceAll, Sync or Close, which can wait for the
// listener's own caller and deadlock. StoreFailed must not call the store
// at all. The store does not recover a listener's panic: it unwinds the
// goroutine the listener runs on, which for the background's events (an
// automatic seal, a merge, a rotation) ends the process.
type EventListener struct {
	// SealBegin runs when a seal starts on a non-empty live file: ID is
	// the live file's id, Bytes and Records what it held when the seal
	// began (writes may still land until the switch).
	SealBegin func(SealInfo)
	// SealEnd runs when the seal committed or failed: Bytes and Records
	// are the new segment's data length and record count, Duration the
	// time since SealBegin, and Err the failure (a failed seal fails the
	// store).
	SealEnd func(SealInfo)
	// MergeBegin runs when a merge step has picked its inputs.
	MergeBegin func(MergeInfo)
	// MergeEnd runs when the step committed (Output and BytesOut set) or
	// failed (Err).
	MergeEnd func(MergeInfo)
	// ImportBegin runs when an Import call is admitted.
	ImportBegin func(ImportInfo)
	// ImportEnd runs when it returns: the segments it added, or Err.
	ImportEnd func(ImportInfo)
	// ManifestRotated runs after the manifest log moved to a new file
	// (generation) holding a checkpoint of the whole state.
	ManifestRotated func(ManifestRotationInfo)
	// RecoveryRepair runs once for each repair Open made (a torn tail cut,
	// a file removed, an index rebuilt, a damaged manifest frame restored),
	// after recovery completed and before Open returns. A read-only Open
	// repairs nothing and reports none (RecoveryReport says what a
	// writable Open would repair).
	RecoveryRepair func(RepairInfo)
	// IndexRebuilt runs for every index rebuilt from its data file: at Open
	// (then also reported as a RecoveryRepair, with Duration 0: recovery
	// does not time them one by one) or when a read found an index
	// damaged.
	IndexRebuilt func(IndexRebuildInfo)
	// BackgroundError runs when background work fails: an automatic seal,
	// an interval sync, a merge step, making a spare live file, writing a
	// segment's index file. The store retries or carries on where it can;
	// a failure that stops writes is also reported by StoreFailed.
	BackgroundError func(BackgroundErrorInfo)
	// StoreFailed runs exactly once, when the store stops accepting writes
	// (every later write returns ErrFailed) with the error that caused it.
	StoreFailed func(StoreFailedInfo)
}

// SealInfo describes a seal.
type SealInfo struct {
	ID       uint64        // file id of the live file sealed (the segment's id)
	Bytes    int64         // data bytes (the segment's DataLength at SealEnd)
	Records  uint64        // records in the file
	Duration time.Duration // SealEnd: since SealBegin
	Err      error         // SealEnd: why the seal failed
}

// MergeInfo describes a merge step.
type MergeInfo struct {
	Inputs  []uint64 // ids of the input segments, oldest first
	BytesIn int64    // their data bytes
	// Output is, at MergeEnd, the id of the output segment; 0 when the
	// step failed (Err set) or kept nothing (Err nil: a rewrite found every
	// record garbage and dropped its input without writing an output).
	Output   uint64
	BytesOut int64         // MergeEnd: the output's data bytes (0 without one)
	Duration time.Duration // MergeEnd: since MergeBegin
	Err      error         // MergeEnd: why the step failed
}

// ImportInfo describes an Import call.
type ImportInfo struct {
	Streams  int           // streams given
	Segments []uint64      // ImportEnd: ids of the segments added (duplicates are skipped)
	Bytes    int64         // ImportEnd: their data bytes
	Duration time.Duration // ImportEnd: since ImportBegin
	Err      error         // ImportEnd: why the import failed
}

// ManifestRotationInfo describes a manifest log rotation.
type ManifestRotationInfo struct {
	Generation      uint64 // the new file's generation (MANIFEST-<generation>)
	Seq             uint64 // the commit sequence number its checkpoint covers
	CheckpointBytes int64  // bytes of the checkpoint written (header included)
}

// RepairKind says what a recovery repair did.
type RepairKind string

// The repairs Open makes (see package recovery and manifestlog).
const (
	RepairTornTail        RepairKind = "torn-tail"        // a live file's torn tail was cut
	RepairRemovedFile     RepairKind = "removed-file"     // a file no commit named was removed
	RepairRebuiltIndex    RepairKind = "rebuilt-index"    // an index was rebuilt from its data file
	RepairDroppedChain    RepairKind = "dropped-chain"    // a live continuation after a torn file was dropped
	RepairManifestTail    RepairKind = "manifest-tail"    // the manifest log's torn tail was cut
	RepairManifestFrame   RepairKind = "manifest-frame"   // a damaged manifest frame was restored from its replica
	RepairManifestRemoved RepairKind = "manifest-removed" // a manifest file never activated was removed
)

// RepairInfo describes one repair made by Open.
type RepairInfo struct {
	Kind   RepairKind
	Path   string // the file repaired or removed
	Bytes  int64  // bytes dropped (a cut tail), when known
	Offset int64  // where the cut or the restored frame is, when known (else -1)
	Detail string // the reason, in words, when there is one
}

// IndexRebuildInfo describes an index rebuilt from its data file.
type IndexRebuildInfo struct {
	SegmentID uint64
	Path      string        // the index file
	Reason    string        // what was wrong with it
	Duration  time.Duration // 0 for a rebuild at Open (not timed one by one)
	Err       error         // the rebuild failed: reads of the segment fail
}

// BackgroundErrorInfo describes a failure of background work.
type BackgroundErrorInfo struct {
	Op  string // "seal", "sync", "merge", "spare" or "index-write"
	Err error
}

// StoreFailedInfo describes the failure that stopped writes.
type StoreFailedInfo struct {
	Err error // the cause: the I/O error that stopped the store
}

// The store's event sites. Each logs the event and calls the listener, so
// that the Logger and the EventListener tell the same story.

func (s *Store) sealBegin(info SealInfo) {
	s.log.Debug("segkv: seal begins", slog.Uint64("id", info.ID), slog.Int64("bytes", info.Bytes), slog.Uint64("records", info.Records))
	if f := s.opts.Events.SealBegin; f != nil {
		f(info)
	}
}

func (s *Store) sealEnd(info SealInfo) {
	if info.Err == nil {
		s.stats.sealedBytes.Add(info.Bytes)
		s.log.Info("segkv: sealed segment", slog.Uint64("id", info.ID), slog.Int64("bytes", info.Bytes),
			slog.Uint64("records", info.Records), slog.Duration("duration", info.Duration))
	}
	if f := s.opts.Events.SealEnd; f != nil {
		f(info)
	}
}

func (s *Store) mergeBegin(info MergeInfo) {
	s.log.Debug("segkv: merge begins", slog.Any("inputs", info.Inputs), slog.Int64("bytes_in", info.BytesIn))
	if f := s.opts.Events.MergeBegin; f != nil {
		f(info)
	}
}

func (s *Store) mergeEnd(info MergeInfo) {
	if info.Err == nil {
		s.log.Info("segkv: merged segments", slog.Any("inputs", info.Inputs), slog.Uint64("output", info.Output),
			slog.Int64("bytes_in", info.BytesIn), slog.Int64("bytes_out", info.BytesOut), slog.Duration("duration", info.Duration))
	}
	if f := s.opts.Events.MergeEnd; f != nil {
		f(info)
	}
}

func (s *Store) importBegin(info ImportInfo) {
	if f := s.opts.Events.ImportBegin; f != nil {
		f(info)
	}
}

func (s *Store) importEnd(info ImportInfo) {
	if info.Err == nil {
		s.log.Info("segkv: imported segments", slog.Int("streams", info.Streams), slog.Any("segments", info.Segments),
			slog.Int64("bytes", info.Bytes), slog.Duration("duration", info.Duration))
	} else {
		s.log.Warn("segkv: import failed", slog.Int("streams", info.Streams), slog.Any("err", info.Err))
	}
	if f := s.opts.Events.ImportEnd; f != nil {
		f(info)
	}
}

// manifestRotated is the manifest log's OnRotate hook.
func (s *Store) manifestRotated(gen, seq uint64, checkpointBytes int64) {
	s.log.Info("segkv: manifest log rotated", slog.Uint64("generation", gen), slog.Uint64("seq", seq),
		slog.Int64("checkpoint_bytes", checkpointBytes))
	if f := s.opts.Events.ManifestRotated; f != nil {
		f(ManifestRotationInfo{Generation: gen, Seq: seq, CheckpointBytes: checkpointBytes})
	}
}

func (s *Store) indexRebuilt(info IndexRebuildInfo) {
	if f := s.opts.Events.IndexRebuilt; f != nil {
		f(info)
	}
}

func (s *Store) backgroundError(op string, err error) {
	s.stats.bgErrors.Add(1)
	s.log.Warn("segkv: background work failed", slog.String("op", op), slog.Any("err", err))
	if f := s.opts.Events.BackgroundError; f != nil {
		f(BackgroundErrorInfo{Op: op, Err: err})
	}
}

// reportRepairs hands every repair Open made to the listener and returns
// their number; it runs once recovery has completed.
func (s *Store) reportRepairs() int {
	var repairs []RepairInfo
	mr := s.mreport
	if mr.TruncatedPath != "" {
		repairs = append(repairs, RepairInfo{Kind: RepairManifestTail, Path: mr.TruncatedPath, Bytes: mr.TruncatedBytes, Offset: mr.TruncatedAt})
	}
	for _, off := range mr.RestoredFrames {
		repairs = append(repairs, RepairInfo{Kind: RepairManifestFrame, Path: mr.Path, Offset: off})
	}
	for _, p := range mr.RemovedBroken {
		repairs = append(repairs, RepairInfo{Kind: RepairManifestRemoved, Path: p, Offset: -1})
	}
	var rebuilt []IndexRebuildInfo
	if r := s.recovery; r != nil {
		for _, t := range r.TornTails {
			repairs = append(repairs, RepairInfo{Kind: RepairTornTail, Path: t.Path, Bytes: t.Bytes, Offset: t.Offset})
		}
		for _, p := range r.RemovedFiles {
			repairs = append(repairs, RepairInfo{Kind: RepairRemovedFile, Path: p, Offset: -1})
		}
		for _, p := range r.DroppedChain {
			repairs = append(repairs, RepairInfo{Kind: RepairDroppedChain, Path: p, Offset: -1})
		}
		for _, entry := range r.RebuiltIndexes {
			// "path: reason", as recovery records it.
			p, reason, _ := strings.Cut(entry, ": ")
			repairs = append(repairs, RepairInfo{Kind: RepairRebuiltIndex, Path: p, Offset: -1, Detail: reason})
			id, _, _ := segment.ParseName(filepath.Base(p))
			rebuilt = append(rebuilt, IndexRebuildInfo{SegmentID: id, Path: p, Reason: reason})
		}
	}
	// recovery and manifestlog logged each repair at WARN as they made it.
	for _, r := range repairs {
		if f := s.opts.Events.RecoveryRepair; f != nil {
			f(r)
		}
	}
	for _, ib := range rebuilt {
		s.indexRebuilt(ib)
	}
	return len(repairs)
}

// logOpened logs the INFO line of a successful Open, with what it found.
func (s *Store) logOpened(start time.Time, repairs int) {
	s.mu.RLock()
	segs := len(s.mu.segs)
	var segBytes int64
	for _, sg := range s.mu.segs {
		segBytes += sg.meta.DataLength
	}
	live := s.mu.tail.w.Offset()
	s.mu.RUnlock()
	s.log.Info("segkv: opened store", slog.String("dir", s.dir), slog.Int("segments", segs),
		slog.Int64("segment_bytes", segBytes), slog.Int64("live_bytes", live),
		slog.Uint64("manifest_seq", s.mlog.Seq()), slog.Int("repairs", repairs),
		slog.Duration("duration", time.Since(start)))
}
