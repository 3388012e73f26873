package backup

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
)

// TestFigures measures metadata objects and bytes per commit at a steady
// store size (docs/BACKUP.md). Set SEGKV_BACKUP_FIGURES=1 to run it.
func TestFigures(t *testing.T) {
	if os.Getenv("SEGKV_BACKUP_FIGURES") == "" {
		t.Skip("set SEGKV_BACKUP_FIGURES=1")
	}
	for _, n := range []int{100, 10000} {
		src := newFakeSource()
		src.commit(n)
		l := NewLoop(src, openURL(t, "mem://"), nil)
		if err := l.Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		commits := 2 * n
		if commits < 5000 {
			commits = 5000
		}
		s0 := l.Stats()
		for range commits {
			src.commit(1, rng.IntN(len(src.segs)))
			if err := l.Once(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		s1 := l.Stats()
		t.Logf("segments %d: %d commits, %d edits, %d checkpoints, metadata %.1f bytes/commit, metadata objects %.4f/commit",
			n, commits, s1.Edits-s0.Edits, s1.Checkpoints-s0.Checkpoints,
			float64(s1.MetaBytes-s0.MetaBytes)/float64(commits), float64(s1.Edits-s0.Edits+s1.Checkpoints-s0.Checkpoints)/float64(commits))
	}
}
