package segstore

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/segkv/segkv/segment"
)

// Snapshot is a consistent, read-only view of the store at one point in
// time: Get and iterators on it see exactly the writes published before it
// was taken, whatever seals, merges and writes happen afterwards.
//
// What an open snapshot costs: it pins every data file it can see, so files
// that a merge retires stay on disk until it is closed; and while any
// snapshot or iterator is open, overwrites in the live file keep the previous
// version of the key in memory (one small record per overwrite), and a live
// file sealed meanwhile keeps its key directory in memory. Close snapshots
// promptly; Close is idempotent.
type Snapshot struct {
	s      *Store
	seq    uint64
	tails  []*tail   // the live file and the one being sealed, newest first
	segs   []*sealed // newest first
	closed atomic.Bool
	// readMu is held shared by every value read through the snapshot and
	// exclusively by Close, so a read finishes before the pins it relies
	// on are dropped: a sealed file's mapping goes with its last pin, and
	// a read still copying from it would fault.
	readMu sync.RWMutex
}

// NewSnapshot returns a snapshot of the store's current state. Close it.
func (s *Store) NewSnapshot() (*Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	// Under mu: Close releases the store's pins only under the exclusive
	// lock, after setting closed.
	if s.closed.Load() {
		return nil, ErrClosed
	}
	sn := &Snapshot{s: s, segs: slices.Clone(s.mu.segs)}
	for _, t := range [2]*tail{s.mu.tail, s.mu.frozen} {
		if t != nil {
			t.df.pin()
			sn.tails = append(sn.tails, t)
		}
	}
	for _, sg := range sn.segs {
		sg.df.pin()
	}
	// Under the live file's lock no group is being published, so the count
	// and the sequence agree: every later publication keeps the versions this
	// snapshot may need.
	s.mu.tail.mu.RLock()
	s.snapshots.Add(1)
	sn.seq = s.writeSeq.Load()
	s.mu.tail.mu.RUnlock()
	return sn, nil
}

// Close releases the snapshot. Later Gets return ErrClosed.
func (sn *Snapshot) Close() error {
	sn.readMu.Lock()
	defer sn.readMu.Unlock()
	if !sn.closed.CompareAndSwap(false, true) {
		return nil
	}
	for _, t := range sn.tails {
		t.df.unpin()
	}
	for _, sg := range sn.segs {
		sg.df.unpin()
	}
	sn.s.snapshots.Add(-1)
	return nil
}

// Get returns the value key had when the snapshot was taken.
func (sn *Snapshot) Get(key []byte) ([]byte, error) {
	if len(key) > sn.s.opts.MaxKeySize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), sn.s.opts.MaxKeySize)
	}
	sn.readMu.RLock()
	defer sn.readMu.RUnlock()
	if sn.closed.Load() || sn.s.closed.Load() {
		return nil, ErrClosed
	}
	for _, t := range sn.tails {
		t.mu.RLock()
		l, ok := t.keys[string(key)]
		t.mu.RUnlock()
		if !ok {
			continue
		}
		if l, ok = l.visibleAt(sn.seq); !ok {
			continue
		}
		if l.kind == segment.KindDelete {
			return nil, ErrNotFound
		}
		return sn.s.readValue(t.df, l.off, l.length, l.kind, key)
	}
	return sn.s.getSealed(sn.segs, key)
}
