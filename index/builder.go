package index

import (
	"bytes"
	"container/heap"
	"slices"

	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
)

// Builder turns the records of one data file, fed in file order, into
// the file's index: the newest record of each key, minus the keys a later
// range tombstone of the same file deleted, plus the union of the file's
// range tombstones. Rebuilding an index, importing a segment and checking a
// store all use it, so the three agree with each other and with a seal.
type Builder struct {
	latest map[string]Entry
	tombs  []offsetSpan
}

// offsetSpan is a range tombstone and its offset in the file.
type offsetSpan struct {
	span rangedel.Span
	off  int64
}

// NewBuilder returns an empty builder.
func NewBuilder() *Builder {
	return &Builder{latest: map[string]Entry{}}
}

// Add records one record found at off, length bytes long. Link records are
// not part of the index; the caller skips them.
func (b *Builder) Add(r segment.Record, off int64, length int) {
	if r.Kind == segment.KindRangeDelete {
		b.tombs = append(b.tombs, offsetSpan{span: rangedel.Span{Start: bytes.Clone(r.Key), End: bytes.Clone(r.Value)}, off: off})
		return
	}
	b.latest[string(r.Key)] = Entry{Kind: r.Kind, Offset: off, Length: uint32(length)}
}

// Finish returns the sorted entries and the union of the range tombstones.
//
// A range tombstone deletes the entries before it in the file. One sweep
// over the sorted entries decides each: the tombstones are taken in order
// of their start, those that have begun by the entry's key wait in a heap
// by file offset (the newest on top), those that ended before it are
// dropped from the top as they surface, and the entry is dead if the top
// is newer than it. O(keys log keys + tombstones log tombstones), however
// the tombstones overlap (a log that trims its head again and again).
func (b *Builder) Finish() ([]Entry, *rangedel.Set) {
	entries := EntriesFromMap(b.latest)
	if len(b.tombs) == 0 {
		return entries, nil
	}
	byStart := slices.Clone(b.tombs)
	slices.SortFunc(byStart, func(x, y offsetSpan) int { return bytes.Compare(x.span.Start, y.span.Start) })
	active := &tombHeap{}
	next := 0
	live := entries[:0]
	for _, e := range entries {
		for next < len(byStart) && bytes.Compare(byStart[next].span.Start, e.Key) <= 0 {
			heap.Push(active, byStart[next])
			next++
		}
		// Keys only grow, so a tombstone that ended before this key stays
		// ended: drop it when it reaches the top.
		for active.Len() > 0 && bytes.Compare((*active)[0].span.End, e.Key) <= 0 {
			heap.Pop(active)
		}
		if active.Len() > 0 && (*active)[0].off > e.Offset {
			continue // a later range tombstone of this file deletes it
		}
		live = append(live, e)
	}
	spans := make([]rangedel.Span, len(b.tombs))
	for i, t := range b.tombs {
		spans[i] = t.span
	}
	return live, rangedel.Union(spans...)
}

// tombHeap is a max-heap of range tombstones by file offset.
type tombHeap []offsetSpan

func (h tombHeap) Len() int           { return len(h) }
func (h tombHeap) Less(i, j int) bool { return h[i].off > h[j].off }
func (h tombHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tombHeap) Push(x any)        { *h = append(*h, x.(offsetSpan)) }
func (h *tombHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
