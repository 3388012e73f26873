package segstore

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/segkv/segkv/segment"
)

// IterOptions bounds an iterator. Nil bounds are open.
type IterOptions struct {
	LowerBound []byte // inclusive
	UpperBound []byte // exclusive
	Prefix     []byte // only keys with this prefix (intersected with the bounds)
}

// Iterator walks keys in byte order, forward or backward, over a consistent
// view (a Snapshot), merging the live file's key directory with the sorted
// indexes of the sealed segments; the newest version of each key wins and
// deleted keys are skipped. It is not safe for concurrent use. Close it.
type Iterator struct {
	// iterState is what the open iterator reads and moves. Close returns it
	// to a pool and sets this to nil: nothing a closed iterator answers
	// (Valid, Key, Err, a second Close, ErrClosed from the rest) reads it.
	*iterState
	valid  bool
	key    []byte // the current key: keyBuf, or nil
	keyBuf []byte // reused for every key (never nil), so a step does not allocate
	err    error
	closed bool // Close was called
	// keySpace is keyBuf's first array: a key the caller still holds after
	// Close stays as it was (it is the iterator's, not the pool's).
	keySpace [64]byte
}

// iterState is an open iterator's sources and buffers. NewIterator takes one
// from iterStates and Close puts it back, cleared, so that making an
// iterator allocates little whatever the number of segments.
type iterState struct {
	sn     *Snapshot
	ownsSn bool
	// ownSn is the snapshot Store.NewIterator takes for the iterator (sn
	// points at it then), reused with the state.
	ownSn  Snapshot
	lower  []byte
	upper  []byte
	m      mergingIter // the snapshot's live directories and segments
	cur    iterEntry
	recBuf []byte // reused by AppendValue to read a record into
	// blocks holds the block last read from each block file, so that a
	// scan decodes a block once for all its keys.
	blocks blockCache
	// liveCursor is the live file's cursor (a second live file, one being
	// sealed, gets one of its own).
	liveCursor liveCursor
}

var iterStates = sync.Pool{New: func() any { return new(iterState) }}

// release clears st, so that the pool holds no file, index or key
// directory alive, and puts it back.
func (st *iterState) release() {
	st.m.reset(maxPooledSources)
	st.sn, st.ownsSn, st.lower, st.upper = nil, false, nil, nil
	st.ownSn.reset()
	st.cur = iterEntry{}
	st.recBuf = st.recBuf[:0]
	st.blocks.reset()
	st.liveCursor = liveCursor{}
	iterStates.Put(st)
}

// maxPooledSources bounds the sources array a pooled state keeps.
const maxPooledSources = 64

// NewIterator returns an iterator over a snapshot of the store taken now.
func (s *Store) NewIterator(opts *IterOptions) (*Iterator, error) {
	st := iterStates.Get().(*iterState)
	if err := s.snapshotInto(&st.ownSn); err != nil {
		iterStates.Put(st) // untouched
		return nil, err
	}
	st.sn, st.ownsSn = &st.ownSn, true
	return newIterator(st, opts), nil
}

// NewIterator returns an iterator over the snapshot.
func (sn *Snapshot) NewIterator(opts *IterOptions) (*Iterator, error) {
	if sn.closed.Load() || sn.s.closed.Load() {
		return nil, ErrClosed
	}
	st := iterStates.Get().(*iterState)
	st.sn = sn
	return newIterator(st, opts), nil
}

// newIterator returns an iterator reading st, whose sn is set.
func newIterator(st *iterState, opts *IterOptions) *Iterator {
	it := &Iterator{iterState: st}
	it.keyBuf = it.keySpace[:0]
	st.init(opts)
	return it
}

// init sets up the state's sources over its snapshot.
func (st *iterState) init(opts *IterOptions) {
	sn := st.sn
	if opts != nil {
		st.lower, st.upper = opts.LowerBound, opts.UpperBound
		if opts.Prefix != nil {
			if st.lower == nil || bytes.Compare(opts.Prefix, st.lower) > 0 {
				st.lower = opts.Prefix
			}
			if succ := prefixSuccessor(opts.Prefix); succ != nil && (st.upper == nil || bytes.Compare(succ, st.upper) < 0) {
				st.upper = succ
			}
		}
	}
	// The sources are the snapshot's frozen directories and indexes as they
	// are: creating an iterator copies and sorts nothing. A source with no
	// keys and no range tombstones (an empty live file) can change no
	// answer and is left out. Each source is set up in place, in a zero
	// slot of one array (sized for every segment: one with no keys is
	// rare).
	n := len(sn.segs)
	for _, v := range sn.tails {
		if v.keys.len() > 0 || v.ranges.Len() > 0 {
			n++
		}
	}
	if cap(st.m.srcs) < n {
		st.m.srcs = make([]iterSource, 0, n)
	}
	for _, v := range sn.tails {
		if v.keys.len() == 0 && v.ranges.Len() == 0 {
			continue
		}
		src := st.m.addSource()
		src.df, src.ranges = v.t.df, v.ranges
		lc := &st.liveCursor
		if src.prio > 0 {
			lc = new(liveCursor) // a second live file: one being sealed
		}
		lc.init(v.keys)
		src.cur = lc
	}
	for _, sg := range sn.segs {
		ix := sg.index()
		if ix.Len() == 0 && ix.Ranges().Len() == 0 {
			continue
		}
		st.m.addSegment(sg.df, ix)
	}
	st.m.ready()
}

// First positions the iterator at the first key within the bounds.
func (it *Iterator) First() bool {
	if !it.usable() {
		return false
	}
	if it.lower != nil {
		return it.Seek(it.lower)
	}
	return it.Seek(nil)
}

// Last positions the iterator at the last key within the bounds.
func (it *Iterator) Last() bool {
	if !it.usable() {
		return false
	}
	return it.seekBefore(it.upper)
}

// Seek positions the iterator at the first key >= key within the bounds.
func (it *Iterator) Seek(key []byte) bool {
	if !it.usable() || it.err != nil {
		it.valid = false
		return false
	}
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	if err := it.m.seekGE(key); err != nil {
		return it.fail(err)
	}
	return it.step()
}

// SeekLT positions the iterator at the last key < key within the bounds.
// A nil key means no limit other than the upper bound: SeekLT(nil) is Last.
func (it *Iterator) SeekLT(key []byte) bool {
	if !it.usable() {
		return false
	}
	if key == nil || (it.upper != nil && bytes.Compare(key, it.upper) > 0) {
		key = it.upper
	}
	return it.seekBefore(key)
}

// seekBefore starts a backward walk at the last key < key (nil: no limit).
func (it *Iterator) seekBefore(key []byte) bool {
	if !it.usable() || it.err != nil {
		it.valid = false
		return false
	}
	if err := it.m.seekLT(key); err != nil {
		return it.fail(err)
	}
	return it.step()
}

// Next moves to the next key. It returns false at the end.
func (it *Iterator) Next() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if it.m.reverse() {
		// Turn around: the sources point below the current key, so start
		// again just past it (the smallest key greater than it).
		return it.Seek(append(bytes.Clone(it.key), 0))
	}
	return it.step()
}

// Prev moves to the previous key. It returns false at the start.
func (it *Iterator) Prev() bool {
	if !it.usable() || !it.valid {
		return false
	}
	if !it.m.reverse() {
		return it.seekBefore(it.key)
	}
	return it.step()
}

// step takes the next key in the walk's direction that is within the
// bounds and not deleted; the newest version of each key decides.
func (it *Iterator) step() bool {
	m := &it.m
	for m.more() {
		if m.reverse() {
			if it.lower != nil && bytes.Compare(m.peek(), it.lower) < 0 {
				break
			}
		} else if it.upper != nil && bytes.Compare(m.peek(), it.upper) >= 0 {
			break
		}
		key, best, _, covered, err := m.take(it.keyBuf[:0])
		it.keyBuf = key
		if err != nil {
			return it.fail(err)
		}
		if best.kind == segment.KindDelete || covered {
			continue
		}
		it.key, it.cur, it.valid = it.keyBuf, best, true
		return true
	}
	it.valid = false
	return false
}

// fail stops the iterator at an index it could not read: Err reports err
// and no key is served past it.
func (it *Iterator) fail(err error) bool {
	it.err, it.valid = fmt.Errorf("segkv: iterator: %w", err), false
	return false
}

// Valid reports whether the iterator is at a key.
func (it *Iterator) Valid() bool { return it.valid }

// Key returns the current key. It stays valid until the next move, which
// reuses its buffer; the caller must not modify it.
func (it *Iterator) Key() []byte { return it.key }

// Value reads the current key's value: a copy the caller owns.
func (it *Iterator) Value() ([]byte, error) {
	// A buffer of the value's own, returned as it is: one allocation.
	v, _, err := it.readCurrent(nil)
	if err != nil {
		return nil, err
	}
	// The capacity is cut so that an append by the caller cannot scribble
	// over the checksum behind the value.
	return v[:len(v):len(v)], nil
}

// maxIterRecBuf bounds the record buffer an iterator keeps between reads, so
// that one large value does not stay allocated for the iterator's life.
const maxIterRecBuf = 64 << 10

// AppendValue reads the current key's value and appends it to dst, like
// Value but without allocating when dst has room: a scan that reuses one
// buffer for its values reads them with no allocation per key.
func (it *Iterator) AppendValue(dst []byte) ([]byte, error) {
	if !it.usable() {
		return dst, ErrClosed
	}
	v, buf, err := it.readCurrent(it.recBuf)
	if cap(buf) <= maxIterRecBuf {
		it.recBuf = buf
	}
	if err != nil {
		return dst, err
	}
	return append(dst, v...), nil
}

// readCurrent reads and verifies the current key's record into buf (grown
// if needed) under the snapshot's read lock, and returns its value, which
// aliases the returned buffer; it records a failure in Err.
func (it *Iterator) readCurrent(buf []byte) (value, _ []byte, err error) {
	if !it.usable() {
		return nil, buf, ErrClosed
	}
	if !it.valid {
		return nil, buf, ErrNotFound
	}
	it.sn.readMu.RLock()
	defer it.sn.readMu.RUnlock()
	if it.sn.closed.Load() || it.sn.s.closed.Load() {
		it.err = ErrClosed
		return nil, buf, ErrClosed
	}
	if it.cur.raw != nil {
		value, buf, err = rawValue(it.cur, buf, it.key)
	} else {
		value, buf, err = it.sn.s.readRecordCached(it.cur.df, &it.blocks, buf, it.cur.off, it.cur.length, it.cur.kind, it.key)
	}
	if err != nil {
		it.err = err
	}
	return value, buf, err
}

// usable reports whether the iterator may move: not once it, its snapshot
// or the store was closed (it then records ErrClosed). A value that failed to
// read does not stop Next and Prev: the keys after it are still answered.
func (it *Iterator) usable() bool {
	if it.closed || it.sn.closed.Load() || it.sn.s.closed.Load() {
		it.err, it.valid = ErrClosed, false
		return false
	}
	return true
}

// Err returns the first error the iterator met: ErrClosed once the store
// or the snapshot it reads was closed, or damage or a read error where it
// walks keys. A value that fails to read (Value's error, recorded here
// too) does not stop Next, or Prev in a backward walk, from going on to
// the keys after it; a seek (First, Last, Seek, SeekLT) or a turn of
// direction, like every move after any other error, then returns false. A
// damaged block of a merged segment ends the walk where it lies, since its
// keys are in it: the error is here, and no key is skipped silently.
func (it *Iterator) Err() error { return it.err }

// Close releases the iterator (and its snapshot, if it made one). A second
// Close does nothing and returns ErrClosed, as for Store and Snapshot. An
// Iterator, unlike them, is not safe for concurrent use.
func (it *Iterator) Close() error {
	if it.closed {
		return ErrClosed
	}
	it.closed = true
	it.valid = false
	st := it.iterState
	it.iterState = nil
	var err error
	if st.ownsSn {
		err = st.sn.Close()
	}
	st.release()
	return err
}

// prefixSuccessor returns the smallest key greater than every key with the
// prefix, or nil if there is none (the prefix is all 0xff).
func prefixSuccessor(p []byte) []byte {
	s := bytes.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}
