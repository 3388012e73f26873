package metamorphic

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Trace is a run that can be saved and replayed: the option set and the
// ops, with the failure it ended in (informational).
type Trace struct {
	Config  Config   `json:"config"`
	Failure *Failure `json:"failure,omitempty"`
	Ops     []Op     `json:"ops"`
}

// Save writes t as JSON to path.
func (t Trace) Save(path string) error {
	b, err := json.MarshalIndent(t, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadTrace reads a trace Save wrote.
func LoadTrace(path string) (Trace, error) {
	var t Trace
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	err = json.Unmarshal(b, &t)
	return t, err
}

// Format renders ops one per line, numbered, with the failing op marked.
func Format(ops []Op, failAt int) string {
	var b strings.Builder
	for i, op := range ops {
		mark := "  "
		if i == failAt {
			mark = "=>"
		}
		fmt.Fprintf(&b, "%s %4d  %s\n", mark, i, op)
	}
	return b.String()
}

// ShrinkResult is what Shrink found.
type ShrinkResult struct {
	Ops     []Op
	Failure *Failure
	Runs    int
	Elapsed time.Duration
}

// Shrink looks for a shorter trace failing with the same class as f:
// it cuts the ops after the failure, then removes chunks of ops while the
// failure persists (delta debugging, halving the chunk size down to one
// op), then single entries of batches. It stops at budget. A background
// merge can make a run's barriers differ from the run before it, so a
// candidate is tried once; what is kept failed at least once.
func Shrink(c Config, ops []Op, f *Failure, budget time.Duration) ShrinkResult {
	start := time.Now()
	res := ShrinkResult{Ops: ops, Failure: f}
	fails := func(cand []Op) bool {
		if time.Since(start) > budget {
			return false
		}
		res.Runs++
		g, _ := Run(c, cand)
		if g == nil || g.Class != f.Class {
			return false
		}
		res.Ops, res.Failure = cand, g
		if g.Op+1 < len(cand) {
			res.Ops = cand[:g.Op+1]
		}
		return true
	}
	if f.Op+1 < len(ops) {
		fails(slices.Clone(ops[:f.Op+1]))
	}
	// ddmin over ops.
	n := 2
	for len(res.Ops) >= 2 && time.Since(start) < budget {
		cur := res.Ops
		chunk := (len(cur) + n - 1) / n
		removed := false
		for lo := len(cur) - chunk; lo > -chunk; lo -= chunk {
			l := max(lo, 0)
			cand := append(slices.Clone(cur[:l]), cur[lo+chunk:]...)
			if len(cand) > 0 && fails(cand) {
				removed = true
				break
			}
		}
		if removed {
			n = max(n-1, 2)
			continue
		}
		if chunk == 1 {
			break
		}
		n = min(2*n, len(cur))
	}
	// Single batch entries.
	for i := 0; i < len(res.Ops) && time.Since(start) < budget; i++ {
		for j := 0; i < len(res.Ops) && j < len(res.Ops[i].Batch) && len(res.Ops[i].Batch) > 1; {
			cand := slices.Clone(res.Ops)
			cand[i].Batch = slices.Delete(slices.Clone(cand[i].Batch), j, j+1)
			if !fails(cand) {
				j++
			}
		}
	}
	res.Elapsed = time.Since(start)
	return res
}
