package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/segkv/segkv/bench/peers"
)

// scanSpec is one scan workload.
type scanSpec struct {
	workload string
	workers  int
	reverse  bool
}

// sealedScans run on the reopened loaded store, freshScans on a store
// written in the same process and never closed.
var (
	sealedScans = []scanSpec{{"scan1", 1, false}, {"scan2", 2, false}, {"rscan1", 1, true}, {"rscan2", 2, true}}
	freshScans  = []scanSpec{{"fscan1", 1, false}, {"fscan2", 2, false}, {"frscan1", 1, true}}
)

func isFresh(workload string) bool {
	return slices.ContainsFunc(freshScans, func(s scanSpec) bool { return s.workload == workload })
}

// keySpace is the key numbers [0, n) in key order: a uniformly random start
// is a random rank, and the rank tells what a scan from it must return.
type keySpace struct{ order []uint64 }

func newKeySpace(n int) *keySpace { return &keySpace{order: peers.KeyOrder(n)} }

func (b *bench) loadedKeySpace() *keySpace {
	if b.loadedKeys == nil {
		b.loadedKeys = newKeySpace(b.c.n)
	}
	return b.loadedKeys
}

func (b *bench) freshKeySpace() *keySpace {
	if b.freshKeys == nil {
		b.freshKeys = newKeySpace(b.c.freshKeys)
	}
	return b.freshKeys
}

// scans runs the selected workloads of specs on db, which holds exactly the
// keys of ks, after an untimed warm-up that checks every key and value (and
// lets the engine fill its caches the way a service scanning would have
// them). Each workload runs for -duration.
func (b *bench) scans(ctx context.Context, name string, db peers.DB, ks func() *keySpace, specs []scanSpec) ([]result, error) {
	var run []scanSpec
	for _, s := range specs {
		if contains(b.c.workloads, s.workload) {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		return nil, nil
	}
	space := ks()
	limit := b.c.scanLen
	if err := labelled(ctx, name, "warmup", func(context.Context) error {
		for _, reverse := range []bool{false, true} {
			if _, err := scanFor(db, space, limit, 2, reverse, b.c.duration/8, true, 99); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("scan warm-up: %w", err)
	}
	var rows []result
	for _, s := range run {
		var st scanStats
		err := labelled(ctx, name, s.workload, func(context.Context) error {
			var err error
			st, err = scanFor(db, space, limit, s.workers, s.reverse, b.c.duration, b.c.checkScans, uint64(100+slices.Index(allWorkloads, s.workload)))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.workload, err)
		}
		secs := st.elapsed.Seconds()
		r := result{Workload: s.workload, Engine: name, Unit: "ops/s", Ops: st.scans, Seconds: secs,
			Value: float64(st.scans) / secs, Keys: st.keys, KeysPerS: float64(st.keys) / secs}
		b.progress("%-6s %-9s %8.0f scans/s %10.0f keys/s (%.1f keys/scan)", s.workload, name, r.Value, r.KeysPerS, float64(st.keys)/float64(st.scans))
		rows = append(rows, r)
	}
	return rows, nil
}

// fresh opens a fresh store, writes -freshkeys keys in unsynced batches and,
// without closing it, runs the fresh-data scan workloads on it.
func (b *bench) fresh(ctx context.Context, name string) (rows []result, err error) {
	dir := filepath.Join(b.root, "fresh", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var db peers.DB
	err = labelled(ctx, name, "freshload", func(context.Context) error {
		var err error
		if db, err = b.engine[name].Open(dir, peers.Bulk); err != nil {
			return err
		}
		w := newBatchWriter(b.c.batch)
		start := time.Now()
		if err := w.write(db, uint64(b.c.freshKeys), false); err != nil {
			err = errors.Join(err, db.Close())
			db = nil
			return err
		}
		b.progress("%-6s %-9s %d keys in %.2f s, unsynced, store left open", "fresh", name, b.c.freshKeys, time.Since(start).Seconds())
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, db.Close())
		if !b.c.keep {
			err = errors.Join(err, os.RemoveAll(dir))
		}
	}()
	return b.scans(ctx, name, db, b.freshKeySpace, freshScans)
}

type scanStats struct {
	scans, keys int64
	elapsed     time.Duration
}

// scanFor runs workers goroutines that each scan from uniformly random
// existing keys until d has passed (at least one scan each), checking every
// scan with a scanChecker, and returns the scans done, the keys they visited
// and the wall time.
func scanFor(db peers.DB, ks *keySpace, limit, workers int, reverse bool, d time.Duration, exact bool, seed uint64) (scanStats, error) {
	var (
		wg    sync.WaitGroup
		errs  = make([]error, workers)
		stats = make([]scanStats, workers)
		start = time.Now()
		stop  = start.Add(d)
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			c := newScanChecker(ks, limit, reverse, exact)
			visit := c.visit // one method value per goroutine, not per scan
			var sb [peers.KeySize]byte
			for {
				rank := rng.IntN(len(ks.order))
				c.begin(rank)
				got, err := db.Scan(peers.Key(sb[:], ks.order[rank]), limit, reverse, visit)
				if err == nil {
					err = c.end(got)
				}
				if err != nil {
					errs[w] = fmt.Errorf("scan from key number %d (rank %d of %d, reverse=%v): %w", ks.order[rank], rank, len(ks.order), reverse, err)
					return
				}
				stats[w].scans++
				stats[w].keys += int64(got)
				if !time.Now().Before(stop) {
					return
				}
			}
		}()
	}
	wg.Wait()
	total := scanStats{elapsed: time.Since(start)}
	for _, s := range stats {
		total.scans += s.scans
		total.keys += s.keys
	}
	return total, errors.Join(errs...)
}

// scanChecker is the caller side of one goroutine's scans. It copies each
// key and value into reused buffers, as a caller consuming the scan would,
// and checks the scan against the key space: the first key, strict order,
// value size, and at the end the count and the last key, so a short,
// misplaced or unordered scan fails the run. With exact it also checks
// every key and value.
type scanChecker struct {
	ks      *keySpace
	limit   int
	reverse bool
	exact   bool

	key, value []byte // the last key and value visited
	want       []byte // scratch for the expected key
	wantVal    []byte // scratch for the expected value (exact only)
	rank       int    // rank the next key must have
	first      int    // rank of the first key, or -1 if none is due
	count      int    // keys that should be visited
	seen       int
	err        error
}

func newScanChecker(ks *keySpace, limit int, reverse, exact bool) *scanChecker {
	return &scanChecker{
		ks: ks, limit: limit, reverse: reverse, exact: exact,
		key: make([]byte, 0, peers.KeySize), value: make([]byte, 0, peers.ValueSize),
		want: make([]byte, peers.KeySize), wantVal: make([]byte, peers.ValueSize),
	}
}

// begin prepares for a scan from the key of the given rank: forward it must
// visit ranks rank, rank+1, ...; reverse rank-1, rank-2, ... (keys < start).
func (c *scanChecker) begin(rank int) {
	n := len(c.ks.order)
	c.seen, c.err = 0, nil
	if c.reverse {
		c.rank, c.count = rank-1, min(c.limit, rank)
	} else {
		c.rank, c.count = rank, min(c.limit, n-rank)
	}
	c.first = c.rank
	if c.count == 0 {
		c.first = -1
	}
}

func (c *scanChecker) visit(k, v []byte) {
	if c.err == nil {
		c.err = c.check(k, v)
	}
	c.key = append(c.key[:0], k...)
	c.value = append(c.value[:0], v...)
	c.seen++
	if c.reverse {
		c.rank--
	} else {
		c.rank++
	}
}

func (c *scanChecker) check(k, v []byte) error {
	if c.seen >= c.count {
		return fmt.Errorf("key %d (%q) is past the %d expected", c.seen+1, k, c.count)
	}
	if len(v) != peers.ValueSize {
		return fmt.Errorf("key %q: value of %d bytes, want %d", k, len(v), peers.ValueSize)
	}
	switch {
	case c.exact || c.seen == 0:
		i := c.ks.order[c.rank]
		if want := peers.Key(c.want, i); !bytes.Equal(k, want) {
			return fmt.Errorf("key %d is %q, want %q", c.seen+1, k, want)
		}
		if c.exact && !bytes.Equal(v, peers.Value(c.wantVal, i)) {
			return fmt.Errorf("key %q: wrong value", k)
		}
	case c.reverse && bytes.Compare(k, c.key) >= 0, !c.reverse && bytes.Compare(k, c.key) <= 0:
		return fmt.Errorf("key %d (%q) out of order after %q", c.seen+1, k, c.key)
	}
	return nil
}

// end checks the scan's outcome: Scan returned got.
func (c *scanChecker) end(got int) error {
	switch {
	case c.err != nil:
		return c.err
	case got != c.seen:
		return fmt.Errorf("the scan returned %d but visited %d keys", got, c.seen)
	case got != c.count:
		return fmt.Errorf("visited %d keys, want %d", got, c.count)
	case got > 0:
		last := c.first + got - 1
		if c.reverse {
			last = c.first - got + 1
		}
		if want := peers.Key(c.want, c.ks.order[last]); !bytes.Equal(c.key, want) {
			return fmt.Errorf("last key %q, want %q", c.key, want)
		}
	}
	return nil
}
