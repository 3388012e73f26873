package segstore

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
)

// Snapshot is a consistent, read-only view of the store at one point in
// time: Get and iterators on it see exactly the writes published before it
// was taken, whatever seals, merges and writes happen afterwards.
//
// What an open snapshot costs: it pins every data file it can see, so files
// that a merge retires stay on disk until it is closed; and it holds a frozen
// copy of the live file's key directory. Taking that copy is O(1) (the copy
// and the store's directory share their B-tree nodes), but the first write
// after it into each shared node copies that node, and the snapshot keeps
// the old nodes alive, so a snapshot held across many writes holds up to
// one directory's worth of memory, and a live file sealed meanwhile keeps
// its directory in memory. Close snapshots promptly. A second Close does
// nothing and returns ErrClosed, as for Store and Iterator.
type Snapshot struct {
	s     *Store
	tails []tailView // the live file and the one being sealed, newest first
	segs  []*sealed  // newest first
	// pinnedFrozen is the data file of a live file NewSealedSnapshot pinned
	// at its seal's switch, until the seal's segment joins segs (with the
	// same data file, and this pin).
	pinnedFrozen *dataFile
	// seq is the ManifestSeq of the state whose sealed segments segs is
	// (0: not known, see ManifestSeq).
	seq    uint64
	closed atomic.Bool
	// readMu is held shared by every value read through the snapshot and
	// exclusively by Close, so a read finishes before the pins it relies
	// on are dropped: a sealed file's mapping goes with its last pin, and
	// a read still copying from it would fault.
	readMu sync.RWMutex
	// tailSpace holds tails, allocated with the snapshot.
	tailSpace [2]tailView
}

// NewSnapshot returns a snapshot of the store's current state. Close it.
func (s *Store) NewSnapshot() (*Snapshot, error) {
	sn := new(Snapshot)
	if err := s.snapshotInto(sn); err != nil {
		return nil, err
	}
	return sn, nil
}

// snapshotInto makes sn, a zero or reset Snapshot, a snapshot of the store's current
// state.
func (s *Store) snapshotInto(sn *Snapshot) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	// Under mu: Close releases the store's pins only under the exclusive
	// lock, after setting closed.
	if s.closed.Load() {
		return ErrClosed
	}
	// The store's segment list is replaced whole, never written in place,
	// so the snapshot shares it (capped: an append copies).
	sn.s, sn.segs, sn.seq = s, s.mu.segs[:len(s.mu.segs):len(s.mu.segs)], s.mu.segsSeq
	sn.closed.Store(false) // a reused one was closed
	sn.tails = sn.tailSpace[:0]
	// Under mu no seal can switch live files, so the live file and the
	// frozen one are copied as one consistent pair: a group is published
	// into one of them whole, before or after its copy.
	for _, t := range [2]*tail{s.mu.tail, s.mu.frozen} {
		if t != nil {
			t.df.pin()
			sn.tails = append(sn.tails, t.view())
		}
	}
	for _, sg := range sn.segs {
		sg.df.pin()
	}
	s.snapshots.Add(1)
	return nil
}

// reset makes a closed snapshot zero again, but for its locks (unlocked)
// and closed (set again by snapshotInto), so that an iterator's state can
// reuse it without holding what it pinned.
func (sn *Snapshot) reset() {
	sn.s, sn.tails, sn.segs, sn.pinnedFrozen, sn.seq = nil, nil, nil, nil, 0
	clear(sn.tailSpace[:])
}

// tailView is a live file as a snapshot sees it: its data file and a
// frozen copy of its key directory, which no one writes and any goroutine
// may read without a lock.
type tailView struct {
	t      *tail
	keys   liveIndex
	ranges *rangedel.Tree // a frozen copy
}

// Close releases the snapshot. Later Gets return ErrClosed, and so does a
// second Close (which does nothing).
func (sn *Snapshot) Close() error {
	sn.readMu.Lock()
	defer sn.readMu.Unlock()
	if !sn.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	for _, v := range sn.tails {
		v.t.df.unpin()
	}
	for _, sg := range sn.segs {
		sg.df.unpin()
	}
	if sn.pinnedFrozen != nil {
		sn.pinnedFrozen.unpin()
	}
	sn.s.snapshots.Add(-1)
	return nil
}

// Get returns the value key had when the snapshot was taken.
func (sn *Snapshot) Get(key []byte) ([]byte, error) {
	v, err := sn.get(key)
	sn.s.countGet(err)
	return v, err
}

func (sn *Snapshot) get(key []byte) ([]byte, error) {
	if len(key) > sn.s.opts.MaxKeySize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLarge, len(key), sn.s.opts.MaxKeySize)
	}
	sn.readMu.RLock()
	defer sn.readMu.RUnlock()
	if sn.closed.Load() || sn.s.closed.Load() {
		return nil, ErrClosed
	}
	for _, v := range sn.tails {
		l, ok := v.keys.get(key)
		if !ok {
			if v.ranges.Covers(key) {
				return nil, ErrNotFound
			}
			continue
		}
		if l.kind == segment.KindDelete {
			return nil, ErrNotFound
		}
		return sn.s.readValue(v.t.df, l.off, l.length, l.kind, key)
	}
	return sn.s.getSealed(sn.segs, key)
}
