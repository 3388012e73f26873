package segstore

import (
	"unsafe"

	"github.com/tidwall/btree"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
)

// liveEntry locates the newest record of one key in a live file. word is
// the key's first 8 bytes, zero-padded, as a big-endian integer: ordered
// like the keys (ties only when those bytes are equal), and stored inline,
// so that most comparisons on a search path compare two integers in the
// node instead of following two pointers to the key bytes. Inserts of
// random keys into a 1M-key directory spent most of their time on those
// cache misses.
type liveEntry struct {
	word   uint64
	key    string
	off    int64
	length uint32
	kind   segment.RecordKind
}

func liveLess(a, b liveEntry) bool {
	if a.word != b.word {
		return a.word < b.word
	}
	return a.key < b.key
}

// keyWord returns the search word of key (see liveEntry).
func keyWord[K string | []byte](key K) uint64 {
	var w uint64
	n := min(len(key), 8)
	for i := 0; i < n; i++ {
		w |= uint64(key[i]) << (56 - 8*i)
	}
	return w
}

// probe is the entry a search for key compares against; it borrows key.
func probe(key []byte) liveEntry {
	return liveEntry{word: keyWord(key), key: borrowString(key)}
}

func newLiveEntry(key []byte, off int64, length int, kind segment.RecordKind) liveEntry {
	return liveEntry{word: keyWord(key), key: string(key), off: off, length: uint32(length), kind: kind}
}

// liveDegree is the B-tree's degree: nodes of up to 2*liveDegree-1 entries.
// The library's default (32) measured best for point gets and seeks on 16-
// and 32-byte keys; a copy-on-write after a snapshot copies one node per
// level, so larger nodes would make the first write after each snapshot dearer.
const liveDegree = 32

// liveIndex is a live file's key directory: the newest record of each key,
// in key order. It is a B-tree (github.com/tidwall/btree) with copy-on-write
// nodes, chosen over a hash map so that iterators need no sort and over a
// hand-written skiplist because the library's O(1) Copy gives snapshots a
// frozen view for free: the copy and the original share every node until
// one of them writes, and a write copies only the nodes on its path.
//
// Concurrency: the tree itself has no lock (NoLocks). The owner (a tail)
// guards the tree it writes with tail.mu: publishes take it exclusively,
// lookups shared. copy, although O(1), writes the original's identity and
// so needs the exclusive lock too. A copy is never written: any number of
// goroutines may read it without a lock while the original keeps changing.
type liveIndex struct {
	tr *btree.BTreeG[liveEntry]
}

func newLiveIndex() liveIndex {
	return liveIndex{tr: btree.NewBTreeGOptions(liveLess, btree.Options{NoLocks: true, Degree: liveDegree})}
}

// set records e as the newest record of its key.
func (x liveIndex) set(e liveEntry) { x.tr.Set(e) }

// get returns the entry of key.
func (x liveIndex) get(key []byte) (liveEntry, bool) {
	return x.tr.Get(probe(key))
}

// deleteRange removes every key k with start <= k < end.
func (x liveIndex) deleteRange(start, end []byte) {
	x.tr.DeleteRange(probe(start), probe(end), &btree.DeleteRangeOptions{NoReturn: true})
}

// len returns the number of keys.
func (x liveIndex) len() int { return x.tr.Len() }

// copy returns a frozen view of the directory as it is now, in O(1). The
// caller holds the owner's lock exclusively.
func (x liveIndex) copy() liveIndex { return liveIndex{tr: x.tr.Copy()} }

// indexEntries returns the directory as sorted index entries, the keys in
// one arena: a seal's index, built by an in-order walk without a sort.
func (x liveIndex) indexEntries() []index.Entry {
	entries := make([]index.Entry, 0, x.tr.Len())
	size := 0
	x.tr.Scan(func(e liveEntry) bool {
		size += len(e.key)
		return true
	})
	arena := make([]byte, 0, size)
	x.tr.Scan(func(e liveEntry) bool {
		start := len(arena)
		arena = append(arena, e.key...)
		entries = append(entries, index.Entry{
			Key:  arena[start:len(arena):len(arena)],
			Kind: e.kind, Offset: e.off, Length: e.length,
		})
		return true
	})
	return entries
}

// liveCursor walks a frozen liveIndex (a copy) in key order. It keeps a
// copy of the entry it is at: the iterator reads its key and location
// several times per step.
type liveCursor struct {
	it btree.IterG[liveEntry]
	ok bool
	e  liveEntry // the current entry, when ok
}

// init makes c, a zero liveCursor, a cursor over x.
func (c *liveCursor) init(x liveIndex) { c.it = x.tr.Iter() }

// at records the outcome of a move of the tree's iterator.
func (c *liveCursor) at(ok bool) bool {
	c.ok = ok
	if ok {
		c.e = c.it.Item()
	}
	return ok
}

// seekGE moves to the first key >= key (nil: the first key).
func (c *liveCursor) seekGE(key []byte) bool {
	if key == nil {
		return c.at(c.it.First())
	}
	return c.at(c.it.Seek(probe(key)))
}

// seekLT moves to the last key < key (nil: the last key).
func (c *liveCursor) seekLT(key []byte) bool {
	if key != nil && c.it.Seek(probe(key)) {
		return c.at(c.it.Prev())
	}
	return c.at(c.it.Last())
}

func (c *liveCursor) next() bool { return c.at(c.ok && c.it.Next()) }
func (c *liveCursor) prev() bool { return c.at(c.ok && c.it.Prev()) }

// key returns the current key. It aliases the tree's string, which is never
// modified: the caller must not write to it.
func (c *liveCursor) key() []byte {
	k := c.e.key
	if len(k) == 0 {
		// Never nil: the iterator passes its current key to seekLT, where
		// nil means "no limit", and the empty key is a key.
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(k), len(k))
}

// err is always nil: a live directory is memory that cannot fail a read.
func (c *liveCursor) err() error { return nil }

func (c *liveCursor) entry() (int64, uint32, segment.RecordKind) {
	return c.e.off, c.e.length, c.e.kind
}

// borrowString views b as a string without copying, for a lookup that does
// not keep it: the tree compares against it and forgets it.
func borrowString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
