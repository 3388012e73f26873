package segstore

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkGetHitMerged reads present keys of a store whose data a merge
// has rewritten into one block file (the state of a settled store), one
// random key at a time: random-values holds 100-byte values that do not
// compress (S2 saves a few percent on the keys), text-values 100-byte
// values of words that do (about 2x). It is what a point read of a block
// file costs: the index search, the block read and decode, the record's
// checks.
func BenchmarkGetHitMerged(b *testing.B) {
	words := []string{"alpha ", "beta ", "gamma ", "delta ", "status ", "active ", "region ", "eu-west "}
	for _, c := range []struct {
		name  string
		value func(r *rand.Rand, v []byte)
	}{
		{"random-values", func(r *rand.Rand, v []byte) {
			for i := range v {
				v[i] = byte(r.Uint32())
			}
		}},
		{"text-values", func(r *rand.Rand, v []byte) {
			d := v[:0]
			for len(d) < cap(v) {
				d = append(d, words[r.IntN(len(words))]...)
			}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), &Options{Sync: SyncManual, Merge: MergeOptions{Disable: true}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := rand.New(rand.NewPCG(1, 2))
			v := make([]byte, 100, 100+16)
			batch := s.NewBatch()
			for _, i := range r.Perm(benchKeys) {
				c.value(r, v)
				batch.Put(benchKey(uint64(i)), v[:100])
				if batch.Len() == 1000 {
					if err := s.Apply(batch); err != nil {
						b.Fatal(err)
					}
					batch = s.NewBatch()
				}
			}
			if err := s.Apply(batch); err != nil {
				b.Fatal(err)
			}
			if err := s.Seal(); err != nil {
				b.Fatal(err)
			}
			if err := s.Compact(context.Background()); err != nil {
				b.Fatal(err)
			}
			if n := len(s.Segments()); n != 1 {
				b.Fatalf("%d segments after Compact, want 1", n)
			}
			b.ResetTimer()
			i := uint64(0)
			for b.Loop() {
				i = (i + 7919) % benchKeys
				if _, err := s.Get(benchKey(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
