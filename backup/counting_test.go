package backup

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/segkv/segkv/backup/internal/buckettest"
)

// metaWindows drives commits commits through a loop on a counting memblob
// bucket, the store growing to about segs segments (each commit adds one;
// most also remove one, as merges do), and returns the metadata bytes
// (edits and checkpoints) written in each tenth of the run.
func metaWindows(t *testing.T, commits, segs int, rewrite bool) ([]int64, *buckettest.Counting) {
	ctx := context.Background()
	cb := buckettest.NewCounting(openURL(t, "mem://"))
	src := newFakeSource()
	l := NewLoop(src, cb, nil)
	l.rewrite = rewrite
	rng := rand.New(rand.NewPCG(1, 2))
	growEvery := commits / segs // one commit in growEvery removes nothing
	windows := make([]int64, 10)
	for i := range commits {
		if i%growEvery == 0 || len(src.segs) < 2 {
			src.commit(1)
		} else {
			src.commit(1, rng.IntN(len(src.segs)))
		}
		before := l.Stats().MetaBytes
		if err := l.Once(ctx); err != nil {
			t.Fatal(err)
		}
		windows[i*10/commits] += l.Stats().MetaBytes - before
	}
	return windows, cb
}

// flat reports whether the last window's metadata is within twice the
// first's: per-commit metadata that does not grow with the store.
func flat(w []int64) bool { return w[len(w)-1] <= 2*w[0] }

func TestCountingTenThousandCommits(t *testing.T) {
	const commits, segs = 10000, 1000
	w, cb := metaWindows(t, commits, segs, false)
	t.Logf("metadata bytes per 1000 commits: %v", w)
	for key, n := range cb.Puts {
		if n != 1 {
			t.Fatalf("%s written %d times", key, n)
		}
	}
	if len(cb.Gets) != 0 {
		t.Fatalf("the loop read objects back: %v", cb.Gets)
	}
	var edits, segObjs, ckpts int
	for key := range cb.Puts {
		switch {
		case strings.HasPrefix(key, editsDir):
			edits++
		case strings.HasPrefix(key, segmentsDir):
			segObjs++
		case strings.HasPrefix(key, checkpointsDir):
			ckpts++
		}
	}
	if edits != commits || segObjs != commits {
		t.Fatalf("%d edits and %d segment objects for %d commits", edits, segObjs, commits)
	}
	if !flat(w) {
		t.Fatalf("metadata per commit grew with the store: %v", w)
	}
	total := cb.PutBytes[editsDir] + cb.PutBytes[checkpointsDir]
	t.Logf("%d checkpoints; metadata %d bytes, %.1f per commit", ckpts, total, float64(total)/commits)
}

// TestCountingRejectsRewrite: the flatness check above must fail for a
// loop that rewrites the whole manifest on every commit (smaller, since
// that strategy is quadratic).
func TestCountingRejectsRewrite(t *testing.T) {
	w, _ := metaWindows(t, 2000, 200, true)
	t.Logf("rewrite strategy, metadata bytes per 200 commits: %v", w)
	if flat(w) {
		t.Fatalf("the flatness check accepts a rewrite-the-manifest strategy: %v", w)
	}
}
