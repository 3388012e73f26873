package metamorphic

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segkv/segkv/vfs"
)

// Flags, each with an environment variable of the same meaning (the
// variables are what `make meta` sets):
//
//	-seed N     META_SEED      run only seed N (with its option set)
//	-seeds N    META_SEEDS     how many seeds (default 6)
//	-first N    META_FIRST     the first seed of the run (default 1)
//	-ops N      META_OPS       ops per seed (default 600)
//	-trace F    META_TRACE     replay the trace file F (a failing run writes one)
//	-known M    META_KNOWN     "open" (default) holds the store to everything but the known open bugs
//	                           (AvoidOpen: none today); "include" to everything; "avoid" leaves out also
//	                           the op patterns of the bugs of issue 28 (fixed on main since); or a
//	                           comma-separated list of reimport, import-unsealed, present-reimport
//	-shrink D   META_SHRINK    time budget of the shrinker per failure (default 60s)
//	-out DIR    META_OUT       where failing traces are written (default the temp directory)
var (
	flagSeed   = flag.Uint64("seed", 0, "run only this seed (META_SEED)")
	flagSeeds  = flag.Int("seeds", 0, "number of seeds (META_SEEDS)")
	flagFirst  = flag.Uint64("first", 0, "first seed (META_FIRST)")
	flagOps    = flag.Int("ops", 0, "ops per seed (META_OPS)")
	flagTrace  = flag.String("trace", "", "replay this trace file (META_TRACE)")
	flagKnown  = flag.String("known", "", "open|include|avoid: which known bugs' patterns to look past (META_KNOWN)")
	flagShrink = flag.Duration("shrink", 0, "shrink time budget per failure (META_SHRINK)")
	flagOut    = flag.String("out", "", "directory for failing traces (META_OUT)")
)

func envOr(name, flagVal, def string) string {
	if flagVal != "" && flagVal != "0" && flagVal != "0s" {
		return flagVal
	}
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func intSetting(t *testing.T, name string, flagVal uint64, def uint64) uint64 {
	s := envOr(name, strconv.FormatUint(flagVal, 10), strconv.FormatUint(def, 10))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

func avoidSetting(t *testing.T) Avoid {
	m := envOr("META_KNOWN", *flagKnown, "open")
	switch m {
	case "avoid":
		return AvoidKnown
	case "open":
		return AvoidOpen
	case "include":
		return Avoid{}
	}
	// A comma-separated list of the patterns to avoid.
	var a Avoid
	for _, p := range strings.Split(m, ",") {
		switch p {
		case "reimport":
			a.Reimport = true
		case "import-unsealed":
			a.ImportUnsealed = true
		case "present-reimport":
			a.PresentReimport = true
		default:
			t.Fatalf("META_KNOWN=%q: want open, avoid, include or a list of reimport, import-unsealed, present-reimport", m)
		}
	}
	return a
}

func shrinkBudget(t *testing.T) time.Duration {
	s := envOr("META_SHRINK", flagShrink.String(), "60s")
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("META_SHRINK=%q: %v", s, err)
	}
	return d
}

// TestMeta runs the metamorphic test: random traces from a range of seeds
// (or one seed, or a saved trace), each checked against the model.
func TestMeta(t *testing.T) {
	if path := envOr("META_TRACE", *flagTrace, ""); path != "" {
		tr, err := LoadTrace(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("replaying %s: %v, %d ops", path, tr.Config, len(tr.Ops))
		runOne(t, tr.Config, tr.Ops)
		return
	}
	avoid := avoidSetting(t)
	ops := int(intSetting(t, "META_OPS", uint64(*flagOps), 600))
	first := intSetting(t, "META_FIRST", *flagFirst, 1)
	n := intSetting(t, "META_SEEDS", uint64(*flagSeeds), 6)
	if seed := intSetting(t, "META_SEED", *flagSeed, 0); seed != 0 {
		first, n = seed, 1
	}
	var mu sync.Mutex
	var total Stats
	failed := 0
	start := time.Now()
	t.Run("seeds", func(t *testing.T) {
		for seed := first; seed < first+n; seed++ {
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				c := RandomConfig(seed, ops, avoid)
				st, ok := runOne(t, c, Generate(c))
				mu.Lock()
				total.Add(st)
				if !ok {
					failed++
				}
				mu.Unlock()
			})
		}
	})
	t.Logf("metamorphic: %d seeds (%d..%d) x %d ops in %v: %s; failing seeds: %d",
		n, first, first+n-1, ops, time.Since(start).Round(time.Millisecond), figures(total), failed)
}

// figures renders what a run did, for the log and docs/RELIABILITY.md.
func figures(s Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops (", s.TotalOps())
	var parts []string
	for k := Kind(0); k < numKinds; k++ {
		if s.Ops[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Ops[k]))
		}
	}
	b.WriteString(strings.Join(parts, ", "))
	fmt.Fprintf(&b, "), %d reads compared, %d power losses checked (", s.Reads, s.TotalCrashes())
	parts = parts[:0]
	for m := vfs.CrashMode(0); m < 6; m++ {
		parts = append(parts, fmt.Sprintf("%v %d", m, s.Crashes[m]))
	}
	b.WriteString(strings.Join(parts, ", "))
	fmt.Fprintf(&b, "; %d at an armed barrier, %d with a change in flight, %d back to an older state), %d armed crashes expired, %d peer segments, %d segments imported, %d seals added before imports",
		s.ArmedFired, s.CrashInFlight, s.CrashBack, s.ArmedExpired, s.Peer, s.ImportedSegs, s.ImplicitSeals)
	fmt.Fprintf(&b, "; follower: %d Follows (%d compared in full, %d segments fetched, %d retried after ErrNoSegment, %d left out for a leader power loss), %d follower power losses (",
		s.Follows, s.FollowsExact, s.FollowFetched, s.FollowRetries, s.FollowSkipped, total(s.FollowCrashes[:]))
	parts = parts[:0]
	for m := vfs.CrashMode(0); m < 6; m++ {
		parts = append(parts, fmt.Sprintf("%v %d", m, s.FollowCrashes[m]))
	}
	b.WriteString(strings.Join(parts, ", "))
	fmt.Fprintf(&b, "; %d mid-Follow, %d back to the mirror before), %d ErrDiverged, %d ErrFollowGap, %d kept changes applied; %d ReplaceAll (%d segments installed)",
		s.FollowCrashMid, s.FollowCrashOld, s.Diverged, s.Gaps, s.StaleApplied, s.Replaces, s.ReplaceSegs)
	return b.String()
}

func total(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// runOne runs one trace; on failure it shrinks it, writes it to a file and
// reports how to replay it.
func runOne(t *testing.T, c Config, ops []Op) (Stats, bool) {
	f, st := Run(c, ops)
	if f == nil {
		t.Logf("%v: ok: %s", c, figures(st))
		return st, true
	}
	t.Logf("seed %d failed at op %d of %d (%s): %s; shrinking", c.Seed, f.Op, len(ops), f.Class, f.Msg)
	res := Shrink(c, ops, f, shrinkBudget(t))
	dir := envOr("META_OUT", *flagOut, os.TempDir())
	path := filepath.Join(dir, fmt.Sprintf("segkv-meta-%d-%s.json", c.Seed, res.Failure.Class))
	saved := "could not save the trace"
	_ = os.MkdirAll(dir, 0o755)
	if err := (Trace{Config: c, Failure: res.Failure, Ops: res.Ops}).Save(path); err == nil {
		saved = "trace saved to " + path
	} else {
		saved += ": " + err.Error()
	}
	t.Errorf("metamorphic failure, seed %d (%v)\ninvariant: %s\n%s\nshrunk from %d to %d ops (%d runs, %v):\n%s%s\nreplay: META_TRACE=%s go test ./internal/metamorphic -run 'TestMeta$' -v\n   or: go test ./internal/metamorphic -run 'TestMeta$' -v -seed %d -ops %d -known %s",
		c.Seed, c, res.Failure.Class, res.Failure.Msg, len(ops), len(res.Ops), res.Runs, res.Elapsed.Round(time.Millisecond),
		Format(res.Ops, res.Failure.Op), saved, path, c.Seed, c.Ops, knownName(c.Avoid))
	return st, false
}

func knownName(a Avoid) string {
	switch a {
	case Avoid{}:
		return "include"
	case AvoidKnown:
		return "avoid"
	case AvoidOpen:
		return "open"
	}
	var parts []string
	if a.Reimport {
		parts = append(parts, "reimport")
	}
	if a.ImportUnsealed {
		parts = append(parts, "import-unsealed")
	}
	if a.PresentReimport {
		parts = append(parts, "present-reimport")
	}
	return strings.Join(parts, ",")
}
