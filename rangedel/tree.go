package rangedel

import (
	"bytes"

	"github.com/tidwall/btree"
)

// Tree is a growing set of spans (their union) for a file still being
// written: disjoint spans in a copy-on-write B-tree, so that adding a span
// costs O(log n) plus the spans it absorbs, whatever the number already
// held, and Copy costs O(1). A Tree is not safe for concurrent use, except
// that a copy, which is never written, may be read while the original
// changes; Copy itself writes the original (its copy-on-write identity), so
// it needs the writer's exclusion.
type Tree struct {
	tr *btree.BTreeG[Span]
}

func spanLess(a, b Span) bool { return bytes.Compare(a.Start, b.Start) < 0 }

// NewTree returns an empty tree.
func NewTree() *Tree {
	return &Tree{tr: btree.NewBTreeGOptions(spanLess, btree.Options{NoLocks: true})}
}

// Add adds sp (copying its bytes), merging it with the spans it overlaps
// or touches. An empty span is ignored.
func (t *Tree) Add(sp Span) {
	if sp.Empty() {
		return
	}
	start, end := sp.Start, sp.End
	// A span starting before start that reaches it absorbs the start.
	if prev, ok := t.floor(start); ok && bytes.Compare(prev.End, start) >= 0 {
		start = prev.Start
		if bytes.Compare(prev.End, end) > 0 {
			end = prev.End
		}
	}
	// Every span starting in [start, end] is absorbed.
	var absorbed []Span
	t.tr.Ascend(Span{Start: start}, func(s Span) bool {
		if bytes.Compare(s.Start, end) > 0 {
			return false
		}
		absorbed = append(absorbed, s)
		return true
	})
	for _, s := range absorbed {
		if bytes.Compare(s.End, end) > 0 {
			end = s.End
		}
		t.tr.Delete(s)
	}
	start = bytes.Clone(start)
	if start == nil {
		start = []byte{}
	}
	t.tr.Set(Span{Start: start, End: bytes.Clone(end)})
}

// floor returns the span with the largest start <= key.
func (t *Tree) floor(key []byte) (Span, bool) {
	var out Span
	found := false
	t.tr.Descend(Span{Start: key}, func(s Span) bool {
		out, found = s, true
		return false
	})
	return out, found
}

// Covers reports whether a span of the tree covers key.
func (t *Tree) Covers(key []byte) bool {
	if t.tr.Len() == 0 {
		return false
	}
	s, ok := t.floor(key)
	return ok && bytes.Compare(key, s.End) < 0
}

// Len returns the number of disjoint spans.
func (t *Tree) Len() int { return t.tr.Len() }

// Copy returns a frozen copy in O(1) (see Tree for the locking it needs).
func (t *Tree) Copy() *Tree { return &Tree{tr: t.tr.Copy()} }

// Set returns the tree's spans as an immutable Set. The spans' bytes are
// shared: neither side ever modifies them.
func (t *Tree) Set() *Set {
	if t.tr.Len() == 0 {
		return nil
	}
	return &Set{spans: t.tr.Items()}
}
