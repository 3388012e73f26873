package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"

	"github.com/segkv/segkv/internal/cliout"
	"github.com/segkv/segkv/vfs"
)

// common holds the flags every subcommand takes.
type common struct {
	dir        string
	json       bool
	cpuprofile string
	trace      string
	keep       bool
	fs         string
}

func (c *common) register(fs *flag.FlagSet, withFS bool) {
	fs.StringVar(&c.dir, "dir", "", "parent of the temporary work directory (default: the system temp dir, on the real disk)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object per row instead of a table")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile to this file")
	fs.StringVar(&c.trace, "trace", "", "write a runtime execution trace to this file")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory instead of removing it")
	if withFS {
		fs.StringVar(&c.fs, "fs", "os", "file system: os (the real disk) or mem (in memory: measures CPU, not the disk)")
	}
}

// parseFlags parses args into fs (cliout.ParseFlags: -h is errHelp,
// anything else wrong a usageError) and refuses positional arguments, so
// that a typo is never silently ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := cliout.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func newFlagSet(name string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet("segbench "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

func (c *common) validate() error {
	switch c.fs {
	case "", "os", "mem":
	default:
		return usagef("-fs must be os or mem, not %q", c.fs)
	}
	return nil
}

// workspace is where a subcommand runs: a fresh directory on the chosen file
// system, removed by cleanup.
type workspace struct {
	root    string
	newFS   func() vfs.FS // a fresh handle on the same file system
	desc    string        // what the file system is, for the table header
	cleanup func() error
	// mkdir creates a directory under root without any barrier, as the
	// root itself was made: vfs.OS.MkdirAll fsyncs parents behind the
	// counting vfs's back, and strace would see barriers the rows do not.
	mkdir func(dir string) error
}

// open makes the work directory. On the OS file system it is a new temporary
// directory under -dir (default os.TempDir()); in memory a fixed path.
func (c *common) open() (*workspace, error) {
	if c.fs == "mem" {
		mem := vfs.NewMem()
		root := "/segbench"
		if err := mem.MkdirAll(root); err != nil {
			return nil, fmt.Errorf("create %s in memory: %w", root, err)
		}
		// One Mem shared by every handle: a Mem is a whole file system.
		return &workspace{root: root, newFS: func() vfs.FS { return mem }, desc: "memory (-fs mem)",
			cleanup: func() error { return nil }, mkdir: mem.MkdirAll}, nil
	}
	parent := c.dir
	if parent == "" {
		parent = os.TempDir()
	}
	root, err := os.MkdirTemp(parent, "segbench-")
	if err != nil {
		return nil, fmt.Errorf("create work directory: %w", err)
	}
	ws := &workspace{
		root:  root,
		newFS: func() vfs.FS { return vfs.NewOS() },
		desc:  root + " (" + fsType(root) + ")",
		mkdir: func(dir string) error { return os.Mkdir(dir, 0o755) },
		cleanup: func() error {
			if c.keep {
				return nil
			}
			if err := os.RemoveAll(root); err != nil {
				return fmt.Errorf("remove work directory: %w", err)
			}
			return nil
		},
	}
	if c.keep {
		ws.desc += ", kept"
	}
	return ws, nil
}

// startProfiles starts the CPU profile and execution trace asked for; the
// returned function stops them.
func (c *common) startProfiles() (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(errs...)
	}
	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return nil, fmt.Errorf("create CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("start CPU profile: %w", err)
		}
		stops = append(stops, func() error { pprof.StopCPUProfile(); return f.Close() })
	}
	if c.trace != "" {
		f, err := os.Create(c.trace)
		if err != nil {
			stop()
			return nil, fmt.Errorf("create trace: %w", err)
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			stop()
			return nil, fmt.Errorf("start trace: %w", err)
		}
		stops = append(stops, func() error { trace.Stop(); return f.Close() })
	}
	return stop, nil
}

// row, printer and progress are the tools' shared output (internal/cliout).
type (
	row      = cliout.Row
	printer  = cliout.Printer
	progress = cliout.Progress
)

func newPrinter(w io.Writer, asJSON bool) *printer { return cliout.NewPrinter(w, asJSON) }

func (e *env) progress() *progress { return cliout.NewProgress(e.stderr, e.tty) }

// isManifest says whether a file name (or path) is a manifest of either
// protocol.
func isManifest(name string) bool {
	return strings.HasPrefix(filepath.Base(name), "MANIFEST")
}
