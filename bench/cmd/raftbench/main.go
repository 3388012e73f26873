// Command raftbench compares raft log stores through hashicorp/raft's
// raft.LogStore interface, side by side in one process, each on its own
// directory of the same disk: segkv's raftstore, hashicorp/raft-wal and
// hashicorp/raft-boltdb/v2, each with its durable defaults (every StoreLogs
// is synced before it returns).
//
//	raftbench -dir /work/raftbench-tmp            # the full run: 1M entries, truncate 990k
//	raftbench -n 100000 -truncate 99000            # quick mode for development
//	raftbench -engines segkv,raft-wal -json        # one JSON object per line
//
// What it measures, per engine (entries of -data bytes, LogCommand, term 1,
// AppendedAt set as a leader does, indexes consecutive from 1):
//
//  1. preload: -n entries appended in durable StoreLogs batches of -preload
//     to a new store (timed, for information).
//  2. GetLog over the preloaded log: -gets calls at uniformly random indexes,
//     one goroutine, after an untimed warm-up that reads every entry in
//     order (the page cache is warm anyway: the preload just wrote the
//     files). Each call is timed alone, and each result is checked (index,
//     data length).
//  3. DeleteRange(1, -truncate): a head truncation, as raft does after a
//     snapshot. Timed; the store directory's disk usage (du: allocated
//     blocks, so preallocated space counts) and its file count are sampled
//     before it, right after it returns, after -idle with nothing running,
//     after the appends of step 5 and after Close. GetLog is then measured
//     again over the entries left.
//  4. A fresh, empty store per engine is opened beside it.
//  5. Appends: sequential StoreLogs calls of each batch size of -batches
//     (1 and 64 by default, as a raft leader appends: one goroutine, the
//     next index each time) on the fresh store and on the truncated one,
//     for -duration each, in -rounds rounds that alternate the order of the
//     engines and of the two stores, so that the disk's drift over the run
//     hits them alike. Every call is timed: p50, p99, max and entries/s,
//     and the truncated store's entries/s over the fresh one's is also
//     given per round (the two ran back to back), as a median. While the appends to the truncated store run, its directory is
//     polled for the first removal of a file it had before DeleteRange.
//  6. The disk's own barrier, for context, interleaved with the appends
//     (a slice at the start of each round): -barriers sequential writes of
//     an entry's size, each followed by a sync, in two patterns: overwrite
//     of preallocated, zeroed space + fdatasync (segkv's live file) and
//     write into fallocated space + fsync (raft-wal's segments). The
//     batch-of-1 StoreLogs p50 of every store is mostly this barrier.
//
// Progress goes to stderr only when it is a terminal (and not with -q); the
// report goes to stdout, a table by default or JSON lines with -json; -plot
// FILE also draws the StoreLogs latency curves as SVG.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/segkv/segkv/bench/internal/hostinfo"
	"github.com/segkv/segkv/internal/cliout"
)

func main() {
	tty := cliout.IsTerminal(os.Stderr)
	if err := run(os.Args[1:], os.Stdout, os.Stderr, tty); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "raftbench:", err)
		os.Exit(2)
	}
}

// config is everything the flags decide.
type config struct {
	n            int
	truncate     int
	data         int
	preloadBatch int
	gets         int
	batches      []int
	duration     time.Duration
	rounds       int
	idle         time.Duration
	barriers     int
	engines      []string
	dir          string
	json         bool
	quiet        bool
	keep         bool
	plot         string
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("raftbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var batches, engineList string
	fs.IntVar(&c.n, "n", 1_000_000, "entries preloaded into the store that is then truncated")
	fs.IntVar(&c.truncate, "truncate", 990_000, "entries the head truncation deletes: DeleteRange(1, truncate); less than -n")
	fs.IntVar(&c.data, "data", 128, "bytes of each entry's Data")
	fs.IntVar(&c.preloadBatch, "preload", 1000, "entries per durable StoreLogs call of the preload")
	fs.IntVar(&c.gets, "gets", 200_000, "GetLog calls per measurement")
	fs.StringVar(&batches, "batches", "1,64", "comma-separated StoreLogs batch sizes of the append measurements")
	fs.DurationVar(&c.duration, "duration", 8*time.Second, "measured append time per engine, store (fresh, truncated) and batch size, split over -rounds")
	fs.IntVar(&c.rounds, "rounds", 8, "append rounds; each alternates the order of the engines and of the two stores")
	fs.DurationVar(&c.idle, "idle", time.Second, "pause after DeleteRange before the second disk usage sample")
	fs.IntVar(&c.barriers, "barriers", 4000, "writes per pattern of the probe of the disk's own barrier, split over -rounds (0: no probe)")
	fs.StringVar(&engineList, "engines", strings.Join(engineNames(), ","), "comma-separated engines")
	fs.StringVar(&c.dir, "dir", os.TempDir(), "parent of the run's temporary directory (must be on the disk under test)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object per line instead of the table")
	fs.BoolVar(&c.quiet, "q", false, "no progress on stderr even on a terminal")
	fs.BoolVar(&c.keep, "keep", false, "keep the stores on disk after the run")
	fs.StringVar(&c.plot, "plot", "", "write an SVG plot of StoreLogs latency by percentile to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.n < 2:
		return nil, fmt.Errorf("-n must be at least 2, got %d", c.n)
	case c.truncate < 1 || c.truncate >= c.n:
		return nil, fmt.Errorf("-truncate must be in [1, -n), got %d with -n %d", c.truncate, c.n)
	case c.data < 0:
		return nil, fmt.Errorf("-data must not be negative, got %d", c.data)
	case c.preloadBatch < 1:
		return nil, fmt.Errorf("-preload must be at least 1, got %d", c.preloadBatch)
	case c.gets < 1:
		return nil, fmt.Errorf("-gets must be at least 1, got %d", c.gets)
	case c.duration <= 0:
		return nil, fmt.Errorf("-duration must be positive, got %v", c.duration)
	case c.rounds < 1:
		return nil, fmt.Errorf("-rounds must be at least 1, got %d", c.rounds)
	case c.idle < 0:
		return nil, fmt.Errorf("-idle must not be negative, got %v", c.idle)
	case c.barriers < 0 || c.barriers > 50_000:
		return nil, fmt.Errorf("-barriers must be in [0, 50000], got %d", c.barriers)
	}
	for _, f := range hostinfo.SplitList(batches) {
		b, err := strconv.Atoi(f)
		if err != nil || b < 1 {
			return nil, fmt.Errorf("-batches: %q is not a positive integer", f)
		}
		if !contains(c.batches, b) {
			c.batches = append(c.batches, b)
		}
	}
	if len(c.batches) == 0 {
		return nil, errors.New("-batches is empty")
	}
	for _, name := range hostinfo.SplitList(engineList) {
		if _, err := lookupEngine(name); err != nil {
			return nil, err
		}
		if !contains(c.engines, name) {
			c.engines = append(c.engines, name)
		}
	}
	if len(c.engines) == 0 {
		return nil, errors.New("-engines is empty")
	}
	return c, nil
}

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// run parses args, runs the benchmark and writes the report to stdout;
// progress goes to stderr when tty says it is a terminal.
func run(args []string, stdout, stderr io.Writer, tty bool) (err error) {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBench(c, cliout.NewProgress(stderr, tty && !c.quiet))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.cleanup(stderr)) }()
	res, err := b.runAll()
	if err != nil {
		return err
	}
	if c.plot != "" {
		if err := os.WriteFile(c.plot, []byte(latencyPlot(res)), 0o644); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	if c.json {
		return writeJSON(stdout, res)
	}
	return writeTable(stdout, res)
}
