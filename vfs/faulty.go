package vfs

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
)

// ErrInjected is matched (errors.Is) by every error a Faulty injects,
// including its ENOSPC errors, which match syscall.ENOSPC as well.
var ErrInjected = errors.New("vfs: injected fault")

// Op names a kind of operation Faulty can fail.
type Op int

const (
	OpFileSync    Op = iota // File.Sync
	OpDirSync               // FS.SyncDir
	OpAnySync               // File.Sync or FS.SyncDir, counted together
	OpWrite                 // File.WriteAt
	OpRename                // FS.Rename
	OpRemove                // FS.Remove
	OpCreate                // FS.Create
	OpTruncate              // File.Truncate
	OpPreallocate           // File.Preallocate
	OpRead                  // File.ReadAt
	OpOpen                  // FS.Open and FS.OpenReadWrite
	numOps
)

var opNames = [numOps]string{"file-sync", "dir-sync", "any-sync", "write", "rename", "remove", "create", "truncate", "preallocate", "read", "open"}

func (o Op) String() string {
	if o >= 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Fault describes one injected failure.
type Fault struct {
	Op Op
	// Nth selects the failing operation: 1 is the next matching operation
	// after Inject, 2 the one after it, and so on.
	Nth int64
	// Persistent makes every matching operation after the Nth fail too;
	// otherwise the fault fires once and is gone.
	Persistent bool
	// Match, if set, restricts the fault to operations on paths for which it
	// returns true (for Rename: either path). Operations it rejects do not
	// count towards Nth.
	Match func(path string) bool
	// Short applies to OpRead only: instead of failing outright, the read
	// returns the first half of the bytes asked for (rounded down, so
	// possibly none) and an error matching both io.ErrUnexpectedEOF and
	// ErrInjected. It models a device that returns less than was asked,
	// which a reader must not mistake for the end of the file.
	Short bool
}

// FaultStats are Faulty's counters since NewFaulty.
type FaultStats struct {
	Seen     map[Op]int64 // operations that reached Faulty, by kind
	Injected map[Op]int64 // failures injected by Fault rules, by kind
	ENOSPC   int64        // writes and preallocations refused for space
	Dropped  int64        // failed syncs that dropped the file's unsynced data (Linux mode)
}

// Total is the number of faults injected, ENOSPC included.
func (s FaultStats) Total() int64 {
	n := s.ENOSPC
	for o, k := range s.Injected {
		if o != OpAnySync { // already counted under the file or dir kind
			n += k
		}
	}
	return n
}

// Faulty wraps an FS and fails operations on demand. Faults can be added or
// cleared at any time from any goroutine; operations the rules do not select
// go to the inner FS unchanged. An injected failure does not reach the inner
// FS at all (nothing is written, renamed or synced), except as described for
// ENOSPC and the Linux fsync mode.
type Faulty struct {
	inner FS

	mu         sync.Mutex
	rules      []*rule
	spaceLeft  int64 // bytes that may still be written; < 0: unlimited
	linuxFsync bool
	seen       [numOps]int64
	injected   [numOps]int64
	enospc     int64
	dropped    int64
}

type rule struct {
	Fault
	count int64 // matching operations seen so far
}

// NewFaulty wraps inner with no faults armed.
func NewFaulty(inner FS) *Faulty { return &Faulty{inner: inner, spaceLeft: -1} }

// Inject arms a fault. It refuses an unknown Op or an Nth below 1.
func (f *Faulty) Inject(ft Fault) error {
	if ft.Op < 0 || ft.Op >= numOps {
		return fmt.Errorf("vfs: inject: unknown op %v", ft.Op)
	}
	if ft.Nth < 1 {
		return fmt.Errorf("vfs: inject: Nth must be >= 1, got %d", ft.Nth)
	}
	if ft.Short && ft.Op != OpRead {
		return fmt.Errorf("vfs: inject: Short applies to %v only, not %v", OpRead, ft.Op)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &rule{Fault: ft})
	return nil
}

// FailNth is Inject(Fault{Op: op, Nth: n, Persistent: persistent}).
func (f *Faulty) FailNth(op Op, n int64, persistent bool) error {
	return f.Inject(Fault{Op: op, Nth: n, Persistent: persistent})
}

// SetSpaceLimit lets n more bytes be written (counted from this call), after
// which writes fail with ENOSPC: a write that crosses the limit writes the
// bytes that fit and returns the short count with ENOSPC, as write(2) does.
// A Preallocate fails whole with ENOSPC when the growth it asks for exceeds
// what is left, and otherwise uses it up. n < 0 removes the limit (space has
// returned).
func (f *Faulty) SetSpaceLimit(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spaceLeft = max(n, -1)
}

// SetLinuxFsync turns on the Linux fsync behaviour: a file sync that fails
// by injection also drops the file's unsynced data (if the inner File has a
// DropUnsynced method, as Mem's and Counting's do), and the next Sync on the
// same handle is passed through without consulting the rules, so it
// reports success. A caller that retries a failed fsync thus "succeeds"
// while its data is gone: exactly the trap the engine must not fall into.
func (f *Faulty) SetLinuxFsync(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.linuxFsync = on
}

// Clear disarms every fault and removes the space limit. Counters and the
// Linux fsync setting are kept.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
	f.spaceLeft = -1
}

// Stats returns a copy of the counters.
func (f *Faulty) Stats() FaultStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := FaultStats{Seen: map[Op]int64{}, Injected: map[Op]int64{}, ENOSPC: f.enospc, Dropped: f.dropped}
	for o := range numOps {
		if f.seen[o] != 0 {
			s.Seen[o] = f.seen[o]
		}
		if f.injected[o] != 0 {
			s.Injected[o] = f.injected[o]
		}
	}
	return s
}

// check counts one operation of kind op on paths and reports the injected
// error if a rule selects it.
func (f *Faulty) check(op Op, paths ...string) error {
	_, err := f.checkShort(op, paths...)
	return err
}

// checkShort is check that also reports whether the rule that fired asked
// for a short read rather than a failed one.
func (f *Faulty) checkShort(op Op, paths ...string) (short bool, err error) {
	kinds := []Op{op}
	if op == OpFileSync || op == OpDirSync {
		kinds = append(kinds, OpAnySync)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := false
	for _, k := range kinds {
		f.seen[k]++
	}
	kept := f.rules[:0]
	for _, r := range f.rules {
		if !r.selects(kinds, paths) {
			kept = append(kept, r)
			continue
		}
		r.count++
		switch {
		case r.count == r.Nth:
			fail, short = true, short || r.Short
			if r.Persistent {
				kept = append(kept, r)
			}
		case r.count > r.Nth: // only persistent rules are still here
			fail, short = true, short || r.Short
			kept = append(kept, r)
		default:
			kept = append(kept, r)
		}
	}
	clear(f.rules[len(kept):])
	f.rules = kept
	if !fail {
		return false, nil
	}
	for _, k := range kinds {
		f.injected[k]++
	}
	if short {
		return true, fmt.Errorf("vfs: short %s %s: %w (%w)", op, strings.Join(paths, " "), io.ErrUnexpectedEOF, ErrInjected)
	}
	return false, fmt.Errorf("vfs: %s %s: %w", op, strings.Join(paths, " "), ErrInjected)
}

func (r *rule) selects(kinds []Op, paths []string) bool {
	hit := false
	for _, k := range kinds {
		hit = hit || r.Op == k
	}
	if !hit || r.Match == nil {
		return hit
	}
	for _, p := range paths {
		if r.Match(p) {
			return true
		}
	}
	return false
}

// errNoSpace is the injected ENOSPC.
type errNoSpace struct{ op, path string }

func (e *errNoSpace) Error() string {
	return fmt.Sprintf("vfs: %s %s: %v (injected)", e.op, e.path, syscall.ENOSPC)
}

func (e *errNoSpace) Unwrap() []error { return []error{syscall.ENOSPC, ErrInjected} }

// reserve takes up to want bytes of space; all means nothing less will do.
func (f *Faulty) reserve(want int64, all bool) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.spaceLeft < 0 {
		return want
	}
	got := min(want, f.spaceLeft)
	if got < want && all {
		got = 0
	}
	f.spaceLeft -= got
	if got < want {
		f.enospc++
	}
	return got
}

func (f *Faulty) Create(name string) (File, error) {
	if err := f.check(OpCreate, name); err != nil {
		return nil, err
	}
	inner, err := f.inner.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: inner, f: f}, nil
}

func (f *Faulty) Open(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	inner, err := f.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: inner, f: f}, nil
}

func (f *Faulty) OpenReadWrite(name string) (File, error) {
	if err := f.check(OpOpen, name); err != nil {
		return nil, err
	}
	inner, err := f.inner.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: inner, f: f}, nil
}

func (f *Faulty) Remove(name string) error {
	if err := f.check(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.check(OpRename, oldname, newname); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

func (f *Faulty) List(dir string) ([]string, error) { return f.inner.List(dir) }

func (f *Faulty) Stat(name string) (int64, error) { return f.inner.Stat(name) }

func (f *Faulty) MkdirAll(dir string) error { return f.inner.MkdirAll(dir) }

func (f *Faulty) Lock(name string) (io.Closer, error) { return f.inner.Lock(name) }

func (f *Faulty) SyncDir(dir string) error {
	if err := f.check(OpDirSync, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

type faultyFile struct {
	File
	f *Faulty

	mu        sync.Mutex
	cleanNext bool // Linux mode: the sync after a failed one reports success
}

// ReadAt fails, or returns a short read, when a rule selects it. A faulty
// file never offers a memory mapping (it does not implement Mapper), so
// every read of the engine goes through here and can be failed.
func (ff *faultyFile) ReadAt(b []byte, off int64) (int, error) {
	short, err := ff.f.checkShort(OpRead, ff.Name())
	if err == nil {
		return ff.File.ReadAt(b, off)
	}
	if !short {
		return 0, err
	}
	n, rerr := ff.File.ReadAt(b[:len(b)/2], off)
	if rerr != nil {
		return n, rerr
	}
	return n, err
}

func (ff *faultyFile) WriteAt(b []byte, off int64) (int, error) {
	if err := ff.f.check(OpWrite, ff.Name()); err != nil {
		return 0, err
	}
	fit := ff.f.reserve(int64(len(b)), false)
	if fit == int64(len(b)) {
		return ff.File.WriteAt(b, off)
	}
	n, err := 0, error(nil)
	if fit > 0 {
		n, err = ff.File.WriteAt(b[:fit], off)
	}
	if err == nil {
		err = &errNoSpace{op: "write", path: ff.Name()}
	}
	return n, err
}

func (ff *faultyFile) Truncate(size int64) error {
	if err := ff.f.check(OpTruncate, ff.Name()); err != nil {
		return err
	}
	return ff.File.Truncate(size)
}

func (ff *faultyFile) Preallocate(off, length int64) error {
	if err := ff.f.check(OpPreallocate, ff.Name()); err != nil {
		return err
	}
	size, err := ff.File.Size()
	if err != nil {
		return err
	}
	if grow := off + length - size; grow > 0 && ff.f.reserve(grow, true) == 0 {
		return &errNoSpace{op: "preallocate", path: ff.Name()}
	}
	return ff.File.Preallocate(off, length)
}

func (ff *faultyFile) Sync() error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.cleanNext {
		ff.cleanNext = false
		ff.f.mu.Lock()
		ff.f.seen[OpFileSync]++
		ff.f.seen[OpAnySync]++
		ff.f.mu.Unlock()
		return ff.File.Sync()
	}
	err := ff.f.check(OpFileSync, ff.Name())
	if err == nil {
		return ff.File.Sync()
	}
	ff.f.mu.Lock()
	linux := ff.f.linuxFsync
	if linux {
		ff.f.dropped++
	}
	ff.f.mu.Unlock()
	if linux {
		dropUnsynced(ff.File)
		ff.cleanNext = true
	}
	return err
}

// DropUnsynced forwards to the inner file, so that wrappers can be stacked.
func (ff *faultyFile) DropUnsynced() { dropUnsynced(ff.File) }

var _ FS = (*Faulty)(nil)
