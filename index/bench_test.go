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
// absent ones of the same length and prefix.
func probes(entries []Entry, count int, present bool) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, count)
	for i := range out {
		j := rng.IntN(len(entries))
		if present {
			out[i] = entries[j].Key
		} else {
			out[i] = fmt.Appendf(nil, "user:%027dx", j) // sorts right after key j, never equal
		}
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
	b.ReportMetric(float64(fp)/float64(len(keys)), "bloom-fp-rate")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := ix.Get(keys[i&(len(keys)-1)]); ok {
			b.Fatal("hit")
		}
		i++
	}
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
	b.ReportMetric(float64(len(data))/benchN, "file-B/key")
	for b.Loop() {
		if _, err := Decode("bench.idx", data, sum, id); err != nil {
			b.Fatal(err)
		}
	}
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
