package vfs

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"strings"
	"sync"
)

// Counts are the operations a Counting has passed to its inner FS since it
// was made or last Reset. Every call is counted, failed ones included: a
// failed fsync is still a barrier that was paid for (strace counts it too).
// Map keys are paths as the caller passed them.
type Counts struct {
	Syncs        int64 // File.Sync
	DirSyncs     int64 // FS.SyncDir (MkdirAll's own directory syncs are not seen here)
	Renames      int64
	Creates      int64
	Removes      int64
	Writes       int64 // File.WriteAt calls
	Truncates    int64
	Preallocates int64
	Mkdirs       int64 // FS.MkdirAll calls
	BytesWritten map[string]int64
	SyncsByFile  map[string]int64
}

// Counting is an FS that counts what passes through it and can record an
// operation log for golden tests. It is safe for concurrent use.
type Counting struct {
	inner FS

	mu      sync.Mutex
	c       Counts
	logging bool
	log     []string
	base    string
}

// NewCounting wraps inner.
func NewCounting(inner FS) *Counting {
	c := &Counting{inner: inner}
	c.Reset()
	return c
}

// Counts returns a copy of the counts.
func (c *Counting) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.c
	out.BytesWritten = maps.Clone(c.c.BytesWritten)
	out.SyncsByFile = maps.Clone(c.c.SyncsByFile)
	return out
}

// Reset sets every count to zero. It does not affect the op log.
func (c *Counting) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c = Counts{BytesWritten: map[string]int64{}, SyncsByFile: map[string]int64{}}
}

// SetLogBase makes the op log name paths relative to dir (paths outside it
// are logged as given), so golden files do not depend on where a test ran.
// An empty dir logs paths as given.
func (c *Counting) SetLogBase(dir string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = dir
}

// StartLog discards any previous log and starts recording. Each mutating
// operation and barrier becomes one line, in the order the operations
// completed: "create P", "write P off=O len=N", "prealloc P off=O len=N",
// "truncate P size=N", "sync P", "syncdir D", "rename A B", "remove P",
// "mkdirall D", "lock P". A failed operation gets " (error)" appended.
// Opens, reads, Size, Stat, List and Close are not logged.
func (c *Counting) StartLog() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logging = true
	c.log = nil
}

// StopLog stops recording and returns the lines recorded since StartLog.
func (c *Counting) StopLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.logging = false
	out := c.log
	c.log = nil
	return out
}

// rel is called with c.mu held.
func (c *Counting) rel(p string) string {
	if c.base == "" {
		return p
	}
	r, err := filepath.Rel(c.base, p)
	if err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return p
	}
	return r
}

// record updates the counts with fn and logs one line; paths in args are
// made relative to the log base. Called after the operation completed.
func (c *Counting) record(err error, fn func(*Counts), format string, paths []string, rest ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fn != nil {
		fn(&c.c)
	}
	if !c.logging {
		return
	}
	args := make([]any, 0, len(paths)+len(rest))
	for _, p := range paths {
		args = append(args, c.rel(p))
	}
	line := fmt.Sprintf(format, append(args, rest...)...)
	if err != nil {
		line += " (error)"
	}
	c.log = append(c.log, line)
}

func (c *Counting) Create(name string) (File, error) {
	f, err := c.inner.Create(name)
	c.record(err, func(k *Counts) { k.Creates++ }, "create %s", []string{name})
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, c: c}, nil
}

func (c *Counting) Open(name string) (File, error) {
	f, err := c.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, c: c}, nil
}

func (c *Counting) OpenReadWrite(name string) (File, error) {
	f, err := c.inner.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, c: c}, nil
}

func (c *Counting) Remove(name string) error {
	err := c.inner.Remove(name)
	c.record(err, func(k *Counts) { k.Removes++ }, "remove %s", []string{name})
	return err
}

func (c *Counting) Rename(oldname, newname string) error {
	err := c.inner.Rename(oldname, newname)
	c.record(err, func(k *Counts) { k.Renames++ }, "rename %s %s", []string{oldname, newname})
	return err
}

func (c *Counting) List(dir string) ([]string, error) { return c.inner.List(dir) }

func (c *Counting) Stat(name string) (int64, error) { return c.inner.Stat(name) }

func (c *Counting) MkdirAll(dir string) error {
	err := c.inner.MkdirAll(dir)
	c.record(err, func(k *Counts) { k.Mkdirs++ }, "mkdirall %s", []string{dir})
	return err
}

func (c *Counting) Lock(name string) (io.Closer, error) {
	l, err := c.inner.Lock(name)
	c.record(err, nil, "lock %s", []string{name})
	return l, err
}

func (c *Counting) SyncDir(dir string) error {
	err := c.inner.SyncDir(dir)
	c.record(err, func(k *Counts) { k.DirSyncs++ }, "syncdir %s", []string{dir})
	return err
}

type countingFile struct {
	File
	c *Counting
}

func (f *countingFile) WriteAt(b []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(b, off)
	name := f.Name()
	f.c.record(err, func(k *Counts) {
		k.Writes++
		k.BytesWritten[name] += int64(n)
	}, "write %s off=%d len=%d", []string{name}, off, len(b))
	return n, err
}

func (f *countingFile) Sync() error {
	err := f.File.Sync()
	name := f.Name()
	f.c.record(err, func(k *Counts) {
		k.Syncs++
		k.SyncsByFile[name]++
	}, "sync %s", []string{name})
	return err
}

func (f *countingFile) Truncate(size int64) error {
	err := f.File.Truncate(size)
	f.c.record(err, func(k *Counts) { k.Truncates++ }, "truncate %s size=%d", []string{f.Name()}, size)
	return err
}

func (f *countingFile) Preallocate(off, length int64) error {
	err := f.File.Preallocate(off, length)
	f.c.record(err, func(k *Counts) { k.Preallocates++ }, "prealloc %s off=%d len=%d", []string{f.Name()}, off, length)
	return err
}

// DropUnsynced forwards to the inner file, so that Faulty's Linux fsync
// mode works through a Counting.
func (f *countingFile) DropUnsynced() { dropUnsynced(f.File) }

// dropUnsynced asks f to forget its unsynced data, if it can.
func dropUnsynced(f File) {
	if d, ok := f.(interface{ DropUnsynced() }); ok {
		d.DropUnsynced()
	}
}

var _ FS = (*Counting)(nil)
