package recovery

import (
	"bytes"
	"slices"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/rangedel"
	"github.com/segkv/segkv/segment"
)

// IndexBuilder turns the records of one data file, fed in file order, into
// the file's index: the newest record of each key, minus the keys a later
// range tombstone of the same file deleted, plus the union of the file's
// range tombstones. Rebuilding an index, importing a segment and checking a
// store all use it, so the three agree with each other and with a seal.
type IndexBuilder struct {
	latest map[string]index.Entry
	tombs  []offsetSpan
}

// offsetSpan is a range tombstone and its offset in the file.
type offsetSpan struct {
	span rangedel.Span
	off  int64
}

// NewIndexBuilder returns an empty builder.
func NewIndexBuilder() *IndexBuilder {
	return &IndexBuilder{latest: map[string]index.Entry{}}
}

// Add records one record found at off, length bytes long. Link records are
// not part of the index; the caller skips them.
func (b *IndexBuilder) Add(r segment.Record, off int64, length int) {
	if r.Kind == segment.KindRangeDelete {
		b.tombs = append(b.tombs, offsetSpan{span: rangedel.Span{Start: bytes.Clone(r.Key), End: bytes.Clone(r.Value)}, off: off})
		return
	}
	b.latest[string(r.Key)] = index.Entry{Kind: r.Kind, Offset: off, Length: uint32(length)}
}

// Finish returns the sorted entries and the union of the range tombstones.
//
// A range tombstone deletes the entries before it in the file: for each
// one, the entries it covers are found by binary search and dropped when
// older (lower offset). The cost is O(keys log keys + tombstones log keys +
// keys covered).
func (b *IndexBuilder) Finish() ([]index.Entry, *rangedel.Set) {
	entries := EntriesFromMap(b.latest)
	if len(b.tombs) == 0 {
		return entries, nil
	}
	dead := make([]bool, len(entries))
	spans := make([]rangedel.Span, len(b.tombs))
	for i, t := range b.tombs {
		spans[i] = t.span
		j, _ := slices.BinarySearchFunc(entries, t.span.Start, func(e index.Entry, k []byte) int { return bytes.Compare(e.Key, k) })
		for ; j < len(entries) && bytes.Compare(entries[j].Key, t.span.End) < 0; j++ {
			if entries[j].Offset < t.off {
				dead[j] = true
			}
		}
	}
	live := entries[:0]
	for i, e := range entries {
		if !dead[i] {
			live = append(live, e)
		}
	}
	return live, rangedel.Union(spans...)
}
