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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
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
type Store struct {
	dir  string
	opts Options
	fs   vfs.FS
	log  *slog.Logger
	lock io.Closer
	mlog *manifestlog.Log

	files *fileCache

	// writeMu is held shared by writers while they commit to the live file
	// and exclusively by a seal for the instant it moves writers to the next
	// live file: that is the only time a seal blocks writers.
	writeMu sync.RWMutex

	// mu guards the read state: tail, frozen and segs. Readers hold it shared
	// for the duration of a lookup, so a segment removed from segs under the
	// exclusive lock is no longer in use by any Get once the lock is released.
	mu     sync.RWMutex
	tail   *tail
	frozen *tail     // a live file being sealed: still readable, no longer written
	segs   []*sealed // sealed segments, newest (highest Order) first

	sealMu sync.Mutex // one seal at a time

	// commitMu orders the store's manifest commits, so that Orders handed
	// out under it increase with the manifest sequence.
	commitMu  sync.Mutex
	nextOrder uint64

	batchPool sync.Pool // of *batchBuffers, see Batch.recycle

	mergeMu   sync.Mutex // one merge step at a time
	mergeOpts MergeOptions

	nextID atomic.Uint64 // next data file id to hand out

	spareMu sync.Mutex
	spare   *spareFile

	// writeSeq numbers published batches; snapshots see those at or below
	// their own number. snapshots counts open snapshots and iterators.
	writeSeq  atomic.Uint64
	snapshots atomic.Int64

	failure atomic.Pointer[error]
	closed  atomic.Bool
	bg      *background

	// beforeJob, if set (tests only), runs before the background makes a
	// spare ("spare") or tidies after a seal ("tidy"), so that tests can keep
	// that work out of the seal they record.
	beforeJob func(job string)

	stats    counters
	recovery *recovery.Report
	mreport  manifestlog.Report
}

// tail is a live data file and its key directory.
type tail struct {
	id   uint64
	path string
	df   *dataFile
	file vfs.File // for appending only; reads go through the file cache
	w    *wal.Writer

	st      *Store
	mu      sync.RWMutex
	keys    map[string]loc
	records int
}

// loc locates the newest record of a key in a live file. seq orders
// publications for snapshots; prev keeps the version a live snapshot may
// still need (only while snapshots exist, so that chains cost nothing
// otherwise).
type loc struct {
	off    int64
	length uint32
	kind   uint8
	seq    uint64
	prev   *loc
}

// visibleAt returns the newest version of l published at or before seq.
func (l loc) visibleAt(seq uint64) (loc, bool) {
	for l.seq > seq {
		if l.prev == nil {
			return loc{}, false
		}
		l = *l.prev
	}
	return l, true
}

// sealed is a sealed segment with its index in memory.
type sealed struct {
	meta manifestlog.SegmentMeta
	df   *dataFile
	ix   *index.Index
}

// Open opens (creating if needed) the store in dir. opts may be nil.
func Open(dir string, opts *Options) (*Store, error) {
	return open(dir, opts, nil)
}

func open(dir string, opts *Options, beforeJob func(job string)) (*Store, error) {
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
	s := &Store{dir: dir, opts: o, fs: o.FS, log: o.Logger, mergeOpts: mo, beforeJob: beforeJob}
	if err := s.fs.MkdirAll(dir); err != nil {
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
	if err := s.recover(); err != nil {
		s.closeResources()
		return nil, err
	}
	s.bg = startBackground(s)
	return s, nil
}

// recover replays the manifest and the live chain and seals every live file
// of the chain but the last, so that the store starts with one live file.
func (s *Store) recover() error {
	// Data files without any manifest mean the manifest was lost, not that
	// the store is new: recovery would take every data file for an orphan
	// and remove it. Refuse before anything is created, and touch nothing.
	if err := s.refuseDataWithoutManifest(); err != nil {
		return err
	}
	mlog, state, mrep, err := manifestlog.Open(s.fs, s.dir, manifestlog.Options{Logger: s.log})
	if err != nil {
		return fmt.Errorf("segkv: open manifest: %w", err)
	}
	s.mlog = mlog
	s.mreport = mrep

	tails := map[uint64]*tail{}
	res, rep, err := recovery.Run(s.fs, s.dir, state, recovery.Options{
		Logger: s.log,
		OnLiveRecord: func(id uint64, r segment.Record, off int64, length int) error {
			t := tails[id]
			if t == nil {
				t = &tail{id: id, st: s, keys: map[string]loc{}}
				tails[id] = t
			}
			t.keys[string(r.Key)] = loc{off: off, length: uint32(length), kind: r.Kind}
			t.records++
			return nil
		},
	})
	s.recovery = rep
	if err != nil {
		return err
	}
	s.nextID.Store(max(state.NextID, res.MaxFileID+1, 1))
	s.nextOrder = max(state.NextOrder, 1)

	for _, rs := range res.Segments {
		df := s.newDataFile(rs.Meta.ID, rs.Meta.FileKind)
		df.setSealed(rs.Meta.DataLength)
		s.segs = append(s.segs, &sealed{meta: rs.Meta, df: df, ix: rs.Index})
	}
	sortSegments(s.segs)

	if len(res.Live) == 0 {
		// A fresh store: make its first live file durable, then name it.
		sp, err := s.makeSpare()
		if err != nil {
			return err
		}
		t, err := s.openTail(sp.id, segment.HeaderSize, nil)
		if err != nil {
			return err
		}
		if _, err := s.mlog.Commit(manifestlog.Edit{SetLive: true, LiveID: t.id, NextID: s.nextID.Load()}); err != nil {
			t.file.Close()
			return fmt.Errorf("segkv: name first live file: %w", err)
		}
		s.tail = t
		return nil
	}
	var chain []*tail
	for _, lf := range res.Live {
		t, err := s.openTail(lf.ID, lf.End, tails[lf.ID])
		if err != nil {
			for _, c := range chain {
				c.file.Close()
			}
			return err
		}
		chain = append(chain, t)
	}
	s.tail = chain[len(chain)-1]
	// Continuations exist only after a crash between moving writers to a new
	// live file and the seal's manifest commit: finish those seals now.
	for i, t := range chain[:len(chain)-1] {
		if err := s.finishSeal(t, chain[i+1].id); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) refuseDataWithoutManifest() error {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("segkv: list %s: %w", s.dir, err)
	}
	var data string
	for _, name := range names {
		if strings.HasPrefix(name, "MANIFEST-") {
			return nil
		}
		if _, ext, ok := segment.ParseName(name); ok && ext != segment.NameIndex && data == "" {
			data = name
		}
	}
	if data != "" {
		return corruption.New(filepath.Join(s.dir, data), -1,
			"data file present but the directory has no manifest; refusing to open (restore the MANIFEST-* files)")
	}
	return nil
}

// openTail opens live file id for appending at end (durable up to end).
func (s *Store) openTail(id uint64, end int64, replayed *tail) (*tail, error) {
	p := filepath.Join(s.dir, segment.DataName(id, segment.KindLog))
	f, err := s.fs.OpenReadWrite(p)
	if err != nil {
		return nil, fmt.Errorf("segkv: open live file: %w", err)
	}
	t := replayed
	if t == nil {
		t = &tail{id: id, st: s, keys: map[string]loc{}}
	}
	t.path, t.file = p, f
	t.df = s.newDataFile(id, segment.KindLog)
	if size, err := f.Size(); err == nil && size < s.opts.SegmentSize {
		// Recovery may have cut the preallocation with a torn tail; restore it
		// so that appends do not change the file size (a cheaper barrier).
		if err := f.Preallocate(size, s.opts.SegmentSize-size); err != nil {
			s.log.Debug("segkv: preallocate live file", "path", p, "err", err)
		}
	}
	t.w = wal.NewWriter(f, p, end, end, s.walOptions(t))
	return t, nil
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
	keep := t.st.snapshots.Load() > 0
	for _, r := range reqs {
		b, ok := r.Data.(*Batch)
		if !ok {
			continue
		}
		seq := t.st.writeSeq.Add(1)
		for _, e := range b.entries {
			k := b.key(e)
			nl := loc{off: r.Offset + int64(e.recOff), length: uint32(e.recLen), kind: e.kind, seq: seq}
			if keep {
				if old, ok := t.keys[string(k)]; ok {
					nl.prev = &old
				}
			}
			t.keys[string(k)] = nl
		}
		t.records += len(b.entries)
	}
}

func (t *tail) lookup(key []byte) (loc, bool) {
	t.mu.RLock()
	l, ok := t.keys[string(key)]
	t.mu.RUnlock()
	return l, ok
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

func (s *Store) usable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if p := s.failure.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	return nil
}

// fail puts the store into the failed state: no more writes.
func (s *Store) fail(err error) {
	if s.failure.CompareAndSwap(nil, &err) {
		s.log.Error("segkv: store failed; writes refused until reopen", "err", err)
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

// Apply writes every operation of b atomically: after any crash either all
// are visible or none. Under SyncAlways it returns once they are durable.
func (s *Store) Apply(b *Batch) error {
	if b == nil || b.store != s || b.applied {
		return ErrInvalidBatch
	}
	if b.err != nil {
		return b.err
	}
	if err := s.usable(); err != nil {
		return err
	}
	if len(b.entries) == 0 {
		return nil
	}
	req := &wal.Request{Payload: b.buf, Sync: s.opts.Sync == SyncAlways, Data: b}
	if !s.writeMu.TryRLock() {
		// A seal is switching live files: count the wait so that stalls show
		// in Metrics.
		s.stats.writeStalls.Add(1)
		s.writeMu.RLock()
	}
	t := s.tail
	err := t.w.Commit(req)
	end := t.w.Offset()
	s.writeMu.RUnlock()
	if err != nil {
		s.fail(err)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	b.applied = true
	// Commit has returned: the group that held b.buf is written and
	// published, and nothing refers to the buffers any more.
	b.recycle()
	s.stats.writes.Add(1)
	if end >= s.opts.SegmentSize {
		s.bg.requestSeal()
	}
	return nil
}

// Get returns a copy of the value of key, or ErrNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	if len(key) > s.opts.MaxKeySize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), s.opts.MaxKeySize)
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range [2]*tail{s.tail, s.frozen} {
		if t == nil {
			continue
		}
		if l, ok := t.lookup(key); ok {
			if l.kind == segment.KindDelete {
				return nil, ErrNotFound
			}
			return s.readValue(t.df, l.off, l.length, l.kind, key)
		}
	}
	return s.getSealed(s.segs, key)
}

// getSealed looks key up in sealed segments ordered newest first: the first
// segment whose index holds the key decides. The caller keeps them pinned
// (or holds mu).
func (s *Store) getSealed(segs []*sealed, key []byte) ([]byte, error) {
	for _, seg := range segs {
		e, ok := seg.ix.Get(key)
		if !ok {
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
func (s *Store) readValue(d *dataFile, off int64, length uint32, kind uint8, key []byte) ([]byte, error) {
	var r io.ReaderAt
	if m := d.reader(); m != nil {
		r = m
	} else {
		h, err := s.files.acquire(d.id, d.path)
		if err != nil {
			return nil, err
		}
		defer s.files.release(h)
		r = h.f
	}
	rec, err := segment.ReadRecord(r, d.path, off, int(length), key)
	if err != nil {
		return nil, err
	}
	if rec.Kind != kind {
		return nil, fmt.Errorf("%w: %s at %d: record kind %d, index says %d", ErrCorrupt, d.path, off, rec.Kind, kind)
	}
	// ReadRecord read into a buffer of its own, so the value can be handed
	// to the caller without a second copy. The capacity is cut so that an
	// append by the caller cannot scribble over the checksum behind it.
	return rec.Value[:len(rec.Value):len(rec.Value)], nil
}

// Sync makes every write acknowledged so far durable.
func (s *Store) Sync() error {
	if err := s.usable(); err != nil {
		return err
	}
	s.mu.RLock()
	t, fr := s.tail, s.frozen
	s.mu.RUnlock()
	// A live file being sealed may still hold unsynced writes that precede
	// everything in the new live file.
	if fr != nil {
		if err := fr.w.Sync(); err != nil {
			s.fail(err)
			return fmt.Errorf("%w: %w", ErrFailed, err)
		}
	}
	if err := t.w.Sync(); err != nil {
		s.fail(err)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return nil
}

// Close syncs and closes the store. Later calls return ErrClosed.
func (s *Store) Close() error {
	if s.closed.Load() {
		return ErrClosed
	}
	// A large live file is sealed so that the next Open loads its index
	// instead of replaying it; a small one is cheaper to replay than to seal.
	s.mu.RLock()
	live := s.tail.w.Offset()
	s.mu.RUnlock()
	if live >= closeSealBytes && s.usable() == nil {
		if err := s.Seal(); err != nil && !errors.Is(err, ErrClosed) {
			s.log.Warn("segkv: seal on close failed; the next open replays the live file", "err", err)
		}
	}
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	s.bg.stop()
	var errs []error
	if s.failure.Load() == nil {
		s.mu.RLock()
		t := s.tail
		s.mu.RUnlock()
		// Release the live file's unused preallocation: the next Open scans
		// the file to its end (it cannot tell zeros from lost data without
		// looking), and Open preallocates again. No barrier of its own: if a
		// crash undoes it, the next Open is slower, not wrong.
		if err := t.file.Truncate(t.w.Offset()); err != nil {
			s.log.Warn("segkv: releasing the live file's preallocation on close failed", "path", t.path, "err", err)
		}
		if err := t.w.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("segkv: sync on close: %w", err))
		}
	}
	errs = append(errs, s.closeResources())
	return errors.Join(errs...)
}

func (s *Store) closeResources() error {
	var errs []error
	s.mu.Lock()
	for _, t := range [2]*tail{s.tail, s.frozen} {
		if t != nil && t.file != nil {
			errs = append(errs, t.file.Close())
		}
	}
	// Drop the store's pin on every sealed file: a mapping goes now, or
	// when the last snapshot or iterator still reading it is closed.
	// (A read after Close that still reaches one, through Verify for
	// instance, finds no mapping and uses pread.)
	for _, sg := range s.segs {
		sg.df.unpin()
	}
	s.mu.Unlock()
	s.spareMu.Lock()
	if s.spare != nil {
		// An unused spare is only preallocated space: give it back now
		// rather than leave it for the next Open to find and remove.
		errs = append(errs, s.spare.f.Close())
		if err := s.fs.Remove(s.spare.path); err != nil {
			s.log.Debug("segkv: removing the unused spare failed; the next open removes it", "path", s.spare.path, "err", err)
		}
		s.spare = nil
	}
	s.spareMu.Unlock()
	if s.files != nil {
		errs = append(errs, s.files.close())
	}
	if s.mlog != nil {
		errs = append(errs, s.mlog.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}

// RecoveryReport returns what Open repaired.
func (s *Store) RecoveryReport() recovery.Report {
	if s.recovery == nil {
		return recovery.Report{}
	}
	return *s.recovery
}

// ManifestSeq returns the sequence number of the last manifest commit: a peer
// that saw the same number knows nothing changed.
func (s *Store) ManifestSeq() uint64 { return s.mlog.Seq() }
