package index

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/segkv/segkv/vfs"
)

const benchN = 1 << 20

// benchIndex builds a decoded index of n 32-byte keys (the brief's workload)
// whose parts were all verified already (Verify), so that lookups measure
// the steady state rather than first reads.
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
	if err := ix.Verify(); err != nil {
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

// BenchmarkGetHit: a lookup of a present key with a fresh Probe (its bloom
// hashing included, as a point read pays it once).
func BenchmarkGetHit(b *testing.B) {
	ix, entries, _, _ := benchIndex(b, benchN)
	keys := probes(entries, 1<<16, true)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := NewProbe(keys[i&(len(keys)-1)])
		if _, ok, err := ix.Get(&p); !ok || err != nil {
			b.Fatal("miss", err)
		}
		i++
	}
}

// BenchmarkGetMiss: a lookup of an absent key with a fresh Probe.
func BenchmarkGetMiss(b *testing.B) {
	ix, entries, _, _ := benchIndex(b, benchN)
	keys := probes(entries, 1<<16, false)
	fp := 0
	for _, k := range keys {
		if may, _ := ix.MayContain(probeOf(k)); may {
			fp++
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := NewProbe(keys[i&(len(keys)-1)])
		if _, ok, err := ix.Get(&p); ok || err != nil {
			b.Fatal("hit", err)
		}
		i++
	}
	b.ReportMetric(float64(fp)/float64(len(keys)), "bloom-fp-rate")
}

// BenchmarkGetMissReusedProbe: the bloom test alone, with the probe's
// locations computed already (a key looked up in several segments).
func BenchmarkGetMissReusedProbe(b *testing.B) {
	ix, entries, _, _ := benchIndex(b, benchN)
	keys := probes(entries, 1<<16, false)
	ps := make([]Probe, len(keys))
	for i, k := range keys {
		ps[i] = NewProbe(k)
		_, _ = ix.MayContain(&ps[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, _, err := ix.Get(&ps[i&(len(ps)-1)]); err != nil {
			b.Fatal(err)
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
		if _, err := ix.Search(keys[i&(len(keys)-1)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkDecode: the cost of opening an index held in memory, which
// verifies the top block only.
func BenchmarkDecode(b *testing.B) {
	ix, _, data, sum := benchIndex(b, benchN)
	id := ix.Identity()
	_, topLen, _ := topBounds(data)
	b.SetBytes(int64(topLen)) // what it reads: the top block
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("bench.idx", data, sum, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data))/benchN, "file-B/key")
	b.ReportMetric(float64(topLen)/benchN, "top-B/key")
}

// BenchmarkLoadMapped: Load of the 1M-key index through the OS file system
// with a mapping, and Close.
func BenchmarkLoadMapped(b *testing.B) {
	ix, _, data, sum := benchIndex(b, benchN)
	path := filepath.Join(b.TempDir(), "bench.idx")
	fsys := vfs.NewOS()
	if err := Write(fsys, path, data); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	heap := 0
	for b.Loop() {
		l, err := Load(fsys, path, sum, ix.Identity(), LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		heap = l.HeapBytes()
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(heap)/benchN, "heap-B/key")
}

// BenchmarkFirstReadOfBlock: the first read of a key block, which verifies
// it (checksum and structure), then reads one entry.
func BenchmarkFirstReadOfBlock(b *testing.B) {
	ix, _, _, _ := benchIndex(b, benchN)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		blk := i % ix.blocks
		ix.state[blk].Store(unchecked)
		if _, err := ix.At(blk*ix.perBlock + 17); err != nil {
			b.Fatal(err)
		}
		i++
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
