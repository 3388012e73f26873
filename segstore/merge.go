package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/wal"
)

// MergeOptions tunes the background merge, which folds runs of adjacent
// segments of similar size into one, keeping only the newest version of each
// key. The zero value enables it with the defaults below.
type MergeOptions struct {
	// Disable turns background merging off; Compact still works.
	Disable bool
	// MinRun is how many adjacent segments of similar size make a run worth
	// merging in the background (default 4).
	MinRun int
	// SizeRatio bounds "similar size": the largest segment of a run is at
	// most SizeRatio times the smallest (default 4).
	SizeRatio float64
	// MaxStepBytes bounds the input of one merge step (default 1 GiB), and so
	// the work between two manifest commits and the size segments grow to
	// (runs of 64 MiB seals merge into 256 MiB, those into 1 GiB): fewer,
	// larger segments mean fewer bloom probes per missing key and fewer
	// cursors per scan. A step's memory does not grow with it (its index
	// is written in a streaming pass); it needs free disk for its output.
	MaxStepBytes int64
	// BytesPerSecond, if positive, limits the rate at which a merge writes.
	BytesPerSecond int64
	// KeepWriteOrder turns off the sorting rewrite: by default, when no run
	// is worth merging, the merge rewrites one sealed segment whose records
	// are not in key order (a live file written in random key order) into
	// key order, alone, so that range scans over it read the file
	// sequentially instead of one scattered record per key. It costs one
	// more write of that data, in the background; a segment already in key
	// order (keys written in order, like a log) is never rewritten. Set it
	// for a store that is never scanned.
	KeepWriteOrder bool
	// GarbageRatio is the estimated fraction of a sealed segment's bytes
	// that no read can reach (records that newer segments supersede or
	// delete, point tombstones with nothing older left to delete) at which
	// the merge rewrites the segment alone without them, when no run is
	// worth merging (default 0.2: a settled store is then at most about a
	// fifth garbage). It must lie in (0, 1]; 1 reclaims only segments that
	// are entirely garbage. The estimate checks a fixed sample of each
	// segment's records against the newer and older segments' indexes, so
	// it costs the same at any size. A rewrite that finds nothing to keep
	// drops the segment without writing anything.
	GarbageRatio float64
}

func (m MergeOptions) withDefaults() (MergeOptions, error) {
	if m.MinRun < 0 || m.SizeRatio < 0 || m.MaxStepBytes < 0 || m.BytesPerSecond < 0 {
		return m, fmt.Errorf("%w: negative merge option", ErrInvalidOption)
	}
	if m.MinRun == 0 {
		m.MinRun = 4
	}
	if m.MinRun < 2 {
		return m, fmt.Errorf("%w: MinRun below 2", ErrInvalidOption)
	}
	if m.SizeRatio == 0 {
		m.SizeRatio = 4
	}
	if m.SizeRatio < 1 {
		return m, fmt.Errorf("%w: SizeRatio below 1", ErrInvalidOption)
	}
	if m.MaxStepBytes == 0 {
		m.MaxStepBytes = defaultMergeStepBytes
	}
	if m.GarbageRatio == 0 {
		m.GarbageRatio = defaultGarbageRatio
	}
	if m.GarbageRatio < 0 || m.GarbageRatio > 1 || m.GarbageRatio != m.GarbageRatio {
		return m, fmt.Errorf("%w: GarbageRatio %v outside (0, 1]", ErrInvalidOption, m.GarbageRatio)
	}
	return m, nil
}

// mergeFrameBytes is the payload size at which a merge flushes a frame.
const mergeFrameBytes = 1 << 20

// pickRun chooses the next run to merge from segments ordered oldest first.
// The background policy wants MinRun adjacent segments of similar size;
// Compact (full) takes any run of two or more, starting from the oldest so
// that tombstones can be dropped. Both respect MaxStepBytes.
func pickRun(oldestFirst []*sealed, o MergeOptions, full bool) []*sealed {
	n := len(oldestFirst)
	bestStart, bestLen := -1, 0
	for i := 0; i < n; i++ {
		var total int64
		minSize, maxSize := int64(-1), int64(0)
		j := i
		for ; j < n; j++ {
			sz := oldestFirst[j].meta.DataLength
			if total+sz > o.MaxStepBytes && j > i {
				break
			}
			nmin, nmax := minSize, max(maxSize, sz)
			if nmin < 0 || sz < nmin {
				nmin = sz
			}
			if !full && float64(nmax) > o.SizeRatio*float64(max(nmin, 1)) {
				break
			}
			total += sz
			minSize, maxSize = nmin, nmax
		}
		runLen := j - i
		need := o.MinRun
		if full {
			need = 2
		}
		if runLen >= need && runLen > bestLen {
			bestStart, bestLen = i, runLen
			if full {
				break // the oldest run first
			}
		}
	}
	if bestStart < 0 {
		return nil
	}
	return oldestFirst[bestStart : bestStart+bestLen]
}

// pickOwnRun picks the next step's inputs among the store's own segments:
// a follower's mirrored segments (Origin set) are the leader's to merge,
// and a Follow must find them as the leader described them. A run never
// spans a mirrored segment, so it stays adjacent in order. With no run
// worth merging, it picks one segment to rewrite alone: the one with the
// most garbage (garbage gives each segment's estimated garbage bytes) if
// that reaches the GarbageRatio of its size (full: any garbage), else one
// not in key order.
func pickOwnRun(oldestFirst []*sealed, o MergeOptions, full bool, garbage func(*sealed) int64) []*sealed {
	var chunks [][]*sealed
	start := -1
	for i, sg := range oldestFirst {
		if sg.meta.Origin != 0 {
			if start >= 0 {
				chunks = append(chunks, oldestFirst[start:i])
			}
			start = -1
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		chunks = append(chunks, oldestFirst[start:])
	}
	for _, c := range chunks {
		if run := pickRun(c, o, full); len(run) > 0 {
			return run
		}
	}
	if sg := pickGarbage(chunks, o, full, garbage); sg != nil {
		return []*sealed{sg}
	}
	for _, c := range chunks {
		if run := pickUnordered(c, o); len(run) > 0 {
			return run
		}
	}
	return nil
}

// pickGarbage returns the own segment with the most estimated garbage
// bytes, if they reach o.GarbageRatio of its data (full: if it has any),
// else nil. Ties go to the older segment.
func pickGarbage(chunks [][]*sealed, o MergeOptions, full bool, garbage func(*sealed) int64) *sealed {
	var best *sealed
	var bestBytes int64
	for _, c := range chunks {
		for _, sg := range c {
			gb := garbage(sg)
			if gb <= bestBytes {
				continue
			}
			if !full && float64(gb) < o.GarbageRatio*float64(sg.meta.DataLength) {
				continue
			}
			best, bestBytes = sg, gb
		}
	}
	return best
}

// pickUnordered chooses a sealed segment to rewrite in key order: the
// oldest whose records are not in key order (see MergeOptions.KeepWriteOrder).
// A rewrite alone takes its segment whole, whatever MaxStepBytes says (a
// segment larger than it, from an import, is still rewritten).
func pickUnordered(oldestFirst []*sealed, o MergeOptions) []*sealed {
	if o.KeepWriteOrder {
		return nil
	}
	for i, sg := range oldestFirst {
		if ix := sg.index(); ix.Len() > 1 && !ix.InKeyOrder() {
			return oldestFirst[i : i+1]
		}
	}
	return nil
}

// Compact merges until the merge policy, applied in full (any two adjacent
// segments that fit in MaxStepBytes are merged, every segment with any
// estimated garbage is rewritten without it, and every segment not in key
// order is rewritten in key order), is satisfied, or ctx ends.
// It runs in bounded steps, each one manifest commit, and never blocks
// writers.
func (s *Store) Compact(ctx context.Context) error {
	if err := s.enter(true); err != nil {
		return err
	}
	defer s.ops.leave()
	ctx, done := s.opContext(ctx)
	defer done()
	for {
		if err := ctxErr(ctx); err != nil {
			return err
		}
		did, err := s.mergeStep(ctx, true)
		if err != nil {
			// A cancellation explains the error, unless the store failed.
			if cerr := ctxErr(ctx); cerr != nil && !errors.Is(err, ErrFailed) {
				return cerr
			}
			return err
		}
		if !did {
			return nil
		}
	}
}

// mergeStep merges one run if the policy finds one. It holds no lock that
// writers or readers need while it copies.
//
// A merge changes no key's value, so it needs no sync of the live file
// first: a crash after its commit yields the same state as before it.
// Until its commit it changes nothing either, so any failure before the
// commit (a read or write error, a damaged input) leaves the store as it
// was, and removes the output.
func (s *Store) mergeStep(ctx context.Context, full bool) (bool, error) {
	if err := s.failed(); err != nil {
		return false, err
	}
	// Shared with other steps, exclusive to ReplaceAll: no merge runs
	// beside a replace, whose commit removes every segment.
	s.replaceMu.RLock()
	defer s.replaceMu.RUnlock()
	s.mergeMu.Lock()
	defer s.mergeMu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The garbage estimates are brought up to date first, outside
	// commitMu: the first refresh after Open reads a sample of every
	// segment's index, and no seal should wait for that.
	view, seq, release := s.pinSegments()
	garbage := s.refreshGarbage(view, seq)
	release()

	// The run is picked and claimed under commitMu, so that no commit drops
	// one of its segments under a range tombstone (coveredByRanges leaves
	// claimed segments alone) between the pick and the merge's own commit.
	s.commitMu.Lock()
	if s.replacing > 0 {
		// A ReplaceAll waits for replaceMu: whatever this step would merge
		// is about to be replaced. Reporting work done makes Compact and
		// the background try again, after the replace.
		s.commitMu.Unlock()
		return true, nil
	}
	// Every installed segment stays pinned for the step: the inputs, and
	// the newer and older segments a rewrite alone checks its records
	// against, which a commit may retire meanwhile (a range drop).
	newestFirst, _, release := s.pinSegments()
	defer release()
	oldestFirst := slices.Clone(newestFirst)
	slices.Reverse(oldestFirst)
	run := pickOwnRun(oldestFirst, s.mergeOpts, full, garbage.of)
	for _, sg := range run {
		s.merging[sg.meta.ID] = true
	}
	if len(run) > 0 {
		s.mergeCancel = cancel
	}
	s.commitMu.Unlock()
	if len(run) == 0 {
		return false, nil
	}
	defer func() {
		s.commitMu.Lock()
		clear(s.merging)
		s.mergeCancel = nil
		s.commitMu.Unlock()
	}()
	// Only merges and ReplaceAll remove segments other than under a range
	// tombstone (which spares the claimed run), one merge runs at a time,
	// and no ReplaceAll runs beside a merge step, so the oldest segment now
	// is still the oldest when this step commits: a run that starts there
	// has nothing older that a tombstone could be hiding.
	dropTombstones := run[0] == oldestFirst[0]
	info := MergeInfo{Inputs: make([]uint64, len(run))}
	for i, sg := range run {
		info.Inputs[i] = sg.meta.ID
		info.BytesIn += sg.meta.DataLength
	}
	start := time.Now()
	s.mergeBegin(info)
	defer func() {
		info.Duration = time.Since(start)
		s.mergeEnd(info)
	}()
	// The output leaves out what the segments newer than the run shadow and
	// the tombstones nothing older than the run needs (garbage.go). A run is
	// adjacent in order, so every other segment is newer or older than all
	// of it.
	reclaim := &reclaimer{}
	for _, sg := range newestFirst {
		switch {
		case sg.meta.Order > run[len(run)-1].meta.Order:
			reclaim.newer = append(reclaim.newer, sg)
		case sg.meta.Order < run[0].meta.Order:
			reclaim.older = append(reclaim.older, sg)
		}
	}
	out, err := s.writeMerged(ctx, run, dropTombstones, reclaim)
	if err != nil {
		info.Err = err
		if errors.Is(context.Cause(ctx), errReplaced) {
			// Stopped by a ReplaceAll: the output is gone, nothing changed,
			// and the work resumes on the state the replace installs.
			return true, nil
		}
		return false, err
	}
	var add []*sealed
	if out != nil {
		add = []*sealed{out}
	}
	if err := s.commitSegments(add, info.Inputs, 0, nil); err != nil {
		if out != nil {
			out.df.unmap() // never installed: release its index mapping
		}
		info.Err = err
		return false, err
	}
	s.stats.merges.Add(1)
	if len(run) == 1 {
		s.stats.rewrites.Add(1)
	}
	s.stats.mergedBytesIn.Add(info.BytesIn)
	if out != nil {
		s.stats.mergedBytesOut.Add(out.meta.DataLength)
		info.Output, info.BytesOut = out.meta.ID, out.meta.DataLength
	}
	return true, nil
}

// writeMerged writes the merge output of run (ordered oldest first) to a new
// ".seg" file, makes it durable with its directory entry, writes its index
// (unsynced), and returns the segment, not yet committed; reclaim leaves
// out the records it drops. An output with no record at all is
// removed and writeMerged returns nil: the commit only drops the inputs.
// On any error the output file is removed (and would be by the next Open
// anyway).
func (s *Store) writeMerged(ctx context.Context, run []*sealed, dropTombstones bool, reclaim *reclaimer) (_ *sealed, err error) {
	df, w, err := s.createMergeOutput(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.out.discard(s.fs)
		}
	}()
	handles, release, err := s.acquireInputs(run)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := w.writeRanges(run, dropTombstones); err != nil {
		return nil, err
	}
	if err := w.writeSurvivors(run, handles, dropTombstones, reclaim); err != nil {
		return nil, err
	}
	if w.records == 0 {
		w.out.discard(s.fs)
		return nil, nil
	}
	length, digest, err := s.finishMergeOutput(w)
	if err != nil {
		return nil, err
	}
	var maxOrder uint64
	for _, sg := range run {
		maxOrder = max(maxOrder, sg.meta.Order)
	}
	// The output's records are in key order: its index is written by a
	// second, sequential pass over it (from the page cache), in memory that
	// does not grow with the output.
	return s.buildOrderedSegment(ctx, df, length, digest, w.keys, w.firstKey, w.lastKey, w.records, maxOrder)
}

// mergeWriter appends a merge's output records to its file in blocks of
// about blockBytes (segment.BlockVersion: each block one frame, compressed
// unless Options.DisableCompression), written out about mergeFrameBytes at
// a time and paced by MergeOptions.BytesPerSecond, and keeps what the
// output's index needs: the point records' count and first and last keys,
// and the record count.
type mergeWriter struct {
	s       *Store
	ctx     context.Context
	out     *digestWriter
	codec   segment.Codec
	block   []byte // the records of the block being filled
	payload []byte // the block's payload, compressed
	frames  []byte // whole frames not written yet
	started time.Time
	written int64

	keys     int    // point records written
	firstKey []byte // and the first and last of their keys
	lastKey  []byte
	records  uint64
}

// blockBytes is the size of the records a merge puts in one block: a
// block ends at the first record that takes it to blockBytes or more.
// docs/BENCH.md has the measurement behind it.
const blockBytes = 4 << 10

// createMergeOutput creates the output's ".seg" file under a new id and
// writes its header.
func (s *Store) createMergeOutput(ctx context.Context) (*dataFile, *mergeWriter, error) {
	id := s.mlog.NewID()
	df := s.newDataFile(id, segment.KindSeg)
	f, err := s.fs.Create(df.path)
	if err != nil {
		return nil, nil, fmt.Errorf("segkv: create merge output: %w", err)
	}
	w := &mergeWriter{s: s, ctx: ctx, out: newDigestWriter(s.timedSyncs(f), df.path), started: time.Now(), codec: segment.CodecS2}
	if s.opts.DisableCompression {
		w.codec = segment.CodecNone
	}
	df.setFormat(segment.BlockVersion)
	if err := w.out.write(segment.HeaderVersioned(segment.BlockVersion)); err != nil {
		w.out.discard(s.fs)
		return nil, nil, err
	}
	return df, w, nil
}

// acquireInputs opens every input's data file through the file cache (the
// reads a mapping cannot serve); release gives them back.
func (s *Store) acquireInputs(run []*sealed) (handles []*fileHandle, release func(), err error) {
	handles = make([]*fileHandle, len(run))
	for i, sg := range run {
		h, err := s.files.acquire(sg.df.id, sg.df.path)
		if err != nil {
			for _, hh := range handles[:i] {
				s.files.release(hh)
			}
			return nil, nil, err
		}
		handles[i] = h
	}
	return handles, func() {
		for _, h := range handles {
			s.files.release(h)
		}
	}, nil
}

// add appends one record to the block being filled, ending the block
// first when the record is large (it then starts a block of its own, and
// reads of the small records before it do not decode it), and after it
// once the block is full.
func (w *mergeWriter) add(rec []byte) error {
	if len(w.block) > 0 && len(w.block)+len(rec) > 2*blockBytes {
		if err := w.endBlock(); err != nil {
			return err
		}
	}
	w.block = append(w.block, rec...)
	w.records++
	if len(w.block) >= blockBytes {
		return w.endBlock()
	}
	return nil
}

// endBlock turns the records gathered into one block frame, and writes
// the frames out once they reach mergeFrameBytes.
func (w *mergeWriter) endBlock() error {
	if len(w.block) == 0 {
		return nil
	}
	w.payload = segment.AppendBlock(w.payload[:0], w.block, w.codec)
	w.frames = wal.AppendFrame(w.frames, w.payload, 0)
	w.block = w.block[:0]
	if len(w.frames) >= mergeFrameBytes {
		return w.writeFrames()
	}
	return nil
}

// flush ends the block being filled and writes every frame out.
func (w *mergeWriter) flush() error {
	if err := w.endBlock(); err != nil {
		return err
	}
	return w.writeFrames()
}

// writeFrames writes the frames gathered, then waits as long as the rate
// limit asks; it returns the context's error, so a cancelled merge stops
// at its next write.
func (w *mergeWriter) writeFrames() error {
	if len(w.frames) == 0 {
		return nil
	}
	off := w.out.off
	if err := w.out.write(w.frames); err != nil {
		return err
	}
	// The frames go to the device as they are written, not all at once at
	// the output's fdatasync: a durable write's barrier on the same disk
	// then waits behind at most a MiB or two of merge output.
	w.out.startWriteback(off, int64(len(w.frames)))
	w.written += int64(len(w.frames))
	w.frames = w.frames[:0]
	if bps := w.s.mergeOpts.BytesPerSecond; bps > 0 {
		// Pace the background copy; no writer waits on this sleep.
		due := w.started.Add(time.Duration(float64(w.written) / float64(bps) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-w.ctx.Done():
			}
		}
	}
	return w.ctx.Err()
}

// writeRanges writes the run's range tombstones, first in the output, so
// that every point record, which survived them, comes after them in the
// file, as the index builder's rule (a range tombstone deletes the records
// before it) requires. They are kept unless nothing older than the run
// exists for them to delete.
func (w *mergeWriter) writeRanges(run []*sealed, dropTombstones bool) error {
	if dropTombstones {
		return nil
	}
	sets := make([]*rangedel.Set, len(run))
	for i, sg := range run {
		sets[i] = sg.index().Ranges()
	}
	for _, sp := range rangedel.Merge(sets...).Spans() {
		if err := w.add(segment.AppendRecord(nil, segment.KindRangeDelete, sp.Start, sp.End)); err != nil {
			return err
		}
	}
	// A block holds range tombstones or point records, never both.
	return w.endBlock()
}

// writeSurvivors walks the inputs' indexes in key order together, as a
// read of the run would (the same mergingIter), and writes the newest
// version of each key, unless it is a tombstone the merge may drop, a newer
// input's range tombstone deletes it, or reclaim drops it; then flushes the
// last frame.
func (w *mergeWriter) writeSurvivors(run []*sealed, handles []*fileHandle, dropTombstones bool, reclaim *reclaimer) error {
	// The sources are newest first: source prio p is run[len(run)-1-p].
	var m mergingIter
	m.srcs = make([]iterSource, 0, len(run))
	maps := make([]*fileMap, len(run))
	// caches[i] holds input i's current block when it is a block file,
	// found out at the first record read from it.
	caches := make([]*blockCache, len(run))
	formatKnown := make([]bool, len(run))
	for i := len(run) - 1; i >= 0; i-- {
		m.addSegment(run[i].df, run[i].index())
		maps[i] = run[i].df.reader()
	}
	m.ready()
	if err := m.seekGE(nil); err != nil {
		return fmt.Errorf("segkv: merge: %w", err)
	}
	buf := make([]byte, 0, 4096)
	var key []byte
	// walked counts the input bytes walked since the context was last
	// checked: a run whose records are nearly all dropped writes (and so
	// flushes) almost nothing, and must still stop promptly when Close,
	// Compact's caller or a ReplaceAll cancels it.
	var walked int64
	for m.more() {
		var e iterEntry
		var prio int
		var covered bool
		var err error
		key, e, prio, covered, err = m.take(key[:0])
		if err != nil {
			return fmt.Errorf("segkv: merge: %w", err)
		}
		walkedNow := int64(e.length)
		if e.raw != nil {
			walkedNow = int64(len(e.raw)) // e.length is the whole block's
		}
		if walked += walkedNow; walked >= mergeFrameBytes {
			walked = 0
			if err := w.ctx.Err(); err != nil {
				return err
			}
		}
		if e.kind == index.KindDelete && dropTombstones || covered {
			continue
		}
		drop, err := reclaim.drop(key, e.kind)
		if err != nil {
			return err
		}
		if drop {
			continue
		}
		in := len(run) - 1 - prio
		if e.raw != nil {
			// From a block cursor: verified before it is copied, as below.
			if _, err := verifyRaw(e, key); err != nil {
				return fmt.Errorf("segkv: merge: %w", err)
			}
			if err := w.keep(key, e.raw); err != nil {
				return err
			}
			continue
		}
		if !formatKnown[in] {
			blocks, err := run[in].df.blockFormat()
			if err != nil {
				return fmt.Errorf("segkv: merge: %w", err)
			}
			if blocks {
				caches[in] = new(blockCache)
			}
			formatKnown[in] = true
		}
		var rec []byte
		if rec, buf, err = readMergeRecord(run[in], maps[in], handles[in], caches[in], key, e, buf); err != nil {
			return err
		}
		if err := w.keep(key, rec); err != nil {
			return err
		}
	}
	return w.flush()
}

// keep writes rec, the surviving record of key, to the output.
func (w *mergeWriter) keep(key, rec []byte) error {
	if w.keys == 0 {
		w.firstKey = bytes.Clone(key)
	}
	w.lastKey = append(w.lastKey[:0], key...)
	w.keys++
	return w.add(rec)
}

// readMergeRecord returns the record e (of key) of input sg, verified:
// from its block through c when the input is a block file, else from the
// input's mapping m when it has one (the run is pinned: no system call per
// record, and the copy into the output block is the only one), else read
// into buf (grown if needed) through h.
func readMergeRecord(sg *sealed, m *fileMap, h *fileHandle, c *blockCache, key []byte, e iterEntry, buf []byte) (rec, _ []byte, err error) {
	if c != nil {
		_, rec, err = c.blockRecord(sg.df, e.off, e.length, e.kind, key)
		return rec, buf, err
	}
	if m != nil && e.off+int64(e.length) <= int64(len(m.data)) {
		rec = m.data[e.off : e.off+int64(e.length)]
	} else {
		if cap(buf) < int(e.length) {
			buf = make([]byte, e.length)
		}
		rec = buf[:e.length]
		if _, err := h.f.ReadAt(rec, e.off); err != nil {
			return nil, buf, fmt.Errorf("segkv: merge read %s at %d: %w", sg.df.path, e.off, err)
		}
	}
	// Verify before copying: a merge must not launder a damaged record
	// into a new file with a fresh checksum.
	if _, _, err := segment.DecodeRecord(rec); err != nil {
		return nil, buf, fmt.Errorf("%w: %s at %d: %v", ErrCorrupt, sg.df.path, e.off, err)
	}
	return rec, buf, nil
}

// finishMergeOutput makes the output durable, and its directory entry too:
// the manifest may name it only then. This directory sync is on the
// merge's path, not a writer's.
func (s *Store) finishMergeOutput(w *mergeWriter) (length int64, digest uint64, err error) {
	if length, digest, err = w.out.finish(); err != nil {
		return 0, 0, err
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return 0, 0, fmt.Errorf("segkv: sync directory for merge output: %w", err)
	}
	return length, digest, nil
}
