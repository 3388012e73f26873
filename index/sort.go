package index

import (
	"bytes"
	"encoding/binary"
	"iter"
	"maps"
	"slices"
)

// EntriesFromMap turns a key directory into sorted index entries. Sorting a
// million keys is most of a seal's CPU, so it compares integers where it can:
// keys often share a long prefix (tables, tenants), so each entry carries the
// 8 bytes after the prefix all keys share as a big-endian word, and whole keys
// are compared only when those words tie.
func EntriesFromMap(m map[string]Entry) []Entry {
	return SortedEntries(len(m), maps.All(m))
}

// SortedEntries is EntriesFromMap over any key directory: n is its size, all
// yields each key once with its entry.
func SortedEntries(n int, all iter.Seq2[string, Entry]) []Entry {
	// One pass over the directory (a map: every step is a cache miss)
	// collects the entries, their keys (in one arena, so that a seal of a
	// million keys is not a million allocations) and the keys' common
	// prefix; the rest works on contiguous slices.
	entries := make([]Entry, 0, n)
	var arena []byte
	var prefix string
	for k, e := range all {
		if len(entries) == 0 {
			prefix = k
		} else {
			p := 0
			for p < len(prefix) && p < len(k) && prefix[p] == k[p] {
				p++
			}
			prefix = prefix[:p]
		}
		start := len(arena)
		arena = append(arena, k...)
		e.Key = arena[start:len(arena):len(arena)]
		entries = append(entries, e)
	}
	// The arena may have moved while it grew: point the keys at its final
	// home.
	off := 0
	for i := range entries {
		l := len(entries[i].Key)
		entries[i].Key = arena[off : off+l : off+l]
		off += l
	}
	// Each key's search word: its first 8 bytes after the common prefix,
	// zero-padded. Byte order of keys is (word, key) order, and distinct
	// keys rarely tie on the word, so a radix sort of the words does
	// almost all the work.
	items := make([]wordItem, len(entries))
	for i := range entries {
		var w [8]byte
		copy(w[:], entries[i].Key[len(prefix):])
		items[i] = wordItem{word: binary.BigEndian.Uint64(w[:]), i: uint32(i)}
	}
	radixSortWords(items)
	// Keys that tie on the word are ordered by the whole key.
	for lo := 0; lo < len(items); {
		hi := lo + 1
		for hi < len(items) && items[hi].word == items[lo].word {
			hi++
		}
		if hi-lo > 1 {
			slices.SortFunc(items[lo:hi], func(a, b wordItem) int { return bytes.Compare(entries[a.i].Key, entries[b.i].Key) })
		}
		lo = hi
	}
	out := make([]Entry, len(items))
	for j, it := range items {
		out[j] = entries[it.i]
	}
	return out
}

// wordItem is one key's search word and its position in the entries.
type wordItem struct {
	word uint64
	i    uint32
}

// radixSortWords sorts items by word: a least-significant-byte-first radix
// sort, stable, skipping the byte positions where every word agrees (the
// common case for the high bytes of keys with a shared structure). O(n) per
// pass and at most eight passes, against O(n log n) comparisons.
func radixSortWords(items []wordItem) {
	if len(items) < 2 {
		return
	}
	tmp := make([]wordItem, len(items))
	src, dst := items, tmp
	for shift := uint(0); shift < 64; shift += 8 {
		var count [256]int
		for _, it := range src {
			count[byte(it.word>>shift)]++
		}
		if count[byte(src[0].word>>shift)] == len(src) {
			continue // every word has this byte: the pass would change nothing
		}
		pos := 0
		for b := range count {
			c := count[b]
			count[b] = pos
			pos += c
		}
		for _, it := range src {
			b := byte(it.word >> shift)
			dst[count[b]] = it
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &items[0] {
		copy(items, src)
	}
}
