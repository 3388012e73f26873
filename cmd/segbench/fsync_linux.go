package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// fsyncRow is one barrier kind measured by the device probe.
type fsyncRow struct {
	Op     string  `json:"op"`
	N      int     `json:"n"`
	P50US  float64 `json:"p50_us"`
	P99US  float64 `json:"p99_us"`
	MeanUS float64 `json:"mean_us"`
	MinUS  float64 `json:"min_us"`
	MaxUS  float64 `json:"max_us"`
}

func (fsyncRow) Header() []string {
	return []string{"op", "n", "p50 us", "p99 us", "mean us", "min us", "max us"}
}

func (r fsyncRow) Cells() []string {
	return []string{r.Op, itoa(r.N), ftoa(r.P50US, 1), ftoa(r.P99US, 1), ftoa(r.MeanUS, 1), ftoa(r.MinUS, 1), ftoa(r.MaxUS, 1)}
}

// probe is one barrier kind: setup prepares its files, step runs iteration i
// and returns the time of the part being measured.
type probe struct {
	op    string
	setup func(dir string, n int) error
	step  func(i int) (time.Duration, error)
	close func() error
}

func runFsync(ctx context.Context, e *env, args []string) error {
	var c common
	fs := newFlagSet("fsync", e)
	c.register(fs, false)
	n := fs.Int("n", 200, "iterations of each probe")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n < 1 {
		return usagef("-n must be at least 1, not %d", *n)
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
	rows, err := fsyncProbe(ctx, ws.root, *n, e.progress())
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	p := newPrinter(e.stdout, c.json)
	if err := p.Note("segbench fsync: %d iterations of each probe, interleaved, in %s", *n, ws.desc); err != nil {
		return err
	}
	for _, r := range rows {
		if err := p.Print(r); err != nil {
			return err
		}
	}
	if err := p.Flush(); err != nil {
		return err
	}
	return ws.cleanup()
}

// fsyncProbe measures raw barriers with direct system calls rather than
// through the vfs: it describes the device, not the engine, and the vfs has
// no full fsync. The probes run interleaved, iteration by iteration, so that
// drift of the disk over the run hits all of them alike.
func fsyncProbe(ctx context.Context, dir string, n int, prog *progress) ([]fsyncRow, error) {
	block := make([]byte, 4096)
	for i := range block {
		block[i] = byte(i*7 + 1)
	}
	probes := []*probe{
		appendProbe("append 4k + fdatasync", block, unix.Fdatasync),
		appendProbe("append 4k + fsync", block, unix.Fsync),
		overwriteProbe("overwrite 4k of fallocated + fdatasync", block, true),
		overwriteProbe("overwrite 4k of written + fdatasync", block, false),
		dirSyncProbe(),
		renameProbe(block),
	}
	for k, p := range probes {
		sub := filepath.Join(dir, fmt.Sprintf("probe%d", k))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", sub, err)
		}
		if err := p.setup(sub, n); err != nil {
			return nil, fmt.Errorf("%s: setup: %w", p.op, err)
		}
		defer p.close()
	}
	samples := make([][]time.Duration, len(probes))
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for k, p := range probes {
			d, err := p.step(i)
			if err != nil {
				return nil, fmt.Errorf("%s: iteration %d: %w", p.op, i, err)
			}
			samples[k] = append(samples[k], d)
		}
		prog.Update("fsync probe: %d/%d", i+1, n)
	}
	prog.Done()
	rows := make([]fsyncRow, len(probes))
	for k, p := range probes {
		s := summarize(samples[k])
		rows[k] = fsyncRow{Op: p.op, N: s.n, P50US: us(s.p50), P99US: us(s.p99), MeanUS: us(s.mean), MinUS: us(s.min), MaxUS: us(s.max)}
	}
	return rows, nil
}

// appendProbe grows a file by 4 KiB per iteration and syncs it: the barrier
// also commits the new size (metadata), which is what makes it dearer than
// an overwrite.
func appendProbe(op string, block []byte, sync func(fd int) error) *probe {
	var f *os.File
	return &probe{
		op: op,
		setup: func(dir string, _ int) error {
			var err error
			f, err = os.OpenFile(filepath.Join(dir, "append"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			return unix.Fsync(int(f.Fd()))
		},
		step: func(i int) (time.Duration, error) {
			t0 := time.Now()
			if _, err := f.WriteAt(block, int64(i)*int64(len(block))); err != nil {
				return 0, err
			}
			err := sync(int(f.Fd()))
			return time.Since(t0), err
		},
		close: func() error { return f.Close() },
	}
}

// overwriteProbe writes 4 KiB into space that already belongs to the file,
// so the size does not change. With fallocated space ext4 still converts an
// unwritten extent to written on the first write (a journal commit);
// with space written (zeros) and synced beforehand, nothing but data moves.
func overwriteProbe(op string, block []byte, fallocate bool) *probe {
	var f *os.File
	return &probe{
		op: op,
		setup: func(dir string, n int) error {
			var err error
			f, err = os.OpenFile(filepath.Join(dir, "overwrite"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			size := int64(n) * int64(len(block))
			if fallocate {
				if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
					return fmt.Errorf("fallocate: %w", err)
				}
			} else {
				if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
					return err
				}
			}
			return unix.Fsync(int(f.Fd()))
		},
		step: func(i int) (time.Duration, error) {
			t0 := time.Now()
			if _, err := f.WriteAt(block, int64(i)*int64(len(block))); err != nil {
				return 0, err
			}
			err := unix.Fdatasync(int(f.Fd()))
			return time.Since(t0), err
		},
		close: func() error { return f.Close() },
	}
}

// dirSyncProbe creates an empty file and times the directory fsync that makes
// its entry durable.
func dirSyncProbe() *probe {
	var d *os.File
	var dir string
	return &probe{
		op: "create file, then dir fsync (timed)",
		setup: func(sub string, _ int) error {
			dir = sub
			var err error
			d, err = os.Open(dir)
			return err
		},
		step: func(i int) (time.Duration, error) {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return 0, err
			}
			if err := f.Close(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			err = unix.Fsync(int(d.Fd()))
			return time.Since(t0), err
		},
		close: func() error { return d.Close() },
	}
}

// renameProbe times the reference design's way of making one file durable:
// create a temporary file, write 4 KiB, fsync, rename, fsync the directory.
func renameProbe(block []byte) *probe {
	var d *os.File
	var dir string
	return &probe{
		op: "create+write 4k+fsync+rename+dir fsync",
		setup: func(sub string, _ int) error {
			dir = sub
			var err error
			d, err = os.Open(dir)
			return err
		},
		step: func(i int) (time.Duration, error) {
			t0 := time.Now()
			tmp := filepath.Join(dir, fmt.Sprintf("f%06d.tmp", i))
			f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return 0, err
			}
			if _, err := f.WriteAt(block, 0); err != nil {
				f.Close()
				return 0, err
			}
			if err := unix.Fsync(int(f.Fd())); err != nil {
				f.Close()
				return 0, err
			}
			if err := f.Close(); err != nil {
				return 0, err
			}
			if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("f%06d", i))); err != nil {
				return 0, err
			}
			err = unix.Fsync(int(d.Fd()))
			return time.Since(t0), err
		},
		close: func() error { return d.Close() },
	}
}
