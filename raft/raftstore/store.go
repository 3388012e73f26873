// Package raftstore is a hashicorp/raft log store and stable store on segkv.
//
// A Store keeps the raft log in one segkv store (directory DIR/log) and the
// stable values (current term, last vote) in another (DIR/stable). Each log
// entry is one key, 'L' and its index big-endian, so key order is index order
// and sealed segment files hold disjoint runs of the log. StoreLogs is one
// atomic batch and, under the durable default, one group-committed fdatasync.
// DeleteRange is one range tombstone however many entries it covers;
// truncating the head of the log makes whole segment files dead, and segkv
// drops them (see Store.DeleteRange). The stable values live in a store of
// their own so that no segment of the log holds a key outside the log's key
// range: a head truncation can then free every segment it covers.
//
// FirstIndex and LastIndex are cached in memory, found at Open with two
// seeks, and kept exact (the smallest and largest index stored) by StoreLogs
// and DeleteRange. Gaps are tolerated.
package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// ErrKeyNotFound is returned by Get and GetUint64 for a stable key never set.
// Its text is exactly "not found": raft compares error strings.
var ErrKeyNotFound = errors.New("not found")

// ErrInvalidLog is returned by StoreLog and StoreLogs for a nil entry.
var ErrInvalidLog = errors.New("raftstore: invalid log entry")

// The codec stores AppendedAt as Unix nanoseconds in an int64.
var (
	minAppendedAt = time.Unix(0, math.MinInt64)
	maxAppendedAt = time.Unix(0, math.MaxInt64)
)

// Default sizes.
const (
	// DefaultSegmentSize is the size at which the log's live file is sealed:
	// the granularity at which a head truncation frees disk space.
	DefaultSegmentSize = 16 << 20
	// stableSegmentSize keeps the stable store's preallocation small: it
	// holds two keys, rewritten once per election.
	stableSegmentSize = 256 << 10
)

// Options configures a Store. A nil *Options means the durable defaults.
type Options struct {
	// NoSync makes writes return before they are durable; they become
	// durable on Close. A crash then loses a suffix of acknowledged writes,
	// which raft's safety does not allow: use it only for tests and
	// benchmarks, as raft-boltdb's NoSync.
	NoSync bool
	// SegmentSize is the size of the log's segment files; zero means
	// DefaultSegmentSize.
	SegmentSize int64
	// FS is the file system; nil means the operating system's.
	FS vfs.FS
	// DisableMmap reads sealed segments with pread instead of a mapping
	// (see segstore.Options.DisableMmap).
	DisableMmap bool
	// Logger receives the stores' repairs and lifecycle events; nil
	// discards.
	Logger *slog.Logger
}

// Store is a raft.LogStore and raft.StableStore. Its methods are safe for
// concurrent use.
type Store struct {
	logs   *segstore.Store
	stable *segstore.Store

	// mu serializes the writes to the log with the updates of the cached
	// bounds, so that the bounds always describe what is stored.
	mu          sync.RWMutex
	first, last uint64 // 0, 0 when the log is empty
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens (creating if needed) the store in dir. opts may be nil.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	sync := segstore.SyncAlways
	if o.NoSync {
		sync = segstore.SyncManual
	}
	logger := o.Logger
	if logger != nil {
		logger = logger.With("raftstore", dir)
	}
	logs, err := segstore.Open(filepath.Join(dir, "log"), &segstore.Options{
		FS: o.FS, Sync: sync, SegmentSize: o.SegmentSize, DisableMmap: o.DisableMmap, Logger: logger,
		// The log is written in key order and dies from its head: merging
		// its segments would rewrite it for nothing and make head
		// truncation free space in larger steps.
		Merge: segstore.MergeOptions{Disable: true},
	})
	if err != nil {
		return nil, fmt.Errorf("raftstore: open log: %w", err)
	}
	stable, err := segstore.Open(filepath.Join(dir, "stable"), &segstore.Options{
		FS: o.FS, Sync: sync, SegmentSize: stableSegmentSize, DisableMmap: o.DisableMmap, Logger: logger,
	})
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("raftstore: open stable store: %w", err)
	}
	s := &Store{logs: logs, stable: stable}
	if s.first, s.last, err = s.bounds(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store; later calls return segstore.ErrClosed. Writes
// acknowledged before Close stay durable.
func (s *Store) Close() error {
	return errors.Join(s.logs.Close(), s.stable.Close())
}

// logIterator iterates the log's keys.
func (s *Store) logIterator() (*segstore.Iterator, error) {
	return s.logs.NewIterator(&segstore.IterOptions{
		LowerBound: []byte{logKeyPrefix}, UpperBound: []byte{logKeyPrefix + 1},
	})
}

// bounds finds the smallest and largest index stored.
func (s *Store) bounds() (first, last uint64, err error) {
	it, err := s.logIterator()
	if err != nil {
		return 0, 0, fmt.Errorf("raftstore: find log bounds: %w", err)
	}
	defer it.Close()
	if it.First() {
		first, err = keyIndex(it.Key())
		if err == nil && it.Last() {
			last, err = keyIndex(it.Key())
		}
	}
	if err == nil {
		err = it.Err()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("raftstore: find log bounds: %w", err)
	}
	return first, last, nil
}

// seekIndex returns the smallest stored index >= from (forward) or the
// largest < from (backward). The cached bounds say one exists: finding
// none is an error, which makes the caller read the bounds again.
func (s *Store) seekIndex(from uint64, forward bool) (uint64, error) {
	it, err := s.logIterator()
	if err != nil {
		return 0, err
	}
	defer it.Close()
	k := logKey(nil, from)
	var ok bool
	if forward {
		ok = it.Seek(k)
	} else {
		ok = it.SeekLT(k)
	}
	if !ok {
		if err := it.Err(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("raftstore: no log entry beside index %d", from)
	}
	return keyIndex(it.Key())
}

func keyIndex(k []byte) (uint64, error) {
	i, ok := logKeyIndex(k)
	if !ok {
		return 0, fmt.Errorf("%w: key %x in the log's key range is not a log key", ErrCorruptEntry, k)
	}
	return i, nil
}

// FirstIndex returns the smallest index stored, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.first, nil
}

// LastIndex returns the largest index stored, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last, nil
}

// GetLog reads the entry at index into log; raft.ErrLogNotFound if none is
// stored there.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	if log == nil {
		return fmt.Errorf("%w: nil *raft.Log", ErrInvalidLog)
	}
	var kb [logKeyLen]byte
	v, err := s.logs.Get(logKey(kb[:0], index))
	if errors.Is(err, segstore.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	var l raft.Log
	if err := decodeEntry(v, &l); err != nil {
		return fmt.Errorf("raftstore: log %d: %w", index, err)
	}
	if l.Index != index {
		return fmt.Errorf("raftstore: log %d: %w: it holds index %d", index, ErrCorruptEntry, l.Index)
	}
	*log = l
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores the entries as one atomic batch: after a crash either all
// of them are there or none. Under the durable default it returns once they
// are durable, having shared one fdatasync with concurrent writers. An entry
// at an index already stored replaces it.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := s.logs.NewBatch()
	var key [logKeyLen]byte
	var val []byte
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for i, l := range logs {
		if l == nil {
			return fmt.Errorf("%w: entry %d of the batch is nil", ErrInvalidLog, i)
		}
		if l.Index == 0 {
			// raft's indexes start at 1, and 0 is the bounds' "empty".
			return fmt.Errorf("%w: entry %d of the batch has index 0", ErrInvalidLog, i)
		}
		if t := l.AppendedAt; !t.IsZero() && (t.Before(minAppendedAt) || t.After(maxAppendedAt)) {
			return fmt.Errorf("%w: entry %d: AppendedAt %v outside the codec's range", ErrInvalidLog, l.Index, t)
		}
		val = appendEntry(val[:0], l)
		if err := b.Put(logKey(key[:0], l.Index), val); err != nil {
			return fmt.Errorf("raftstore: store log %d: %w", l.Index, err)
		}
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.logs.Apply(b); err != nil {
		return fmt.Errorf("raftstore: store logs %d..%d: %w", lo, hi, err)
	}
	if s.first == 0 || lo < s.first {
		s.first = lo
	}
	s.last = max(s.last, hi)
	return nil
}

// DeleteRange deletes the entries min through max, inclusive, with one range
// tombstone. When it deletes the head of the log, the tombstone starts at
// index 0, so that each head truncation covers the ones before it; a sealed
// segment whose whole contents it covers is then dead, and segkv drops its
// file (see segstore.Store.DeleteRange).
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == 0 || max < s.first || min > s.last {
		return nil // nothing stored in the range
	}
	start := logKey(nil, min)
	if min <= s.first {
		start = logKey(nil, 0)
	}
	end := []byte{logKeyPrefix + 1}
	if max < math.MaxUint64 {
		end = logKey(nil, max+1)
	}
	if err := s.logs.DeleteRange(start, end); err != nil {
		return fmt.Errorf("raftstore: delete logs %d..%d: %w", min, max, err)
	}
	first, last := s.first, s.last
	var err error
	switch {
	case min <= first && max >= last:
		first, last = 0, 0
	case min <= first:
		first, err = s.seekIndex(max+1, true)
	case max >= last:
		last, err = s.seekIndex(min, false)
	}
	if err != nil {
		// The deletion is durable but the new bound is unknown: read both
		// again rather than keep a bound that names a deleted entry.
		if first, last, err = s.bounds(); err != nil {
			return err
		}
	}
	s.first, s.last = first, last
	return nil
}

// stableKey returns the stable store's key for a raft key. The empty key is
// valid.
func stableKey(k []byte) []byte {
	return append([]byte{stableKeyPrefix}, k...)
}

// Set stores val under key (durably, under the durable default).
func (s *Store) Set(key, val []byte) error {
	if err := s.stable.Put(stableKey(key), val); err != nil {
		return fmt.Errorf("raftstore: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value of key, or ErrKeyNotFound (whose text raft
// compares) if it was never set. A key set to an empty value returns an
// empty, non-nil slice.
func (s *Store) Get(key []byte) ([]byte, error) {
	v, err := s.stable.Get(stableKey(key))
	if errors.Is(err, segstore.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: get %q: %w", key, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// SetUint64 stores val under key, as 8 bytes big-endian.
func (s *Store) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], val)
	return s.Set(key, b[:])
}

// GetUint64 returns the value SetUint64 stored under key, or 0 and
// ErrKeyNotFound if it was never set.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: get %q: %w: a uint64 value of %d bytes", key, ErrCorruptEntry, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
