package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// putRow is the result of one put run.
type putRow struct {
	Writers   int     `json:"writers"`
	N         int     `json:"n"`
	Sync      string  `json:"sync"` // the store's sync mode
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	P999US    float64 `json:"p999_us"`
	// fdatasyncs of files (and fsyncs of directories) per put, from the
	// counting vfs: with group commit several puts share one.
	FsyncsPerPut   float64 `json:"fsyncs_per_put"`
	DirsyncsPerPut float64 `json:"dirsyncs_per_put"`
	Seals          int64   `json:"seals"`
}

func (putRow) Header() []string {
	return []string{"writers", "n", "sync", "seconds", "ops/s", "p50 us", "p99 us", "p99.9 us", "fsyncs/put", "dirsyncs/put", "seals"}
}

func (r putRow) Cells() []string {
	return []string{itoa(r.Writers), itoa(r.N), r.Sync, ftoa(r.Seconds, 3), ftoa(r.OpsPerSec, 0), ftoa(r.P50US, 1),
		ftoa(r.P99US, 1), ftoa(r.P999US, 1), ftoa(r.FsyncsPerPut, 4), ftoa(r.DirsyncsPerPut, 4), itoa(r.Seals)}
}

func runPut(ctx context.Context, e *env, args []string) error {
	var c common
	fs := newFlagSet("put", e)
	c.register(fs, true)
	writers := fs.Int("writers", 1, "concurrent writer goroutines")
	n := fs.Int("n", 10000, "total puts, shared among the writers")
	durable := fs.Bool("sync", false, "durable puts (SyncAlways: acknowledged means fdatasynced); default SyncManual")
	segSize := fs.Int64("segment-size", 0, "Options.SegmentSize (0: the store's default)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if *writers < 1 {
		return usagef("-writers must be at least 1, not %d", *writers)
	}
	if *n < *writers {
		return usagef("-n (%d) must be at least -writers (%d)", *n, *writers)
	}
	if *segSize != 0 && *segSize < 4<<10 {
		return usagef("-segment-size must be 0 or at least 4096, not %d", *segSize)
	}
	mode := segstore.SyncManual
	if *durable {
		mode = segstore.SyncAlways
	}
	ws, err := c.open()
	if err != nil {
		return err
	}
	defer ws.cleanup()
	stop, err := c.startProfiles()
	if err != nil {
		return err
	}
	r, err := putBench(ctx, ws.newFS(), filepath.Join(ws.root, "put"), *writers, *n, mode, *segSize, e.progress())
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	p := newPrinter(e.stdout, c.json)
	if err := p.Note("segbench put: 32-byte keys, 100-byte values, in %s", ws.desc); err != nil {
		return err
	}
	if err := p.Print(r); err != nil {
		return err
	}
	if err := p.Flush(); err != nil {
		return err
	}
	return ws.cleanup()
}

// putKey fills a 32-byte key for put i of writer w: hex of a scrambled
// counter, so that keys are unique and not in insertion order.
func putKey(dst []byte, w, i int) {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], uint64(w)*0x9E3779B97F4A7C15^uint64(i)*0xBF58476D1CE4E5B9)
	binary.BigEndian.PutUint64(raw[8:], uint64(w)<<32|uint64(i))
	hex.Encode(dst, raw[:])
}

func putBench(ctx context.Context, base vfs.FS, dir string, writers, n int, mode segstore.SyncMode, segSize int64, prog *progress) (putRow, error) {
	cnt := vfs.NewCounting(base)
	st, err := segstore.Open(dir, &segstore.Options{FS: cnt, Sync: mode, SegmentSize: segSize})
	if err != nil {
		return putRow{}, fmt.Errorf("open store: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	// Let the background spare file settle first, so that opening is not
	// charged to the puts.
	waitSpare(ctx, st)
	cnt.Reset()
	seals0 := st.Metrics().Seals

	lat := make([][]time.Duration, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		share := n / writers
		if w < n%writers {
			share++
		}
		lat[w] = make([]time.Duration, 0, share)
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := make([]byte, 32)
			value := make([]byte, 100)
			for i := range value {
				value[i] = byte('a' + (i+w)%26)
			}
			for i := range share {
				if i%1024 == 0 && ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				putKey(key, w, i)
				t0 := time.Now()
				if err := st.Put(key, value); err != nil {
					errs[w] = fmt.Errorf("writer %d put %d: %w", w, i, err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
				if w == 0 && i%4096 == 0 {
					prog.Update("put: writer 0 at %d/%d", i, share)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	prog.Done()
	for _, err := range errs {
		if err != nil {
			return putRow{}, err
		}
	}
	k := cnt.Counts()
	seals := st.Metrics().Seals - seals0
	closed = true
	if err := st.Close(); err != nil {
		return putRow{}, fmt.Errorf("close store: %w", err)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	d := summarize(all)
	return putRow{
		Writers: writers, N: n, Sync: mode.String(),
		Seconds:        round(elapsed.Seconds(), 3),
		OpsPerSec:      round(float64(n)/elapsed.Seconds(), 0),
		P50US:          us(d.p50),
		P99US:          us(d.p99),
		P999US:         us(d.p999),
		FsyncsPerPut:   round(float64(k.Syncs+k.DirSyncs)/float64(n), 4),
		DirsyncsPerPut: round(float64(k.DirSyncs)/float64(n), 4),
		Seals:          seals,
	}, nil
}
