package main

import (
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/segkv/segkv/vfs"
)

// opCounts are barrier counts of one class of caller.
type opCounts struct {
	Syncs    int64 // File.Sync (fdatasync)
	DirSyncs int64 // FS.SyncDir (fsync of a directory)
	Renames  int64
	Creates  int64
}

func (a opCounts) sub(b opCounts) opCounts {
	return opCounts{a.Syncs - b.Syncs, a.DirSyncs - b.DirSyncs, a.Renames - b.Renames, a.Creates - b.Creates}
}

func (a opCounts) add(b opCounts) opCounts {
	return opCounts{a.Syncs + b.Syncs, a.DirSyncs + b.DirSyncs, a.Renames + b.Renames, a.Creates + b.Creates}
}

// fsyncs is what strace counts as fsync plus fdatasync: file and directory
// syncs alike.
func (a opCounts) fsyncs() int64 { return a.Syncs + a.DirSyncs }

type atomicCounts struct{ syncs, dirSyncs, renames, creates atomic.Int64 }

func (a *atomicCounts) load() opCounts {
	return opCounts{a.syncs.Load(), a.dirSyncs.Load(), a.renames.Load(), a.creates.Load()}
}

// classifyFS splits the barriers a store issues into those of its background
// goroutine and all others. The store starts making the next live file in
// the background while a seal is still running, so a counter read before
// and after Seal would charge that spare file's fsync and directory fsync to
// the seal. Here an operation is background work when the calling
// goroutine's stack runs through segstore's background type; everything else
// is on a caller's path (a seal waits for whatever it delegates).
//
// It sits above the counting vfs, whose totals remain the reference: the
// seal benchmark checks, step by step, that the two classes here add up to
// what the counting vfs saw.
type classifyFS struct {
	vfs.FS
	fg, bg atomicCounts
}

func newClassifyFS(inner vfs.FS) *classifyFS { return &classifyFS{FS: inner} }

// bgFramePrefix is the function-name prefix of segstore's background
// goroutine.
const bgFramePrefix = "github.com/segkv/segkv/segstore.(*background)."

func (c *classifyFS) class() *atomicCounts {
	var pcs [64]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, bgFramePrefix) {
			return &c.bg
		}
		if !more {
			return &c.fg
		}
	}
}

// Foreground and Background return the counts so far.
func (c *classifyFS) Foreground() opCounts { return c.fg.load() }
func (c *classifyFS) Background() opCounts { return c.bg.load() }

func (c *classifyFS) Create(name string) (vfs.File, error) {
	c.class().creates.Add(1)
	f, err := c.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &classifyFile{File: f, c: c}, nil
}

func (c *classifyFS) Open(name string) (vfs.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &classifyFile{File: f, c: c}, nil
}

func (c *classifyFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := c.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &classifyFile{File: f, c: c}, nil
}

func (c *classifyFS) Rename(oldname, newname string) error {
	c.class().renames.Add(1)
	return c.FS.Rename(oldname, newname)
}

func (c *classifyFS) SyncDir(dir string) error {
	c.class().dirSyncs.Add(1)
	return c.FS.SyncDir(dir)
}

type classifyFile struct {
	vfs.File
	c *classifyFS
}

func (f *classifyFile) Sync() error {
	f.c.class().syncs.Add(1)
	return f.File.Sync()
}
