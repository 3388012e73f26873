package index

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

const benchN = 1 << 20

// benchIndex builds a decoded index of n 32-byte keys (the brief's workload).
func benchIndex(b *testing.B, n int) (*Index, []Entry, []byte, uint64) {
	b.Helper()
	entries := genSequential(n)
	id := Identity{DataLength: int64(n)*150 + 16, DataDigest: 1}
	data, sum, err := Encode(entries, id)
	if err != nil {
		b.Fatal(err)
	}
	ix, err := Decode("bench.idx", data, sum, id)
	if err != nil {
		b.Fatal(err)
	}
	return ix, entries, data, sum
}

// probes returns count keys in random order: present ones from entries, or
// absent ones that sort between them. They are packed into one buffer, as a
// caller's key would be in cache, so that the figures measure the index.
func probes(entries []Entry, count int, present bool) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, count)
	var buf []byte
	for i := range out {
		j := rng.IntN(len(entries))
		start := len(buf)
		if present {
			buf = append(buf, entries[j].Key...)
		} else {
			buf = fmt.Appendf(buf, "user:%027dx", j) // sorts right after key j, never equal
		}
		out[i] = buf[start:len(buf):len(buf)]
	}
	// Re-slice: buf may have moved while growing.
	pos := 0
	for i := range out {
		n := len(out[i])
		out[i] = buf[pos : pos+n : pos+n]
		pos += n
	}
	return out
}

func BenchmarkGetHit(b *testing.B) {
	ix, entries, _, _ := benchIndex(b, benchN)
	keys := probes(entries, 1<<16, true)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := ix.Get(keys[i&(len(keys)-1)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkGetMiss(b *testing.B) {
	ix, entries, _, _ := benchIndex(b, benchN)
	keys := probes(entries, 1<<16, false)
	fp := 0
	for _, k := range keys {
		if ix.MayContain(k) {
			fp++
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := ix.Get(keys[i&(len(keys)-1)]); ok {
			b.Fatal("hit")
		}
		i++
	}
	b.ReportMetric(float64(fp)/float64(len(keys)), "bloom-fp-rate")
}

func BenchmarkSearch(b *testing.B) {
	ix, entries, _, _ := benchIndex(b, benchN)
	keys := probes(entries, 1<<16, false)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = ix.Search(keys[i&(len(keys)-1)])
		i++
	}
}

func BenchmarkDecode(b *testing.B) {
	ix, _, data, sum := benchIndex(b, benchN)
	id := ix.Identity()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("bench.idx", data, sum, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data))/benchN, "file-B/key")
}

func BenchmarkEncode(b *testing.B) {
	ix, entries, data, _ := benchIndex(b, benchN)
	id := ix.Identity()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Encode(entries, id); err != nil {
			b.Fatal(err)
		}
	}
}
