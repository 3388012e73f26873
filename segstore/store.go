// Package segstore is the public API of segkv: an embeddable, log-structured
// key-value store. It owns the Store type, its options and errors, the live
// file and its in-memory key directory, sealing, reads across the live file
// and sealed segments, and the background work (spare files, interval syncs).
//
// Writes append framed records to the live data file through a group-commit
// writer; reads consult the live file's key directory, then sealed segments
// newest first through their indexes and bloom filters. The set of segments is
// recorded in the manifest log (package manifestlog); Open runs package
// recovery before serving anything. docs/DESIGN.md states the crash contract.
package segstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/recovery"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// closeSealBytes is the live file size from which Close seals it.
const closeSealBytes = 1 << 20

// lockName is the file whose flock keeps a second Store out of the directory.
const lockName = "LOCK"

// Store is an open segkv store. It is safe for concurrent use.
//
// # Lock order
//
// A goroutine that holds several of the store's locks took them in this
// order, and never takes an earlier one while holding a later one:
//
//  1. ops (the gate): not a lock held across work, but Close waits on it for
//     every admitted Seal, Import, ReplaceAll, NewSealedSnapshot, Compact,
//     Export (of the store or of a snapshot), Sync, Check and Verify.
//  2. replaceMu: held shared by a merge step for its duration, exclusively
//     by ReplaceAll for its whole duration (so no merge step runs beside
//     one, and ReplaceAlls run one at a time).
//  3. sealMu, mergeMu, importMu: one seal, one merge step, one import
//     commit (or Follow) at a time. ReplaceAll and Import hold two of them,
//     sealMu then importMu (an import's commit seals the live file above
//     the imported segments); neither takes mergeMu (ReplaceAll's replaceMu
//     keeps merges out; an import commits beside a merge like a seal).
//     The garbage tracker's lock (garbage.mu) comes after these: a merge
//     step refreshes the estimates under mergeMu, Metrics under none, and
//     neither holds it while taking a later lock (index reads and repairs
//     under it take no store lock).
//  4. writeMu: shared by writers for a commit to the live file; exclusive for
//     a seal's switch of live files, for ReplaceAll's manifest commit and
//     switch, for NewSealedSnapshot's check of an empty live file, for
//     Close (to wait out admitted commits) and for Check.
//  5. commitMu: a manifest commit and the install of its result, so that the
//     read view changes in manifest order.
//  6. mu: the read view (live file, frozen file, sealed segments).
//  7. tail.mu: one live file's key directory.
//  8. the rest, each held briefly: a snapshot's readMu (around value reads
//     and around its Close, whose unpins may unmap and remove files), then
//     a data file's filesMu (its index write or removal), then the file
//     cache's lock and a data file's mapMu; a live file's syncMu (held
//     shared around a sync, exclusively by ReplaceAll to retire the file),
//     the spare's lock and the background's tidyMu take no other lock but
//     the wal.Writer's.
//
// Below the store: the live file's wal.Writer lock (taken under writeMu by
// a commit or a seal's switch, and by a sync: Sync, the interval sync, a
// seal's barrier, Import's sync under importMu) and the manifest log's
// locks (under commitMu); neither takes a store lock.
type Store struct {
	// Set by Open and never changed; each is safe for concurrent use.
	dir      string
	opts     Options
	fs       vfs.FS
	log      *slog.Logger
	lock     io.Closer
	mlog     *manifestlog.Log // owns the segment metadata, file ids and orders
	files    *fileCache
	recovery *recovery.Report
	mreport  manifestlog.Report
	stats    counters
	bg       *background

	hooks testHooks // zero outside tests

	batchPool sync.Pool // of *batchBuffers, see Batch.recycle
	// blockCaches are the decoded-block buffers point reads of block files
	// borrow (*blockCache, always reset).
	blockCaches sync.Pool

	// closed is set when Close begins: from then on every call but Close's
	// own work returns ErrClosed. Writers check it under writeMu, readers of
	// the read view under mu, so Close's exclusive acquisitions of those
	// locks are the points after which no admitted call is still running.
	closed atomic.Bool
	// ops admits the long operations (Seal, Import, Compact, Export, ...)
	// and cancels their contexts when Close begins, so that they stop at
	// their next check instead of making Close wait for them.
	ops opGate

	// failure is the first error that stopped the store accepting writes.
	failure atomic.Pointer[error]

	// replaceMu is held shared by a merge step and exclusively by
	// ReplaceAll: a merge never runs beside a replace (whose commit removes
	// every segment, the merge's inputs too).
	replaceMu sync.RWMutex
	sealMu    sync.Mutex // one seal at a time
	mergeMu   sync.Mutex // one merge step at a time
	mergeOpts MergeOptions
	importMu  sync.Mutex // one import's duplicate check and commit at a time

	// writeMu is held shared by writers while they commit to the live file
	// and exclusively by a seal for the instant it moves writers to the next
	// live file: that is the only time a seal blocks writers.
	writeMu sync.RWMutex

	// commitMu makes a manifest commit and the install of its result in the
	// read view one step, so that the view changes in manifest order. It
	// also guards merging: the ids of the segments that no other commit may
	// remove (coveredByRanges leaves them alone), which are the inputs of
	// the merge step in progress or the segments a ReplaceAll in progress
	// keeps (the two never run at once: replaceMu); replacing, the number of
	// ReplaceAll calls waiting for or holding replaceMu, which a merge step
	// checks before it picks a run; and mergeCancel, which stops the merge
	// step in progress (ReplaceAll calls it: the step's work is about to be
	// replaced).
	commitMu    sync.Mutex
	merging     map[uint64]bool
	replacing   int
	mergeCancel context.CancelCauseFunc

	// garbage holds the sealed segments' garbage estimates (garbage.go),
	// under a mutex of its own, taken with no other store lock held.
	garbage garbageTracker

	// mu guards the read view. Readers hold it shared for the duration of a
	// lookup, so a segment removed from segs under the exclusive lock is no
	// longer in use by any Get once the lock is released.
	mu struct {
		sync.RWMutex
		tail   *tail
		frozen *tail // a live file being sealed: still readable, no longer written
		// segs is the sealed segments, newest (highest Order) first. Once
		// the store is open it is replaced whole, never written in place:
		// snapshots share it.
		segs []*sealed
		// segsSeq is the ManifestSeq of the commit whose state segs is:
		// set with segs, under the exclusive lock, so a snapshot reads the
		// two as one pair (the manifest's own Seq runs ahead of segs
		// between a commit and its install).
		segsSeq uint64
	}

	// spare is the next live file, made ahead of need by the background.
	spare struct {
		sync.Mutex
		file *spareFile
	}

	// snapshots counts open snapshots and iterators.
	snapshots atomic.Int64
}

// tail is a live data file and its key directory.
type tail struct {
	id   uint64
	path string
	df   *dataFile
	file vfs.File // for appending only; reads go through the file cache
	w    *wal.Writer

	st *Store
	// sealDigest is the digest of a chain file that Open seals, read by
	// recovery before it changed anything (0 for a file a seal re-reads).
	sealDigest uint64

	// mu guards keys, ranges and records: publishes hold it exclusively,
	// lookups shared, and a snapshot exclusively for the instant it copies
	// keys.
	mu   sync.RWMutex
	keys liveIndex
	// ranges is the union of the file's range tombstones, copy-on-write
	// like keys. Applying a range tombstone removes the keys it covers from
	// keys, so every key in keys is newer than any of the file's range
	// tombstones covering it.
	ranges  *rangedel.Tree
	records int
	// frozen is a copy of keys and ranges taken since the last publish,
	// shared by every snapshot and iterator made until the next one: a copy
	// per iterator would make the next publish copy the nodes it touches
	// once per copy.
	frozen *tailView

	// syncMu is held shared around a sync of the file (syncLive) and
	// exclusively by ReplaceAll when it retires the file, whose writes its
	// commit discarded: retired is set and the append handle closed, so a
	// sync that raced the replace finds nothing left to sync.
	syncMu  sync.RWMutex
	retired bool
}

// sync makes the file's acknowledged writes durable, unless ReplaceAll
// retired the file (its writes are no longer part of the store).
func (t *tail) sync() error {
	t.syncMu.RLock()
	defer t.syncMu.RUnlock()
	if t.retired {
		return nil
	}
	return t.w.Sync()
}

// apply records one record of the file, in file order; mu held exclusively.
func (t *tail) apply(kind segment.RecordKind, key, value []byte, off int64, length int) {
	t.records++
	t.frozen = nil
	if kind == segment.KindRangeDelete {
		t.keys.deleteRange(key, value)
		t.ranges.Add(rangedel.Span{Start: key, End: value})
		return
	}
	t.keys.set(newLiveEntry(key, off, length, kind))
}

func newTail(s *Store, id uint64) *tail {
	return &tail{id: id, st: s, keys: newLiveIndex(), ranges: rangedel.NewTree()}
}

// sealed is a sealed segment and its index.
type sealed struct {
	meta manifestlog.SegmentMeta
	df   *dataFile
	// ix is the segment's index: decoded in the heap when a seal, merge or
	// import has just built it, then replaced by the mapping of its file
	// once that is written (see writeIndexFile). Both answer alike. It is
	// shared with the copies restated gives the segment when ReplaceAll
	// keeps it under a new order, so that the switch reaches them too.
	ix *atomic.Pointer[index.Index]
}

func newSealed(meta manifestlog.SegmentMeta, df *dataFile, ix *index.Index) *sealed {
	sg := &sealed{meta: meta, df: df, ix: new(atomic.Pointer[index.Index])}
	sg.ix.Store(ix)
	return sg
}

// restated returns the segment with the metadata a later commit recorded
// for the same file (ReplaceAll gives a kept segment a new order): the
// same data file, pins and index. The original is left as it is, for the
// snapshots that still see it with its old order.
func (sg *sealed) restated(meta manifestlog.SegmentMeta) *sealed {
	return &sealed{meta: meta, df: sg.df, ix: sg.ix}
}

// index returns the segment's index.
func (sg *sealed) index() *index.Index { return sg.ix.Load() }

// Open opens (creating if needed) the store in dir. opts may be nil.
func Open(dir string, opts *Options) (*Store, error) {
	return open(dir, opts, testHooks{})
}

// testHooks let tests reach into the store's work; all are nil outside tests.
type testHooks struct {
	// beforeJob runs before the background makes a spare ("spare"),
	// tidies after a seal ("tidy") or takes a merge step ("merge"), so that
	// tests can keep that work out of what they record.
	beforeJob func(job string)
	// beforeBuild runs before a segment's index is built (seal, merge,
	// import) with the data file's path; an error fails the build.
	beforeBuild func(path string) error
}

func open(dir string, opts *Options, hooks testHooks) (*Store, error) {
	start := time.Now()
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory name", ErrInvalidOption)
	}
	mo, err := o.Merge.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, opts: o, fs: o.FS, log: o.Logger, mergeOpts: mo, hooks: hooks, merging: map[uint64]bool{}}
	if o.ReadOnly {
		// Nothing is created: the directory must exist (a listing error
		// for a missing one matches fs.ErrNotExist).
		if _, err := s.fs.List(dir); err != nil {
			return nil, fmt.Errorf("segkv: open %s read-only: %w", dir, err)
		}
	} else if err := s.fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("segkv: create %s: %w", dir, err)
	}
	lock, err := s.fs.Lock(filepath.Join(dir, lockName))
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, fmt.Errorf("segkv: lock %s: %w", dir, err)
	}
	s.lock = lock
	s.files = newFileCache(s.fs, o.MaxOpenFiles)
	recover := s.recover
	if o.ReadOnly {
		recover = s.recoverReadOnly
	}
	if err := recover(); err != nil {
		s.closeResources()
		return nil, err
	}
	repairs := 0
	if !o.ReadOnly {
		// A read-only open repaired nothing (its RecoveryReport says what
		// a writable one would repair), so it reports no repair events;
		// and it has no background: no spare, no seal, no merge, no
		// interval sync (a nil background does nothing).
		repairs = s.reportRepairs()
		s.bg = startBackground(s)
	}
	s.logOpened(start, repairs)
	return s, nil
}

// recover replays the manifest and the live chain and seals every live file
// of the chain but the last, so that the store starts with one live file.
func (s *Store) recover() error {
	// Data files without any manifest mean the manifest was lost, not that
	// the store is new: recovery would take every data file for an orphan
	// and remove it. Refuse before anything is created, and touch nothing.
	hasData, err := s.refuseDataWithoutManifest()
	if err != nil {
		return err
	}
	mlog, state, mrep, err := manifestlog.Open(s.fs, s.dir, manifestlog.Options{Logger: s.log, OnRotate: s.manifestRotated, HasData: hasData})
	if err != nil {
		return fmt.Errorf("segkv: open manifest: %w", err)
	}
	s.mlog = mlog
	s.mreport = mrep

	// Plan reads everything and changes no data file; Settle, below, makes
	// its repairs once the chain's files are open too, so that an Open that
	// fails on a read or an open leaves every file as it found it.
	res, tails, err := s.planRecovery(state, mrep, false)
	if err != nil {
		return err
	}
	// A file left by a crash before any commit recorded its id must never
	// be named again.
	s.mlog.ReserveIDsBelow(res.MaxFileID + 1)

	for _, rs := range res.Segments {
		df := s.newDataFile(rs.Meta.ID, rs.Meta.FileKind)
		df.setSealed(rs.Meta.DataLength)
		df.holdIndex(rs.Index)
		s.mu.segs = append(s.mu.segs, newSealed(rs.Meta, df, rs.Index))
	}
	sortSegments(s.mu.segs)
	s.mu.segsSeq = s.mlog.Seq()

	if len(res.Live) == 0 {
		if err := res.Settle(s.fs); err != nil {
			return err
		}
		// A fresh store: make its first live file durable, then name it.
		sp, err := s.makeSpare()
		if err != nil {
			return err
		}
		// openTail opens the file for itself; the spare's handle is done.
		if err := sp.f.Close(); err != nil {
			return fmt.Errorf("segkv: close first live file %s: %w", sp.path, err)
		}
		t, err := s.openTail(sp.id, segment.HeaderSize, nil)
		if err != nil {
			return err
		}
		s.preallocateTail(t)
		if _, err := s.mlog.Commit(manifestlog.Edit{SetLive: true, LiveID: t.id}); err != nil {
			t.file.Close()
			return fmt.Errorf("segkv: name first live file: %w", err)
		}
		s.mu.tail = t
		s.mu.segsSeq = s.mlog.Seq() // still no segments, as of this commit
		return nil
	}
	var chain []*tail
	closeChain := func(from int) {
		for _, c := range chain[from:] {
			c.file.Close()
		}
	}
	for _, lf := range res.Live {
		t, err := s.openTail(lf.ID, lf.End, tails[lf.ID])
		if err != nil {
			closeChain(0)
			return err
		}
		t.sealDigest = lf.Digest
		chain = append(chain, t)
	}
	if err := res.Settle(s.fs); err != nil {
		closeChain(0)
		return err
	}
	last := len(chain) - 1
	s.preallocateTail(chain[last])
	s.mu.tail = chain[last]
	// Continuations exist only after a crash between moving writers to a new
	// live file and the seal's manifest commit: finish those seals now, with
	// the digests Plan read before anything changed.
	for i, t := range chain[:last] {
		if _, err := s.finishSeal(t, chain[i+1].id, nil); err != nil {
			closeChain(i) // the live file (last) is closed with the store
			return err
		}
	}
	return nil
}

// refuseDataWithoutManifest refuses a directory that holds data files but
// no MANIFEST-* file at all, and says whether it holds data files (any
// file recovery.IsStoreFile names: data, index, an index being rebuilt;
// the store writes each only once its manifest exists).
//
// Every other case of data files beside no usable manifest (a generation
// renamed to a name the log does not read, an emptied or zeroed
// generation 1) is the manifest log's to refuse, given HasData: it never
// creates a manifest in a directory that holds data files, and refuses a
// stray MANIFEST-* name beside them (manifestlog.Options.HasData).
func (s *Store) refuseDataWithoutManifest() (hasData bool, err error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return false, fmt.Errorf("segkv: list %s: %w", s.dir, err)
	}
	var data string
	manifest := false
	for _, name := range names {
		if strings.HasPrefix(name, "MANIFEST-") {
			manifest = true
		}
		if data == "" && recovery.IsStoreFile(name) {
			data = name
		}
	}
	if data != "" && !manifest {
		return true, corruption.New(filepath.Join(s.dir, data), -1,
			"data file present but the directory has no manifest; refusing to open (restore the MANIFEST-* files)")
	}
	return data != "", nil
}

// openTail opens live file id for appending at end (durable up to end).
func (s *Store) openTail(id uint64, end int64, replayed *tail) (*tail, error) {
	p := filepath.Join(s.dir, segment.DataName(id, segment.KindLog))
	f, err := s.fs.OpenReadWrite(p)
	if err != nil {
		return nil, fmt.Errorf("segkv: open live file: %w", err)
	}
	if _, err := segment.UpgradeHeader(f, p); err != nil {
		f.Close()
		return nil, fmt.Errorf("segkv: open live file: %w", err)
	}
	t := replayed
	if t == nil {
		t = newTail(s, id)
	}
	t.path, t.file = p, f
	t.df = s.newDataFile(id, segment.KindLog)
	t.w = wal.NewWriter(s.timedSyncs(f), p, end, end, s.walOptions(t))
	return t, nil
}

// preallocateTail restores the live file's preallocation, which Close or
// recovery may have cut, so that appends do not change the file size (a
// cheaper barrier). A failure only costs that.
func (s *Store) preallocateTail(t *tail) {
	if size, err := t.file.Size(); err == nil && size < s.opts.SegmentSize {
		if err := t.file.Preallocate(size, s.opts.SegmentSize-size); err != nil {
			s.log.Debug("segkv: preallocate live file", slog.String("path", t.path), slog.Any("err", err))
		}
	}
}

// zeroAhead is how far past the data a synced group writes zeros into the
// live file's preallocated space (wal.Options.ZeroAhead): then most durable
// writes overwrite written blocks, whose fdatasync flushes data without a
// journal commit. segbench fsync measures the two barriers side by side.
const zeroAhead = 1 << 20

// walOptions configures the writer of live file t.
func (s *Store) walOptions(t *tail) wal.Options {
	return wal.Options{Publish: t.publish, ZeroAhead: zeroAhead, ZeroLimit: s.opts.SegmentSize}
}

// publish makes a committed group visible to readers, in file order.
func (t *tail) publish(reqs []*wal.Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range reqs {
		b, ok := r.Data.(*Batch)
		if !ok {
			continue
		}
		for _, e := range b.entries {
			t.apply(e.kind, b.key(e), b.value(e), r.Offset+int64(e.recOff), e.recLen)
		}
	}
}

// lookup returns the entry of key, or whether one of the file's range
// tombstones deletes it.
func (t *tail) lookup(key []byte) (e liveEntry, found, deleted bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, found = t.keys.get(key)
	return e, found, !found && t.ranges.Covers(key)
}

// view returns a frozen copy of the key directory and the range tombstones,
// in O(1): the copy taken since the last publish if there is one (under the
// shared lock), else a new one (under the exclusive lock, which copy needs).
func (t *tail) view() tailView {
	t.mu.RLock()
	if fr := t.frozen; fr != nil {
		t.mu.RUnlock()
		return *fr
	}
	t.mu.RUnlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.frozen == nil {
		t.frozen = &tailView{t: t, keys: t.keys.copy(), ranges: t.ranges.Copy()}
	}
	return *t.frozen
}

func sortSegments(segs []*sealed) {
	slices.SortFunc(segs, func(a, b *sealed) int {
		switch {
		case a.meta.Order > b.meta.Order:
			return -1
		case a.meta.Order < b.meta.Order:
			return 1
		}
		return 0
	})
}

func (s *Store) validate(key, value []byte) error {
	if len(key) > s.opts.MaxKeySize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), s.opts.MaxKeySize)
	}
	if len(value) > s.opts.MaxValueSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(value), s.opts.MaxValueSize)
	}
	return nil
}

// validateRange checks the bounds of a range deletion.
func (s *Store) validateRange(start, end []byte) error {
	for _, k := range [2][]byte{start, end} {
		if len(k) > s.opts.MaxKeySize {
			return fmt.Errorf("%w: range bound of %d bytes, limit %d", ErrKeyTooLarge, len(k), s.opts.MaxKeySize)
		}
	}
	if bytes.Compare(start, end) > 0 {
		return fmt.Errorf("%w: start %q is after end %q", ErrInvalidRange, truncateKey(start), truncateKey(end))
	}
	return nil
}

// truncateKey shortens a key for an error message.
func truncateKey(k []byte) []byte {
	if len(k) > 32 {
		return k[:32]
	}
	return k
}

// failed returns ErrFailed with its cause once the store has failed.
func (s *Store) failed() error {
	if p := s.failure.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	return nil
}

// fail puts the store into the failed state: no more writes.
func (s *Store) fail(err error) {
	if s.failure.CompareAndSwap(nil, &err) {
		s.log.Error("segkv: store failed; writes refused until reopen", slog.Any("err", err))
		if f := s.opts.Events.StoreFailed; f != nil {
			f(StoreFailedInfo{Err: err})
		}
	}
}

// Put sets key to value.
func (s *Store) Put(key, value []byte) error {
	b := s.NewBatch()
	if err := b.Put(key, value); err != nil {
		return err
	}
	return s.Apply(b)
}

// Delete removes key. Deleting an absent key is not an error.
func (s *Store) Delete(key []byte) error {
	b := s.NewBatch()
	if err := b.Delete(key); err != nil {
		return err
	}
	return s.Apply(b)
}

// DeleteRange deletes every key k with start <= k < end (end exclusive, as
// in Pebble) with one record, whatever the number of keys: see
// Batch.DeleteRange. Sealed segments that hold only keys it deletes are
// dropped whole, files and all: under SyncAlways before it returns, with
// one manifest commit once the record is durable; otherwise at the commit
// of the seal that makes it durable in a segment (or at a later merge's).
// The same holds for the range deletions of a batch given to Apply.
func (s *Store) DeleteRange(start, end []byte) error {
	b := s.NewBatch()
	if err := b.DeleteRange(start, end); err != nil {
		return err
	}
	return s.Apply(b)
}

// Apply writes every operation of b atomically: after any crash either all
// are visible or none. Under SyncAlways it returns once they are durable.
func (s *Store) Apply(b *Batch) error {
	if b == nil || b.store != s || b.applied {
		return ErrInvalidBatch
	}
	if b.err != nil {
		return b.err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := s.failed(); err != nil {
		return err
	}
	if len(b.entries) == 0 {
		return nil
	}
	req := &wal.Request{Payload: b.buf, Sync: s.opts.Sync == SyncAlways, Data: b}
	// Range tombstones under SyncAlways drop the sealed segments they
	// cover as soon as they are durable, by a seal (see rangedrop.go).
	var dropSpans []rangedel.Span
	if req.Sync {
		dropSpans = b.rangeSpans()
	}
	if !s.writeMu.TryRLock() {
		// A seal is switching live files: count the wait so that stalls show
		// in Metrics.
		s.stats.writeStalls.Add(1)
		s.writeMu.RLock()
	}
	// Checked again under writeMu: Close takes writeMu exclusively after
	// setting closed, so a commit either starts before that (and Close
	// waits for it) or sees closed here.
	if s.closed.Load() {
		s.writeMu.RUnlock()
		return ErrClosed
	}
	// And the failure, for a write that waited out a seal's switch while
	// the seal failed the store.
	if err := s.failed(); err != nil {
		s.writeMu.RUnlock()
		return err
	}
	t := s.mu.tail
	err := t.w.Commit(req)
	end := t.w.Offset()
	s.writeMu.RUnlock()
	if err != nil {
		s.fail(err)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	b.applied = true
	s.stats.writeBytes.Add(int64(len(req.Payload)))
	// Commit has returned: the group that held b.buf is written and
	// published, and nothing refers to the buffers any more.
	b.recycle()
	s.stats.writes.Add(1)
	if end >= s.opts.SegmentSize {
		s.bg.requestSeal()
	}
	if dropSpans != nil {
		s.sealForRangeDrop(dropSpans)
	}
	return nil
}

// Get returns a copy of the value of key, or ErrNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	v, err := s.get(key)
	s.countGet(err)
	return v, err
}

// countGet counts a Get's outcome: one atomic add. Gets return ErrNotFound
// itself, never wrapped, so the comparison needs no errors.Is.
func (s *Store) countGet(err error) {
	switch err {
	case nil:
		s.stats.getHits.Add(1)
	case ErrNotFound:
		s.stats.getMisses.Add(1)
	default:
		s.stats.getErrors.Add(1)
	}
}

func (s *Store) get(key []byte) ([]byte, error) {
	if len(key) > s.opts.MaxKeySize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), s.opts.MaxKeySize)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	// Under mu: Close releases the files only under the exclusive lock,
	// after setting closed.
	if s.closed.Load() {
		return nil, ErrClosed
	}
	for _, t := range [2]*tail{s.mu.tail, s.mu.frozen} {
		if t == nil {
			continue
		}
		l, found, deleted := t.lookup(key)
		if deleted {
			return nil, ErrNotFound
		}
		if found {
			if l.kind == segment.KindDelete {
				return nil, ErrNotFound
			}
			return s.readValue(t.df, l.off, l.length, l.kind, key)
		}
	}
	return s.getSealed(s.mu.segs, key)
}

// getSealed looks key up in sealed segments ordered newest first: the first
// segment whose index holds the key, or whose range tombstones cover it,
// decides. The caller keeps them pinned
// (or holds mu).
func (s *Store) getSealed(segs []*sealed, key []byte) ([]byte, error) {
	probe := index.NewProbe(key) // hashed once for every segment's bloom filter
	var filtered int64           // segments the bloom filters ruled out: counted once, at the end
	var blocks *blockCache       // borrowed at the first block file's block read
	defer func() {
		if filtered > 0 {
			s.stats.bloomNegs.Add(filtered)
		}
		if blocks != nil {
			s.returnBlockCache(blocks)
		}
	}()
	for _, seg := range segs {
		ix := seg.index()
		e, ok, bloomNeg, err := ix.Lookup(&probe)
		if err != nil {
			return nil, fmt.Errorf("segkv: get: %w", err)
		}
		if ok && ix.BlockFile() {
			// The index named the block that would hold the key; the
			// block says whether it does.
			if blocks == nil {
				blocks = s.borrowBlockCache()
			}
			rec, found, err := blocks.pointRecord(seg.df, e.Offset, e.Length, key)
			if err != nil {
				return nil, fmt.Errorf("segkv: get: %w", err)
			}
			if found {
				if rec.Kind == segment.KindDelete {
					return nil, ErrNotFound
				}
				s.stats.readBytes.Add(int64(e.Length))
				return bytes.Clone(rec.Value), nil
			}
			ok = false
		}
		if !ok {
			if bloomNeg {
				filtered++
			}
			if ix.Ranges().Covers(key) {
				return nil, ErrNotFound
			}
			continue
		}
		if e.Kind == index.KindDelete {
			return nil, ErrNotFound
		}
		return s.readValue(seg.df, e.Offset, e.Length, e.Kind, key)
	}
	return nil, ErrNotFound
}

// readValue reads and verifies the record at off in data file d and returns
// its value, which the caller owns. The caller keeps d pinned (or holds mu).
func (s *Store) readValue(d *dataFile, off int64, length uint32, kind segment.RecordKind, key []byte) ([]byte, error) {
	v, _, err := s.readRecord(d, nil, off, length, kind, key)
	if err != nil {
		return nil, err
	}
	s.stats.readBytes.Add(int64(length))
	// readRecord read into a buffer of its own, so the value can be handed
	// to the caller without a second copy. The capacity is cut so that an
	// append by the caller cannot scribble over the checksum behind it.
	return v[:len(v):len(v)], nil
}

// readRecord reads the record at off in data file d into buf (grown if it is
// too small: nil allocates one for this record alone), verifies its checksum
// and that it holds key with the kind the index gave, and returns its value
// with the buffer it aliases. The caller keeps d pinned (or holds mu).
func (s *Store) readRecord(d *dataFile, buf []byte, off int64, length uint32, kind segment.RecordKind, key []byte) (value, _ []byte, err error) {
	return s.readRecordCached(d, nil, buf, off, length, kind, key)
}

// readRecordCached is readRecord reading a block file's blocks through c
// (nil: a cache borrowed for this read).
func (s *Store) readRecordCached(d *dataFile, c *blockCache, buf []byte, off int64, length uint32, kind segment.RecordKind, key []byte) (value, _ []byte, err error) {
	if d.format.Load() != formatRecords {
		blocks, err := d.blockFormat()
		if err != nil {
			return nil, buf, err
		}
		if blocks {
			return s.readBlockValue(d, c, buf, off, length, kind, key)
		}
	}
	var got segment.RecordKind
	if m := d.reader(); m != nil && off >= 0 && off+int64(length) <= int64(len(m.data)) {
		// Copied out of the mapping, then verified: the bytes returned are
		// the bytes checked.
		if cap(buf) < int(length) {
			buf = make([]byte, length)
		}
		buf = buf[:length]
		copy(buf, m.data[off:])
		got, value, err = segment.CheckValue(buf, d.path, off, key)
	} else {
		got, value, buf, err = s.readRecordFile(d, buf, off, length, key)
	}
	if err != nil {
		return nil, buf, err
	}
	if got != kind {
		return nil, buf, kindError(d.path, off, got, kind)
	}
	return value, buf, nil
}

// readRecordFile is readRecord through the file cache, for a file that is
// not mapped.
func (s *Store) readRecordFile(d *dataFile, buf []byte, off int64, length uint32, key []byte) (segment.RecordKind, []byte, []byte, error) {
	h, err := s.files.acquire(d.id, d.path)
	if err != nil {
		return 0, nil, buf, err
	}
	defer s.files.release(h)
	rec, buf, err := segment.ReadRecordInto(h.f, buf, d.path, off, int(length), key)
	return rec.Kind, rec.Value, buf, err
}

// kindError reports a record whose kind is not the one the index gave.
func kindError(path string, off int64, got, want segment.RecordKind) error {
	return fmt.Errorf("%w: %s at %d: record is a %v, index says %v", ErrCorrupt, path, off, got, want)
}

// Sync makes every write acknowledged so far durable.
func (s *Store) Sync() error {
	if err := s.enter(true); err != nil {
		return err
	}
	defer s.ops.leave()
	return s.syncLive()
}

// syncLive makes every write acknowledged so far durable: the live file and
// a live file being sealed, which may hold unsynced writes that precede
// everything in the new one.
func (s *Store) syncLive() error {
	s.mu.RLock()
	t, fr := s.mu.tail, s.mu.frozen
	s.mu.RUnlock()
	if fr != nil {
		if err := fr.sync(); err != nil {
			s.fail(err)
			return fmt.Errorf("%w: %w", ErrFailed, err)
		}
	}
	if err := t.sync(); err != nil {
		s.fail(err)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return nil
}

// RecoveryReport is what Open repaired, or, for a read-only Open
// (RecoveryReport.ReadOnly), what it would have repaired: torn tails, files
// removed, indexes rebuilt, live continuations dropped and the manifest
// log's repairs. An alias, so that callers need not import package
// recovery; its methods (Repaired) take a value receiver.
type RecoveryReport = recovery.Report

// TornTail is a torn tail a RecoveryReport lists.
type TornTail = recovery.TornTail

// RecoveryReport returns what Open repaired (see the RecoveryReport type).
func (s *Store) RecoveryReport() recovery.Report {
	if s.recovery == nil {
		return recovery.Report{}
	}
	return *s.recovery
}

// ManifestSeq returns the sequence number of the last manifest commit: a peer
// that saw the same number knows nothing changed.
func (s *Store) ManifestSeq() uint64 { return s.mlog.Seq() }

// planRecovery runs recovery.Plan over the manifest's state: it reads the
// sealed segments and replays the live chain into tails, one per live
// file, changing nothing on disk (readOnly also keeps it from planning
// index repairs it could not make). The report is kept as the store's
// RecoveryReport, with the manifest's own actions.
func (s *Store) planRecovery(state manifestlog.State, mrep manifestlog.Report, readOnly bool) (*recovery.Result, map[uint64]*tail, error) {
	tails := map[uint64]*tail{}
	res, rep, err := recovery.Plan(s.fs, s.dir, state, recovery.Options{
		Logger:   s.log,
		NoMap:    s.opts.DisableMmap,
		Repair:   s.indexRepair,
		Repaired: s.indexRepaired,
		ReadOnly: readOnly,
		OnLiveRecord: func(id uint64, r segment.Record, off int64, length int) error {
			t := tails[id]
			if t == nil {
				t = newTail(s, id)
				tails[id] = t
			}
			t.apply(r.Kind, r.Key, r.Value, off, length)
			return nil
		},
	})
	s.recovery = rep
	if rep != nil {
		rep.ManifestActions = mrep.Actions
		s.stats.indexRebuilds.Add(int64(len(rep.RebuiltIndexes)))
	}
	return res, tails, err
}
