package segstore

import (
	"bytes"
	"fmt"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
)

// This file owns the k-way merge of sorted sources that both reads and
// merges walk: an Iterator merges the live directories and the segments of
// its snapshot, a merge step the segments of its run. One cursor, one heap
// and one rule for which version of a key wins and what a range tombstone
// deletes, so that what a merge writes is by construction what a read of
// the same segments answers.

// mergingIter merges its sources (newest first) into one walk, forward or
// backward, of their distinct keys. For each key it reports the newest
// source's entry and whether a range tombstone of a newer source deletes
// it; whether a point tombstone hides the key, or is kept, is the caller's
// rule (a read skips it, a merge writes it unless nothing older needs it).
type mergingIter struct {
	srcs []iterSource // newest first: srcs[i].prio == i
	h    iterHeap
	// rangesUpTo is one past the oldest source with range tombstones: only
	// sources below it can delete an older source's key.
	rangesUpTo int
	// heapSpace is the heap's array when the sources fit in it.
	heapSpace [8]*iterSource
	// spareBlocks are the block buffers of the block cursors of the
	// sources reset last, for the next block cursors to reuse.
	spareBlocks [][2]decodedBlock
}

// addSource appends a source and returns it, zero but for its prio, for
// the caller to set up; srcs must have the capacity (sized by the caller for
// every source, so that the pointers the heap keeps stay valid).
func (m *mergingIter) addSource() *iterSource {
	n := len(m.srcs)
	m.srcs = m.srcs[:n+1]
	src := &m.srcs[n]
	src.prio = n
	return src
}

// addSegment adds a sealed segment's index as the next (older) source.
func (m *mergingIter) addSegment(df *dataFile, ix *index.Index) {
	src := m.addSource()
	src.df, src.ranges = df, ix.Ranges()
	if ix.BlockFile() {
		var bufs [2]decodedBlock
		if n := len(m.spareBlocks); n > 0 {
			bufs = m.spareBlocks[n-1]
			m.spareBlocks[n-1] = [2]decodedBlock{}
			m.spareBlocks = m.spareBlocks[:n-1]
		}
		src.blkCur.init(df, ix, bufs)
		src.cur, src.blocks = &src.blkCur, true
		return
	}
	src.ixCur.r, src.ixCur.n = ix.NewReader(), ix.Len()
	src.cur = &src.ixCur
}

// ready finishes the setup once every source is added.
func (m *mergingIter) ready() {
	m.rangesUpTo = 0
	for i := range m.srcs {
		if m.srcs[i].ranges.Len() > 0 {
			m.rangesUpTo = i + 1
		}
	}
	if len(m.srcs) <= len(m.heapSpace) {
		m.h.srcs = m.heapSpace[:0]
	} else {
		m.h.srcs = make([]*iterSource, 0, len(m.srcs))
	}
}

// reset clears m for reuse, keeping the sources' array unless it is large.
func (m *mergingIter) reset(maxSources int) {
	for i := range m.srcs {
		if src := &m.srcs[i]; src.blocks && len(m.spareBlocks) < maxSources {
			m.spareBlocks = append(m.spareBlocks, src.blkCur.release())
		}
	}
	clear(m.srcs) // the slots past len are zero already
	m.srcs = m.srcs[:0]
	if cap(m.srcs) > maxSources {
		m.srcs = nil
	}
	clear(m.heapSpace[:])
	m.h = iterHeap{}
	m.rangesUpTo = 0
}

// seekGE positions every source at its first key >= key (nil: its first
// key) and walks forward.
func (m *mergingIter) seekGE(key []byte) error {
	return m.seek(false, func(c cursor) bool { return c.seekGE(key) })
}

// seekLT positions every source at its last key < key (nil: its last key)
// and walks backward.
func (m *mergingIter) seekLT(key []byte) error {
	return m.seek(true, func(c cursor) bool { return c.seekLT(key) })
}

func (m *mergingIter) seek(reverse bool, move func(cursor) bool) error {
	m.h = iterHeap{srcs: m.h.srcs[:0], reverse: reverse}
	for i := range m.srcs {
		src := &m.srcs[i]
		if src.move(move(src.cur)) {
			m.h.srcs = append(m.h.srcs, src)
		} else if err := src.cur.err(); err != nil {
			return src.wrap(err)
		}
	}
	m.h.init()
	return nil
}

// reverse reports whether the walk goes backward.
func (m *mergingIter) reverse() bool { return m.h.reverse }

// more reports whether a key is left in the walk's direction.
func (m *mergingIter) more() bool { return len(m.h.srcs) > 0 }

// peek returns the next key without taking it; valid until the next move,
// never to be written to. Only when more.
func (m *mergingIter) peek() []byte { return m.h.srcs[0].k }

// take takes the next key (only when more): it appends the key to buf and
// returns it, the newest source's entry for it and that source's prio, and
// whether a newer source's range tombstone covers it, and moves every
// source at that key past it. The sources' keys are slices of an index or
// of a live directory, which nobody may write to, hence the copy into a
// buffer of the caller's.
func (m *mergingIter) take(buf []byte) (key []byte, best iterEntry, prio int, covered bool, err error) {
	h := &m.h
	top := h.srcs[0]
	best, prio = top.entry(), top.prio
	key = append(buf, top.k...)
	covered = m.rangeCovered(key, prio)
	// Step every source past this key; the first is the one with the best
	// prio, and the others with the same key follow it in the heap.
	for {
		src := h.srcs[0]
		var ok bool
		if h.reverse {
			ok = src.move(src.cur.prev())
		} else {
			ok = src.move(src.cur.next())
		}
		if ok {
			h.down(0)
		} else if err := src.cur.err(); err != nil {
			return key, best, prio, covered, src.wrap(err)
		} else {
			h.popTop()
		}
		if len(h.srcs) == 0 || !bytes.Equal(h.srcs[0].k, key) {
			return key, best, prio, covered, nil
		}
	}
}

// rangeCovered reports whether a range tombstone of a source newer than
// prio deletes key. (A source's own range tombstones never delete its own
// keys: those are newer, or were removed when the tombstone was applied.)
func (m *mergingIter) rangeCovered(key []byte, prio int) bool {
	for i := range min(prio, m.rangesUpTo) {
		if m.srcs[i].ranges.Covers(key) {
			return true
		}
	}
	return false
}

// iterEntry is where the newest version of a key is: a record of a data
// file, or in a block file the block holding it. raw is, from a block
// cursor, the record's encoding (unverified), valid until the mergingIter
// moves again.
type iterEntry struct {
	df     *dataFile
	off    int64
	length uint32
	kind   segment.RecordKind
	raw    []byte
}

// cursor walks one sorted input: a frozen live file directory or a sealed
// segment's index. Each move reports whether the cursor is at a key.
type cursor interface {
	seekGE(key []byte) bool // first key >= key; nil: the first key
	seekLT(key []byte) bool // last key < key; nil: the last key
	next() bool
	prev() bool
	key() []byte // valid until the next move; never written to
	entry() (off int64, length uint32, kind segment.RecordKind)
	err() error // why the last move found no key, if not the end
}

// iterSource is one input of a mergingIter. k caches the cursor's current key,
// which the heap compares many times per step.
type iterSource struct {
	prio   int // 0 is the newest source, its index in mergingIter.srcs
	df     *dataFile
	cur    cursor
	k      []byte
	ranges spanSet     // the source's range tombstones
	ixCur  indexCursor // a sealed segment's cursor (cur points at it)
	blkCur blockCursor // a sealed block file's cursor (cur points at it)
	blocks bool        // cur is blkCur
}

// move records the outcome of a cursor move.
func (src *iterSource) move(ok bool) bool {
	if ok {
		src.k = src.cur.key()
	}
	return ok
}

func (src *iterSource) entry() iterEntry {
	off, length, kind := src.cur.entry()
	e := iterEntry{df: src.df, off: off, length: length, kind: kind}
	if src.blocks {
		e.raw = src.blkCur.raw()
	}
	return e
}

// wrap names the source's data file in an error its cursor met.
func (src *iterSource) wrap(err error) error {
	return fmt.Errorf("reading the keys of %s: %w", src.df.path, err)
}

// spanSet is a source's range tombstones: a sealed segment's
// (*rangedel.Set) or a frozen live file's (*rangedel.Tree).
type spanSet interface {
	Covers(key []byte) bool
	Len() int
}

// indexCursor walks a sealed segment's index. It reads the entry at each
// position it moves to, so that a damaged index block (one the index could
// not heal) stops the cursor with an error instead of a wrong key; its
// index.Reader keeps the block of the last read, so that a step within a
// block does not locate the block again.
type indexCursor struct {
	r   index.Reader
	n   int // the index's length
	pos int
	cur index.Entry
	e   error
}

// load reads the entry at pos, if pos is a position of the index.
func (c *indexCursor) load() bool {
	if c.e != nil || c.pos < 0 || c.pos >= c.n {
		return false
	}
	c.cur, c.e = c.r.At(c.pos)
	return c.e == nil
}

func (c *indexCursor) seekGE(key []byte) bool {
	c.pos = 0
	if key != nil {
		c.pos, c.e = c.r.Index().Search(key)
	}
	return c.load()
}

func (c *indexCursor) seekLT(key []byte) bool {
	c.pos = c.n
	if key != nil {
		c.pos, c.e = c.r.Index().Search(key)
	}
	c.pos--
	return c.load()
}

func (c *indexCursor) next() bool {
	if c.pos < c.n {
		c.pos++
	}
	return c.load()
}

func (c *indexCursor) prev() bool {
	if c.pos >= 0 {
		c.pos--
	}
	return c.load()
}

func (c *indexCursor) key() []byte { return c.cur.Key }

func (c *indexCursor) entry() (int64, uint32, segment.RecordKind) {
	return c.cur.Offset, c.cur.Length, c.cur.Kind
}

func (c *indexCursor) err() error { return c.e }

// iterHeap orders the sources by their current key, smallest first going
// forward and largest first going backward; among equal keys the newest
// source (lowest prio) comes first either way, so its version wins. It is a
// binary heap written out for *iterSource: container/heap's interface calls
// cost more than the comparisons on the few sources a store has.
type iterHeap struct {
	srcs    []*iterSource
	reverse bool
}

func (h *iterHeap) less(a, b *iterSource) bool {
	c := bytes.Compare(a.k, b.k)
	if c != 0 {
		return (c < 0) != h.reverse
	}
	return a.prio < b.prio
}

func (h *iterHeap) init() {
	for i := len(h.srcs)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down restores the order below i after the source at i moved on.
func (h *iterHeap) down(i int) {
	s := h.srcs
	x := s[i]
	for {
		c := 2*i + 1
		if c >= len(s) {
			break
		}
		if r := c + 1; r < len(s) && h.less(s[r], s[c]) {
			c = r
		}
		if !h.less(s[c], x) {
			break
		}
		s[i] = s[c]
		i = c
	}
	s[i] = x
}

// popTop removes the top source (it is exhausted).
func (h *iterHeap) popTop() {
	last := len(h.srcs) - 1
	h.srcs[0] = h.srcs[last]
	h.srcs[last] = nil
	h.srcs = h.srcs[:last]
	if last > 0 {
		h.down(0)
	}
}
