package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// spareFile is a live file made ahead of need: header written, space
// preallocated, file and directory entry durable. Taking one costs a seal no
// directory sync.
type spareFile struct {
	id   uint64
	path string
	f    vfs.File
}

// makeSpare creates a durable, empty live file with a fresh id. Its three
// barriers (file sync, directory sync) are paid here, off the seal path.
func (s *Store) makeSpare() (*spareFile, error) {
	id := s.mlog.NewID()
	p := filepath.Join(s.dir, segment.DataName(id, segment.KindLog))
	f, err := s.fs.Create(p)
	if err != nil {
		return nil, fmt.Errorf("segkv: create live file: %w", err)
	}
	fail := func(what string, err error) (*spareFile, error) {
		f.Close()
		s.fs.Remove(p)
		return nil, fmt.Errorf("segkv: %s %s: %w", what, p, err)
	}
	if err := f.Preallocate(0, s.opts.SegmentSize); err != nil {
		return fail("preallocate", err)
	}
	if _, err := f.WriteAt(segment.Header(), 0); err != nil {
		return fail("write header of", err)
	}
	if err := s.timedSyncs(f).Sync(); err != nil {
		return fail("sync", err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fail("sync directory for", err)
	}
	return &spareFile{id: id, path: p, f: f}, nil
}

// discardSpare closes and removes a spare that will not be used. A failed
// removal only leaves a file the next Open removes (it has no first frame),
// so it is logged; the close error is returned.
func (s *Store) discardSpare(sp *spareFile) error {
	err := sp.f.Close()
	if rerr := s.fs.Remove(sp.path); rerr != nil {
		s.log.Debug("segkv: removing an unused spare failed; the next open removes it", slog.String("path", sp.path), slog.Any("err", rerr))
	}
	return err
}

// takeSpare returns the ready spare, or makes one on the spot (and counts
// that, since it puts a directory sync on the seal's path).
func (s *Store) takeSpare() (*spareFile, error) {
	s.spare.Lock()
	sp := s.spare.file
	s.spare.file = nil
	s.spare.Unlock()
	if s.bg != nil {
		s.bg.requestSpare()
	}
	if sp != nil {
		return sp, nil
	}
	s.stats.spareMisses.Add(1)
	return s.makeSpare()
}

// Seal seals the live file into an immutable segment and moves writers to a
// fresh live file. Writers wait only for the switch itself. Sealing an empty
// live file does nothing and costs no fsync. On return the segment is named
// durably by the manifest.
//
// Critical path: at most one fdatasync of the sealed file (skipped when the
// write path already synced every byte, as SyncAlways does) and one manifest
// commit. The index file is written but never synced: it is a cache whose
// checksum the manifest records.
func (s *Store) Seal() error {
	if err := s.enter(true); err != nil {
		return err
	}
	defer s.ops.leave()
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	_, err := s.sealLocked(nil, nil)
	return err
}

// sealLocked seals the live file; sealMu held. It returns the new segment,
// or nil when the live file was empty (nothing to seal: then nothing is
// committed, below included). atSwitch, if not nil, runs at the switch,
// under the exclusive writeMu and mu, with the file being sealed: no write
// can land between the switch and what it records (NewSealedSnapshot pins
// the segments there). below, if not nil, is committed in the same manifest
// commit as the sealed file, ordered beneath it (an import: see Import).
func (s *Store) sealLocked(atSwitch func(frozen *tail), below *commitSpec) (*sealed, error) {
	if err := s.failed(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	old, frozen := s.mu.tail, s.mu.frozen
	s.mu.RUnlock()
	if frozen != nil {
		// Only a seal that failed the store leaves a frozen file behind; a
		// seal over it would commit the next file while this one is not
		// named anywhere, and its keys would vanish.
		err := fmt.Errorf("segkv: seal found %s still frozen by an earlier seal", frozen.path)
		s.fail(err)
		return nil, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	if old.empty() {
		return nil, nil
	}
	info := SealInfo{ID: old.id, Bytes: old.w.Offset()}
	old.mu.RLock()
	info.Records = uint64(old.records)
	old.mu.RUnlock()
	start := time.Now()
	s.sealBegin(info)
	seg, err := s.switchAndSeal(old, atSwitch, below)
	info.Duration, info.Err = time.Since(start), err
	if seg != nil {
		info.Bytes, info.Records = seg.meta.DataLength, seg.meta.Records
	}
	s.sealEnd(info)
	return seg, err
}

// switchAndSeal is sealLocked's work on the non-empty live file old.
func (s *Store) switchAndSeal(old *tail, atSwitch func(frozen *tail), below *commitSpec) (*sealed, error) {
	sp, err := s.takeSpare()
	if err != nil {
		return nil, err
	}
	if sp.id < old.id {
		// A background spare that raced a seal's inline one can be older
		// than the live file. Recovery looks for a live file's continuation
		// only among higher ids, so never continue into a lower one.
		s.discardSpare(sp)
		if sp, err = s.makeSpare(); err != nil {
			return nil, err
		}
	}
	next := newTail(s, sp.id)
	next.path, next.file, next.df = sp.path, sp.f, s.newDataFile(sp.id, segment.KindLog)
	next.w = wal.NewWriter(s.timedSyncs(sp.f), sp.path, segment.HeaderSize, segment.HeaderSize, s.walOptions(next))

	// The switch: wait for in-flight commits to the old file, then point
	// writers at the new one. The link record goes first into the new file so
	// that recovery can tell whether the old file lost a torn tail that the
	// new file's writes came after.
	s.writeMu.Lock()
	end := old.w.Offset()
	link := &wal.Request{Payload: segment.AppendLink(nil, old.id, end)}
	if err := next.w.Commit(link); err != nil {
		s.writeMu.Unlock()
		sp.f.Close()
		s.fail(err)
		return nil, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	s.mu.Lock()
	s.mu.frozen = old
	s.mu.tail = next
	if atSwitch != nil {
		atSwitch(old)
	}
	s.mu.Unlock()
	s.writeMu.Unlock()

	return s.finishSeal(old, next.id, below)
}

// empty reports whether no record was published into the live file t. A
// seal's check needs no writeMu: records only grow, so a file found
// non-empty stays so.
func (t *tail) empty() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.records == 0
}

// sealReadAttempts is how many times a seal reads its sealed file before a
// read error fails the store: a read is safe to repeat, and one transient
// EIO should not stop a service.
const sealReadAttempts = 3

// finishSeal makes the frozen live file t a sealed segment and names it in
// the manifest together with the new live file liveID.
//
// It runs after the switch, when writers already append to the next live
// file and that file's link record names t: there is no undoing the switch.
// So finishSeal either completes, or fails the store (ErrFailed), leaving t
// frozen and readable until Close; the next Open finishes the seal from the
// files (the live chain). It never returns an error with the store still
// accepting writes, which would let a later seal commit over t. It returns
// the new segment. below (may be nil) is committed with it, beneath it.
func (s *Store) finishSeal(t *tail, liveID uint64, below *commitSpec) (*sealed, error) {
	seg, err := s.completeSeal(t, liveID, below)
	if err != nil {
		s.fail(err)
		if errors.Is(err, ErrFailed) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: seal of %s: %w", ErrFailed, t.path, err)
	}
	return seg, nil
}

func (s *Store) completeSeal(t *tail, liveID uint64, below *commitSpec) (*sealed, error) {
	end := t.w.Offset()
	// Barrier 1, only when the write path left bytes unsynced.
	if t.w.SyncedOffset() < end {
		if err := t.w.Sync(); err != nil {
			return nil, err
		}
		s.stats.sealDataSyncs.Add(1)
	}
	digest, err := t.sealDigest, error(nil)
	for attempt := 1; digest == 0 && attempt <= sealReadAttempts; attempt++ {
		if digest, err = segment.Digest(t.file, end); err == nil {
			break
		}
		s.log.Warn("segkv: reading the sealed file failed", slog.String("path", t.path), slog.Int("attempt", attempt), slog.Int("of", sealReadAttempts), slog.Any("err", err))
	}
	if err != nil {
		return nil, err
	}
	// No writer publishes into t any more (the switch waited them out), so
	// the walk reads a directory that no longer changes; the lock is for the
	// race detector's sake and costs nothing.
	t.mu.RLock()
	entries, ranges := t.keys.indexEntries(), t.ranges.Set()
	records := t.records
	t.mu.RUnlock()
	seg, ixData, err := s.buildSegment(t.df, end, digest, entries, ranges, uint64(records), 0)
	if err != nil {
		return nil, err
	}
	c := commitSpec{add: []*sealed{seg}, liveID: liveID, install: func() {
		if s.mu.frozen == t {
			s.mu.frozen = nil
		}
	}}
	if below != nil {
		// The log assigns orders in the order of add: below's segments
		// beneath the sealed file, which shadows them as it did while live.
		c.add = append(slices.Clone(below.add), seg)
		c.adopt = below.adopt
	}
	if err := s.commit(c); err != nil {
		return nil, err
	}
	// The append handle is done; reads always went through the file cache.
	t.file.Close()
	// Writing the index file and releasing the unused preallocation are
	// metadata work that waits on the file system's journal: off the seal's
	// path. Neither needs a barrier: the index is a cache (rebuilt if a crash
	// loses it) and the manifest records the data length.
	s.bg.afterSeal(sealTidy{sg: seg, df: t.df, length: end, ixData: ixData})
	s.stats.seals.Add(1)
	s.bg.requestMerge()
	return seg, nil
}

// commitSegments names added segments (and drops removed ones) in one
// manifest commit, then installs them for readers. The manifest log assigns
// the Order of every added segment whose Order is 0, in commit order, so
// newer data always has a higher Order; the installed metadata is what the
// log recorded. A non-zero liveID also names the live file. install runs
// under mu, atomically with the new segment list. A failed commit fails the
// store: the log refuses every later commit anyway.
func (s *Store) commitSegments(add []*sealed, remove []uint64, liveID uint64, install func()) error {
	return s.commit(commitSpec{add: add, remove: remove, liveID: liveID, install: install})
}

// commitSpec is one manifest commit of segments and what goes with it.
type commitSpec struct {
	add     []*sealed // named by the commit; an Order of 0 is assigned by the log, in this order
	restate []*sealed // present segments named again with new metadata (a follower's reorder)
	remove  []uint64
	liveID  uint64   // if not 0, the commit names this live file
	adopt   []uint64 // digests the commit adopts from a peer (Import)
	// mirror: the commit makes the store mirror a leader (Follow): it sets
	// the followed seq and drops nothing under range tombstones (the
	// leader's own commits say what goes).
	mirror    bool
	followed  uint64
	nextOrder uint64
	install   func() // runs under mu, atomically with the new segment list
}

func (s *Store) commit(c commitSpec) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitLocked(c)
}

// commitLocked makes c durable in one manifest commit and installs it.
// commitMu held.
func (s *Store) commitLocked(c commitSpec) error {
	add, remove, liveID, install := c.add, c.remove, c.liveID, c.install
	var covered []uint64
	if !c.mirror {
		covered = s.coveredByRanges(add, remove)
	}
	remove = append(slices.Clone(remove), covered...)
	metas := make([]manifestlog.SegmentMeta, 0, len(add)+len(c.restate))
	for _, sg := range add {
		metas = append(metas, sg.meta)
	}
	for _, sg := range c.restate {
		metas = append(metas, sg.meta)
	}
	edit := manifestlog.Edit{Add: metas, Remove: remove, Adopt: c.adopt, NextOrder: c.nextOrder}
	if liveID != 0 {
		edit.SetLive, edit.LiveID = true, liveID
	}
	if c.mirror {
		edit.SetFollowed, edit.Followed = true, c.followed
	}
	cm, err := s.commitManifest(edit)
	if err != nil {
		s.fail(err)
		return fmt.Errorf("%w: manifest commit: %w", ErrFailed, err)
	}
	for i, sg := range add {
		sg.meta = cm.Add[i]
	}
	restated := make(map[uint64]*sealed, len(c.restate))
	for i, sg := range c.restate {
		restated[sg.meta.ID] = sg.restated(cm.Add[len(add)+i])
	}
	s.mu.Lock()
	segs := make([]*sealed, 0, len(s.mu.segs)+len(add))
	var retired []*sealed
	for _, sg := range s.mu.segs {
		if containsID(remove, sg.meta.ID) {
			retired = append(retired, sg)
		} else if r := restated[sg.meta.ID]; r != nil {
			segs = append(segs, r)
		} else {
			segs = append(segs, sg)
		}
	}
	segs = append(segs, add...)
	sortSegments(segs)
	s.mu.segs = segs
	s.mu.segsSeq = cm.Seq
	for _, sg := range add {
		sg.df.setSealed(sg.meta.DataLength)
	}
	if install != nil {
		install()
	}
	s.mu.Unlock()
	// Gets hold mu while they read, so none is using a retired file now;
	// pinned snapshots and exports keep theirs until they are done.
	for _, sg := range retired {
		sg.df.retire()
	}
	if len(covered) > 0 {
		s.stats.rangeDrops.Add(int64(len(covered)))
		s.log.Debug("segkv: dropped segments under a range tombstone", slog.Any("segments", covered))
	}
	return nil
}

// coveredByRanges returns the sealed segments that a commit adding add
// makes dead: older than an added segment and holding nothing outside one
// span of its range tombstones (neither a key nor a range tombstone of
// their own, which could still delete keys outside it in older segments).
// Dropping them in the same commit that makes the tombstone durable frees
// whole files at O(segments) cost. Segments already in remove, and the
// inputs of a merge in progress (which will remove them itself), are left
// out. commitMu held.
func (s *Store) coveredByRanges(add []*sealed, remove []uint64) []uint64 {
	var out []uint64
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, a := range add {
		// Order 0 means "the newest, assigned at commit": everything
		// installed is older.
		maxOrder := uint64(math.MaxUint64)
		if a.meta.Order != 0 {
			maxOrder = a.meta.Order - 1
		}
		out = s.appendCoveredLocked(out, a.index().Ranges(), maxOrder, remove)
	}
	return out
}

// appendCoveredLocked appends to out the installed segments with an Order
// at most maxOrder that ranges covers whole (segmentSpan), leaving out
// those already in skip or out and those claimed in merging. commitMu and
// mu held.
func (s *Store) appendCoveredLocked(out []uint64, ranges *rangedel.Set, maxOrder uint64, skip []uint64) []uint64 {
	if ranges.Len() == 0 {
		return out
	}
	for _, sg := range s.mu.segs {
		if sg.meta.Order > maxOrder || containsID(skip, sg.meta.ID) || containsID(out, sg.meta.ID) || s.merging[sg.meta.ID] {
			continue
		}
		if sp, ok := segmentSpan(sg); ok && ranges.ContainsSpan(sp) {
			out = append(out, sg.meta.ID)
		}
	}
	return out
}

// segmentSpan returns the smallest span holding every key and every range
// tombstone of sg; ok is false for a segment that holds neither.
func segmentSpan(sg *sealed) (rangedel.Span, bool) {
	var sp rangedel.Span
	ok := false
	if sg.meta.Keys > 0 {
		// The manifest's record of the segment's smallest and largest key;
		// the end is exclusive: the key right after MaxKey.
		sp = rangedel.Span{Start: sg.meta.MinKey, End: append(bytes.Clone(sg.meta.MaxKey), 0)}
		ok = true
	}
	if start, end, has := sg.index().Ranges().Bounds(); has {
		if !ok || bytes.Compare(start, sp.Start) < 0 {
			sp.Start = start
		}
		if !ok || bytes.Compare(end, sp.End) > 0 {
			sp.End = end
		}
		ok = true
	}
	return sp, ok
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// sealTidy is the file work a seal leaves to the background.
type sealTidy struct {
	sg     *sealed
	df     *dataFile
	length int64
	ixData []byte
}

// tidy writes a sealed segment's index file (unsynced) and truncates its
// data file to the data length. A segment a merge retired meanwhile is left
// alone: its files are going away.
func (s *Store) tidy(j sealTidy) {
	// Under the file's filesMu, so that a merge that retires the segment
	// meanwhile removes its files after this, not before: an index written
	// after the removal would be left behind for the next Open.
	j.df.filesMu.Lock()
	defer j.df.filesMu.Unlock()
	if j.df.retired.Load() {
		return
	}
	s.writeIndexFile(j.sg, j.ixData)
	f, err := s.fs.OpenReadWrite(j.df.path)
	if err == nil {
		err = f.Truncate(j.length)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.log.Warn("segkv: releasing a sealed file's preallocation failed", slog.String("path", j.df.path), slog.Any("err", err))
	}
}
