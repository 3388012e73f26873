// Package rangedel represents range tombstones, the key intervals that
// DeleteRange removed, as an immutable set of sorted, disjoint spans that
// answers "does a tombstone cover this key?" with one binary search.
//
// A set is built once and never modified: adding a span returns a new set,
// so that a reader holding the old one (a snapshot, an iterator) keeps an
// unchanging view without a lock or a copy of its own.
package rangedel

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Span is the half-open key interval [Start, End). An empty Start is the
// smallest key.
type Span struct {
	Start, End []byte
}

// Empty reports whether the span covers no key.
func (sp Span) Empty() bool { return bytes.Compare(sp.Start, sp.End) >= 0 }

// Covers reports whether key lies in the span.
func (sp Span) Covers(key []byte) bool {
	return bytes.Compare(sp.Start, key) <= 0 && bytes.Compare(key, sp.End) < 0
}

// Set is the union of some spans, kept as sorted spans that neither overlap
// nor touch. The nil *Set is the empty set; every method accepts it.
type Set struct {
	spans []Span
}

// Union returns the set covering exactly the keys some span of spans covers.
// Empty spans are ignored. The result does not alias spans' key bytes.
func Union(spans ...Span) *Set {
	var keep []Span
	for _, sp := range spans {
		if !sp.Empty() {
			keep = append(keep, sp)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	slices.SortFunc(keep, func(a, b Span) int { return bytes.Compare(a.Start, b.Start) })
	out := make([]Span, 0, len(keep))
	cur := keep[0]
	for _, sp := range keep[1:] {
		if bytes.Compare(sp.Start, cur.End) <= 0 {
			// Overlapping or touching: one span.
			if bytes.Compare(sp.End, cur.End) > 0 {
				cur.End = sp.End
			}
			continue
		}
		out = append(out, cur)
		cur = sp
	}
	out = append(out, cur)
	for i := range out {
		out[i] = Span{Start: bytes.Clone(out[i].Start), End: bytes.Clone(out[i].End)}
		if out[i].Start == nil {
			out[i].Start = []byte{}
		}
	}
	return &Set{spans: out}
}

// With returns the union of s and sp; s is unchanged.
func (s *Set) With(sp Span) *Set {
	if sp.Empty() {
		return s
	}
	return Union(append(slices.Clone(s.Spans()), sp)...)
}

// Merge returns the union of the sets.
func Merge(sets ...*Set) *Set {
	var all []Span
	for _, s := range sets {
		all = append(all, s.Spans()...)
	}
	return Union(all...)
}

// Len returns the number of disjoint spans.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.spans)
}

// Spans returns the disjoint spans in key order. The caller must not modify
// them.
func (s *Set) Spans() []Span {
	if s == nil {
		return nil
	}
	return s.spans
}

// find returns the span that could cover key: the last one starting at or
// before it, or -1.
func (s *Set) find(key []byte) int {
	i := sort.Search(len(s.spans), func(i int) bool { return bytes.Compare(s.spans[i].Start, key) > 0 })
	return i - 1
}

// Covers reports whether a span of the set covers key.
func (s *Set) Covers(key []byte) bool {
	if s == nil || len(s.spans) == 0 {
		return false
	}
	i := s.find(key)
	return i >= 0 && bytes.Compare(key, s.spans[i].End) < 0
}

// CoversClosed reports whether one span of the set covers every key k with
// lo <= k <= hi.
func (s *Set) CoversClosed(lo, hi []byte) bool {
	if s == nil || len(s.spans) == 0 || bytes.Compare(lo, hi) > 0 {
		return false
	}
	i := s.find(lo)
	return i >= 0 && bytes.Compare(hi, s.spans[i].End) < 0
}

// Bounds returns the smallest start and the largest end of the set; ok is
// false for the empty set.
func (s *Set) Bounds() (start, end []byte, ok bool) {
	if s.Len() == 0 {
		return nil, nil, false
	}
	return s.spans[0].Start, s.spans[len(s.spans)-1].End, true
}

// ErrNotCanonical is returned by FromCanonical for spans that are not
// sorted, disjoint, non-touching and non-empty.
var ErrNotCanonical = errors.New("rangedel: spans are not sorted, disjoint and non-empty")

// FromCanonical returns the set of spans already in the form Spans returns
// (sorted, non-empty, neither overlapping nor touching), without copying:
// the set aliases the spans' bytes. A decoder uses it for spans it read.
func FromCanonical(spans []Span) (*Set, error) {
	for i, sp := range spans {
		if sp.Empty() {
			return nil, fmt.Errorf("%w: span %d [%q, %q) is empty", ErrNotCanonical, i, sp.Start, sp.End)
		}
		if i > 0 && bytes.Compare(spans[i-1].End, sp.Start) >= 0 {
			return nil, fmt.Errorf("%w: span %d starts at %q, before the previous one ends (%q)", ErrNotCanonical, i, sp.Start, spans[i-1].End)
		}
	}
	if len(spans) == 0 {
		return nil, nil
	}
	return &Set{spans: spans}, nil
}

// ContainsSpan reports whether one span of the set contains every key of sp.
func (s *Set) ContainsSpan(sp Span) bool {
	if s.Len() == 0 || sp.Empty() {
		return false
	}
	i := s.find(sp.Start)
	return i >= 0 && bytes.Compare(sp.End, s.spans[i].End) <= 0
}
