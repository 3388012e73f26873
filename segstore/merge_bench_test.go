package segstore

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/segkv/segkv/vfs"
)

// BenchmarkMergeStep measures one size-tiered merge step on the real file
// system: four sealed segments of 25,000 random keys each over a space of
// 50,000 (so a quarter of the input is superseded), a segment newer than the
// run that shadows a tenth of the keys, and one older that the run's
// tombstones may still delete. SetBytes is the run's input, so MB/s is the
// merge's read rate; out/in is the output's size over the input's. Building the store is outside the timer.
func BenchmarkMergeStep(b *testing.B) {
	const keySpace, perSeg = 50_000, 25_000
	var inBytes, outBytes int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := Open(b.TempDir(), &Options{FS: vfs.NewOS(), SegmentSize: 1 << 30, Sync: SyncManual,
			Merge: MergeOptions{Disable: true, MinRun: 4, SizeRatio: 2, KeepWriteOrder: true}})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		seal := func() {
			if err := s.Seal(); err != nil {
				b.Fatal(err)
			}
		}
		put := func(k uint64, v []byte) {
			if err := s.Put(benchKey(k), v); err != nil {
				b.Fatal(err)
			}
		}
		// Older than the run, and far larger: outside it.
		big := make([]byte, 1000)
		for k := uint64(0); k < keySpace; k += 2 {
			put(k, big)
		}
		seal()
		for range 4 {
			for j := 0; j < perSeg; j++ {
				k := rng.Uint64N(keySpace)
				if j%20 == 0 {
					if err := s.Delete(benchKey(k)); err != nil {
						b.Fatal(err)
					}
					continue
				}
				put(k, benchValue)
			}
			seal()
		}
		// Newer than the run, and far larger: outside it.
		bigger := make([]byte, 4000)
		for k := uint64(0); k < keySpace; k += 10 {
			put(k, bigger)
		}
		seal()
		segs := s.Segments()
		inBytes = 0
		for _, sg := range segs[1:5] {
			inBytes += sg.Size
		}
		b.StartTimer()
		did, err := s.mergeStep(context.Background(), false)
		b.StopTimer()
		if err != nil || !did {
			b.Fatalf("merge step: did %v, %v", did, err)
		}
		after := s.Segments()
		if len(after) != 3 {
			b.Fatalf("%d segments after the step, want 3 (the run merged into one)", len(after))
		}
		outBytes = after[1].Size
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(inBytes)
	b.ReportMetric(float64(outBytes)/float64(inBytes), "out/in")
}
