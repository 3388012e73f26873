package segstore

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

func liveKeys(x liveIndex) []string {
	var out []string
	x.tr.Scan(func(e liveEntry) bool { out = append(out, e.key); return true })
	return out
}

// TestBreakLiveIndexDeleteRangeCOW: the live directory with enough keys to
// have branch nodes, random sets and range deletes, with O(1) copies taken
// between them (as snapshots do): every copy keeps what it had, and the
// original matches a model.
func TestBreakLiveIndexDeleteRangeCOW(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		rng := rand.New(rand.NewSource(seed))
		x := newLiveIndex()
		model := map[string]bool{}
		type cp struct {
			x    liveIndex
			want []string
		}
		var copies []cp
		sorted := func() []string {
			var out []string
			for k := range model {
				out = append(out, k)
			}
			slices.Sort(out)
			return out
		}
		nkeys := 50 + rng.Intn(3000)
		key := func() string { return fmt.Sprintf("k%06d", rng.Intn(nkeys)) }
		for step := 0; step < 400; step++ {
			switch r := rng.Intn(10); {
			case r < 5:
				for i := rng.Intn(200); i >= 0; i-- {
					k := key()
					x.set(newLiveEntry([]byte(k), 0, 0, 0))
					model[k] = true
				}
			case r < 8:
				a, b := key(), key()
				if a > b {
					a, b = b, a
				}
				x.deleteRange([]byte(a), []byte(b))
				for k := range model {
					if a <= k && k < b {
						delete(model, k)
					}
				}
			default:
				copies = append(copies, cp{x: x.copy(), want: sorted()})
			}
			if got, want := liveKeys(x), sorted(); !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: original has %d keys, model %d", seed, step, len(got), len(want))
			}
			if x.len() != len(model) {
				t.Fatalf("seed %d step %d: Len %d, model %d", seed, step, x.len(), len(model))
			}
		}
		for i, c := range copies {
			if got := liveKeys(c.x); !slices.Equal(got, c.want) {
				t.Fatalf("seed %d: copy %d changed: %d keys, had %d", seed, i, len(got), len(c.want))
			}
			if c.x.len() != len(c.want) {
				t.Fatalf("seed %d: copy %d Len %d, had %d", seed, i, c.x.len(), len(c.want))
			}
		}
	}
}
