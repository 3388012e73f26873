// Command peerbench runs the same workloads against segkv and its peers
// (Pebble, goleveldb, Badger, bbolt) in one process, each on its own
// directory of the real disk, and prints a table with segkv/peer ratios and
// the brief's targets.
//
//	peerbench                         # full run: 1M keys, every workload, every engine
//	peerbench -n 100000               # quick mode for development
//	peerbench -engines segkv,pebble -workloads put1,bulk,get -json
//	peerbench -cpuprofile cpu.out     # samples carry the label phase=<engine>:<workload>
//	go tool pprof -tagfocus phase=segkv:bulk -top cpu.out
//	peerbench -engines segkv -workloads get2 -mutexprofile mu.out
//
// Workloads (32-byte keys, 100-byte values; keys are in random order):
//
//	put1    durable put, 1 writer, for -duration        (ops/s)
//	put32   durable put, -writers writers, for -duration (ops/s)
//	bulk    load -n keys in batches of -batch without sync, final sync + Close (s)
//	reopen  Open of the loaded store until the first successful Get (s)
//	get1    random Get of existing keys, 1 goroutine   (ops/s)
//	get2    random Get of existing keys, 2 goroutines  (ops/s)
//	miss1   Get of missing keys, 1 goroutine           (ops/s)
//	miss2   Get of missing keys, 2 goroutines          (ops/s)
//	scan1   forward scan of -scanlen keys from a random key, 1 goroutine  (scans/s)
//	scan2   forward scan, 2 goroutines                                     (scans/s)
//	rscan1  reverse scan of -scanlen keys below a random key, 1 goroutine (scans/s)
//	rscan2  reverse scan, 2 goroutines                                     (scans/s)
//	fscan1  forward scan over fresh data, 1 goroutine   (scans/s)
//	fscan2  forward scan over fresh data, 2 goroutines  (scans/s)
//	frscan1 reverse scan over fresh data, 1 goroutine   (scans/s)
//	scale   memory and reopen cost against the key count (not in "all": slow)
//	space   space and write amplification after puts, overwrites, deletes (not in "all": slow)
//
// The scan workloads run on the reopened loaded store after the Gets, each
// for -duration per engine. A scan is one Scan call: one iterator, one seek
// to a uniformly random existing key (forward: the first key >= it; reverse:
// the last key < it), then up to -scanlen key/value reads, each key and
// value appended to a reused buffer as a caller would. The f* workloads open
// a fresh store per engine, write -freshkeys keys in random order in
// unsynced batches of -batch, and scan it without closing it first (data in
// memtables and live files, not sealed or compacted). Every scan's count,
// first and last key and order are checked against the sorted key list (a
// short scan fails the run); untimed warm-up scans (and every scan under
// -checkscans) also check each key and value. Scan rows report scans/s as
// their ops/s and, in a column of their own, keys/s.
//
// Aliases: put = put1,put32; get = get1,get2; miss = miss1,miss2;
// scan = scan1,scan2,rscan1,rscan2; fscan = fscan1,fscan2,frscan1; all.
// reopen, get, miss and scan need the loaded store, so selecting any of them
// runs the bulk load even if bulk itself is not reported.
//
// scale runs only when named, for each key count of -scalen (1M, 20M, ...)
// and each engine: it bulk-loads a fresh store (the bulk workload's keys,
// values and batches) while sampling the Go heap every 100 ms, closes it,
// and measures the reopen in a fresh child process (this binary re-executed)
// so that the load's heap does not pollute the figures: Open, Open to the
// first Get, live heap after Open, VmRSS and VmHWM, then Gets, missing-key
// Gets and -scanlen forward scans on one goroutine (-batch, -gets, -scanlen
// and -duration apply; -n does not). It reports a table per key count, or
// -json result lines named scale/<figure> with the key count in "n". -plot
// writes an SVG of heap after Open (B/key) and Open to first Get (s) against
// the key count.
//
//	peerbench -workloads scale -scalen 1M,5M,20M -plot scale.svg
//
// space runs only when named, for each key count of -spacen (2M by
// default; the same syntax as -scalen) and each engine: it opens a fresh
// store in bulk mode and writes every key of the count (16-byte keys,
// 200-byte JSON-like values about 3x compressible) in random order, then
// every key again with a new value in another random order, then deletes
// every fourth key, in batches of -batch, unsynced but the last. It closes
// the store, reopens it and at once measures Gets of live keys and forward
// scans of -scanlen keys (1 goroutine, -duration each: "reopened"), waits
// for the engine's background work to end (segkv and Pebble can tell; at
// most -space-settle), measures the same reads again ("settled") and closes
// it. It reports the directory's size after the load and after settling,
// space amplification (disk over the live keys' key+value bytes), write
// amplification (bytes the process wrote to disk, from /proc/self/io on
// Linux, over the key+value bytes of every put plus the key bytes of every
// delete), in a table per key count with a column per engine and
// segkv/pebble, or -json result lines named space/<figure>.
//
//	peerbench -workloads space -spacen 300k,2M
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/segkv/segkv/bench/internal/hostinfo"
	"github.com/segkv/segkv/bench/peers"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == scaleChildArg {
		os.Exit(scaleChildMain(os.Args[2:]))
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(2)
	}
}

// config is everything the flags decide.
type config struct {
	n          int
	workloads  []string
	engines    []string
	json       bool
	dir        string
	duration   time.Duration
	rounds     int
	writers    int
	batch      int
	gets       int
	scanLen    int
	freshKeys  int
	checkScans bool
	keep       bool
	quiet      bool
	cpuprofile string
	mutexprof  string
	scaleN     []int  // key counts of the scale workload, ascending
	plot       string // SVG file for the scale workload's plot
	spaceN     []int  // key counts of the space workload, ascending
	// spaceSettle bounds the space workload's wait for an engine's
	// background work.
	spaceSettle time.Duration
}

var allWorkloads = []string{
	"put1", "put32", "bulk", "reopen", "get1", "get2", "miss1", "miss2",
	"scan1", "scan2", "rscan1", "rscan2", "fscan1", "fscan2", "frscan1",
}

// optionalWorkloads run only when named: "all" and the default leave them out.
var optionalWorkloads = []string{"scale", "space"}

// knownWorkloads is every workload in canonical running order.
var knownWorkloads = append(slices.Clone(allWorkloads), optionalWorkloads...)

var aliases = map[string][]string{
	"all":   allWorkloads,
	"put":   {"put1", "put32"},
	"get":   {"get1", "get2"},
	"miss":  {"miss1", "miss2"},
	"scan":  {"scan1", "scan2", "rscan1", "rscan2"},
	"fscan": {"fscan1", "fscan2", "frscan1"},
}

// aliasNames lists the aliases for messages, sorted.
func aliasNames() string {
	var names []string
	for a := range aliases {
		names = append(names, a)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var workloads, engines, scaleN, spaceN string
	fs.IntVar(&c.n, "n", 1_000_000, "keys in the bulk-loaded store (100000 is the quick mode)")
	fs.StringVar(&workloads, "workloads", "all", "comma-separated workloads: "+strings.Join(allWorkloads, ",")+" (aliases: "+aliasNames()+"), and scale and space, which run only when named")
	fs.StringVar(&engines, "engines", strings.Join(peers.Names(), ","), "comma-separated engines (segkv-raw, segkv with compression off, runs only when named)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object per line instead of the table")
	fs.StringVar(&c.dir, "dir", os.TempDir(), "parent of the run's temporary directory (must be on the disk under test)")
	fs.DurationVar(&c.duration, "duration", 4*time.Second, "measured time of each put workload per engine, split over -rounds; also of each scan workload per engine")
	fs.IntVar(&c.rounds, "rounds", 2, "put workloads run the engines in this many alternating-order rounds, so disk drift hits all alike")
	fs.IntVar(&c.writers, "writers", 32, "writers of put32")
	fs.IntVar(&c.batch, "batch", 1000, "operations per batch in bulk")
	fs.IntVar(&c.gets, "gets", 200_000, "Get calls per get/miss measurement (split over its goroutines)")
	fs.IntVar(&c.scanLen, "scanlen", 100, "keys (with their values) each scan reads")
	fs.IntVar(&c.freshKeys, "freshkeys", 200_000, "keys written to the fresh store of the fscan workloads")
	fs.BoolVar(&c.checkScans, "checkscans", false, "check every measured scan key by key and value by value (slower; warm-up scans always are)")
	fs.BoolVar(&c.keep, "keep", false, "keep the stores on disk after the run")
	fs.BoolVar(&c.quiet, "q", false, "no progress lines on stderr")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile here; samples are labelled phase=<engine>:<workload>")
	fs.StringVar(&scaleN, "scalen", "1000000", "scale: comma-separated key counts, suffixes k, M, G allowed (100k,1M,20M)")
	fs.StringVar(&c.plot, "plot", "", "scale: write an SVG plot of heap after Open (B/key) and Open to first Get (s) against the key count to this file")
	fs.StringVar(&spaceN, "spacen", "2M", "space: comma-separated key counts, suffixes k, M, G allowed (300k,2M,20M)")
	fs.DurationVar(&c.spaceSettle, "space-settle", 120*time.Second, "space: longest wait for an engine's background work after the reopened reads (a timeout is reported, not an error)")
	fs.StringVar(&c.mutexprof, "mutexprofile", "", "write a mutex contention profile here (unlabelled: narrow -engines and -workloads to attribute it)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.n < 1:
		return nil, fmt.Errorf("-n must be at least 1, got %d", c.n)
	case c.batch < 1:
		return nil, fmt.Errorf("-batch must be at least 1, got %d", c.batch)
	case c.writers < 1:
		return nil, fmt.Errorf("-writers must be at least 1, got %d", c.writers)
	case c.rounds < 1:
		return nil, fmt.Errorf("-rounds must be at least 1, got %d", c.rounds)
	case c.duration <= 0:
		return nil, fmt.Errorf("-duration must be positive, got %v", c.duration)
	case c.gets < 2:
		return nil, fmt.Errorf("-gets must be at least 2, got %d", c.gets)
	case c.scanLen < 1:
		return nil, fmt.Errorf("-scanlen must be at least 1, got %d", c.scanLen)
	case c.freshKeys < 1:
		return nil, fmt.Errorf("-freshkeys must be at least 1, got %d", c.freshKeys)
	case c.spaceSettle <= 0:
		return nil, fmt.Errorf("-space-settle must be positive, got %v", c.spaceSettle)
	}
	var err error
	if c.workloads, err = parseWorkloads(workloads); err != nil {
		return nil, err
	}
	if c.engines, err = parseEngines(engines); err != nil {
		return nil, err
	}
	if c.scaleN, err = parseCounts(scaleN); err != nil {
		return nil, fmt.Errorf("-scalen: %w", err)
	}
	if c.spaceN, err = parseCounts(spaceN); err != nil {
		return nil, fmt.Errorf("-spacen: %w", err)
	}
	if c.spaceN[len(c.spaceN)-1] > spaceMaxN {
		return nil, fmt.Errorf("-spacen: %d keys is more than the space workload's %d", c.spaceN[len(c.spaceN)-1], spaceMaxN)
	}
	if c.plot != "" && !contains(c.workloads, "scale") {
		return nil, errors.New("-plot draws the scale workload: add scale to -workloads")
	}
	return c, nil
}

// parseWorkloads expands aliases and returns the workloads in canonical
// running order, each once.
func parseWorkloads(s string) ([]string, error) {
	want := map[string]bool{}
	for _, w := range hostinfo.SplitList(s) {
		if exp, ok := aliases[w]; ok {
			for _, x := range exp {
				want[x] = true
			}
			continue
		}
		if !contains(knownWorkloads, w) {
			return nil, fmt.Errorf("unknown workload %q (have %s; aliases %s)", w, strings.Join(knownWorkloads, ", "), aliasNames())
		}
		want[w] = true
	}
	if len(want) == 0 {
		return nil, errors.New("-workloads is empty")
	}
	var out []string
	for _, w := range knownWorkloads {
		if want[w] {
			out = append(out, w)
		}
	}
	return out, nil
}

func parseEngines(s string) ([]string, error) {
	var out []string
	for _, e := range hostinfo.SplitList(s) {
		if _, err := peers.Lookup(e); err != nil {
			return nil, err
		}
		if !contains(out, e) {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-engines is empty")
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func run(args []string, stdout, stderr io.Writer) (err error) {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return errors.Join(err, f.Close())
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	if c.mutexprof != "" {
		// Sample every contention event: the run is short, and a low rate
		// would miss the lock a read path takes once per Get.
		runtime.SetMutexProfileFraction(1)
		defer func() { err = errors.Join(err, writeProfile("mutex", c.mutexprof)) }()
	}
	b, err := newBench(c, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.cleanup()) }()
	res, err := b.runAll(context.Background())
	if err != nil {
		return err
	}
	if c.plot != "" {
		if err := os.WriteFile(c.plot, []byte(scalePlot(res)), 0o644); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
		b.progress("plot written to %s", c.plot)
	}
	if c.json {
		return writeJSON(stdout, res)
	}
	return writeTable(stdout, res)
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
}
