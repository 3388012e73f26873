package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"sort"
	"sync"
	"syscall"
)

// ErrCrashed is returned by every operation on a file handle or lock that
// was open when Mem.Crash simulated a power loss: the process that owned it
// is, in the model, gone.
var ErrCrashed = errors.New("vfs: handle invalidated by a simulated crash")

// CrashMode selects what a simulated power loss leaves of the data written
// since a file's last Sync. Directory entries are the same in every mode but
// CrashMetadataPrefix: only those made durable by SyncDir survive.
type CrashMode int

const (
	// CrashDropUnsynced keeps only durable state: every file has exactly the
	// content and size of its last Sync.
	CrashDropUnsynced CrashMode = iota
	// CrashTearLast applies every unsynced operation of a file in order, but
	// tears the last unsynced write: only its first k bytes survive, k drawn
	// uniformly from [0, len). Operations after that write (truncate,
	// preallocate) are applied. This is the classic torn tail: everything
	// reached the disk except the end of the last write.
	CrashTearLast
	// CrashRandomSubset applies each unsynced operation (write, truncate or
	// preallocate) independently with probability 1/2, in original order:
	// the kernel may write back dirty pages and size changes in any order.
	CrashRandomSubset
	// CrashGarbageTail keeps the durable content but extends the file to its
	// current size, as a power cut can leave a size update without its data:
	// each range an unsynced write covered beyond the durable size reads as
	// zeros or as random garbage (one choice per write), and the rest of the
	// extension (preallocation, truncate) reads as zeros. Unsynced writes
	// inside the durable size are lost.
	CrashGarbageTail
	// CrashMetadataPrefix keeps file data as CrashDropUnsynced does, but
	// directory changes (create, rename, remove) not yet made durable by
	// SyncDir survive up to a random point in the order they were made,
	// as a metadata journal commits them: a rename survives whole or not at
	// all. A real file system may make a change durable before the SyncDir
	// that guarantees it (any fsync can commit the journal); this mode
	// catches code that depends on such a change NOT having happened, for
	// instance deleting a file that durable state still names.
	CrashMetadataPrefix
	// CrashTornSectors applies the unsynced operations of a file in order,
	// but splits every write into 512-byte sectors (aligned to file
	// offsets) and keeps each sector independently with probability 1/2;
	// other operations are kept with probability 1/2. A disk may persist
	// the sectors of one write in any order, so a later part of a write can
	// survive while an earlier part is lost: the case that a redundant copy
	// at the end of a write (the manifest's replica) must handle.
	CrashTornSectors
)

// crashSector is the granularity at which CrashTornSectors tears writes.
const crashSector = 512

func (m CrashMode) String() string {
	switch m {
	case CrashDropUnsynced:
		return "drop-unsynced"
	case CrashTearLast:
		return "tear-last"
	case CrashRandomSubset:
		return "random-subset"
	case CrashGarbageTail:
		return "garbage-tail"
	case CrashMetadataPrefix:
		return "metadata-prefix"
	case CrashTornSectors:
		return "torn-sectors"
	}
	return fmt.Sprintf("CrashMode(%d)", int(m))
}

// SyncKind says which barrier a SyncEvent reports.
type SyncKind int

const (
	FileSync SyncKind = iota // File.Sync
	DirSync                  // FS.SyncDir
)

func (k SyncKind) String() string {
	if k == DirSync {
		return "syncdir"
	}
	return "sync"
}

// SyncEvent is passed to the hook set by Mem.SetSyncHook, once just before
// and once just after each barrier (also after a failed one).
type SyncEvent struct {
	Kind   SyncKind
	Name   string // cleaned absolute path of the file or directory
	Before bool   // true before the barrier takes effect, false after
}

// Mem is a strict in-memory FS for crash tests; see the package comment for
// the durability rules it enforces. Relative paths are resolved against "/",
// which always exists. It is safe for concurrent use.
//
// Limits of the model, all deliberate: directories are created durably by
// MkdirAll and removed durably by Remove (only when empty); directories
// cannot be renamed; Sync makes a file's content and size durable regardless
// of the handle it is called on (fdatasync has the same effect); a file
// cannot grow past MaxMemFileSize (EFBIG), because even a sparse file costs
// a page table entry per 4 KiB.
type Mem struct {
	mu    sync.RWMutex
	dirs  map[string]*memDir // by cleaned absolute path
	locks map[string]*memLock
	epoch uint64 // incremented by Crash: handles of an older epoch are dead
	hook  func(SyncEvent)

	// The namespace journal: every directory-entry change not yet covered
	// by a SyncDir of its directory, in order. CrashDropUnsynced and the
	// other data modes ignore it; CrashMetadataPrefix replays a prefix.
	seq   uint64 // sequence number of the last namespace operation
	nslog []nsOp
}

type memDir struct {
	entries map[string]*inode // current: what List and Open see
	durable map[string]*inode // what a crash leaves
	synced  uint64            // Mem.seq at the last SyncDir (or creation)
}

// nsOp is one namespace operation; a rename has two effects that a crash
// keeps or loses together, as a journaled file system commits them.
type nsOp struct {
	seq     uint64
	effects []nsEffect
}

type nsEffect struct {
	dir, name string
	ino       *inode // nil: the entry is removed
}

// inode is a file's data. Directory entries point at inodes, so an open
// handle keeps working on its file across renames and removes, as on POSIX.
type inode struct {
	cur     content
	durable content // immutable; replaced whole by Sync
	pending []memOp // unsynced operations since the last Sync, in order
}

type memOpKind uint8

const (
	opWrite memOpKind = iota
	opTruncate
	opPrealloc
)

type memOp struct {
	kind memOpKind
	off  int64  // write, prealloc
	n    int64  // truncate: new size; prealloc: length
	data []byte // write: a private copy
}

func (ino *inode) apply(op memOp) {
	switch op.kind {
	case opWrite:
		ino.cur.writeAt(op.data, op.off)
	case opTruncate:
		ino.cur.resize(op.n)
	case opPrealloc:
		if end := op.off + op.n; end > ino.cur.size {
			ino.cur.resize(end)
		}
	}
}

// do applies op to the current content and remembers it as unsynced.
func (ino *inode) do(op memOp) {
	ino.apply(op)
	ino.pending = append(ino.pending, op)
}

// journal applies a namespace operation to the current entries and records
// it. m.mu is held.
func (m *Mem) journal(effects ...nsEffect) {
	m.seq++
	for _, e := range effects {
		d := m.dirs[e.dir]
		if e.ino == nil {
			delete(d.entries, e.name)
		} else {
			d.entries[e.name] = e.ino
		}
	}
	m.nslog = append(m.nslog, nsOp{seq: m.seq, effects: effects})
}

// MaxMemFileSize is the largest size a Mem file may reach.
const MaxMemFileSize = 1 << 34

// checkEnd refuses an operation that would make a file end past
// MaxMemFileSize (or overflow).
func (f *memFile) checkEnd(op string, off, n int64) error {
	if off > MaxMemFileSize || n > MaxMemFileSize-off {
		return pathErr(op, f.name, syscall.EFBIG)
	}
	return nil
}

// NewMem returns an empty Mem holding only the root directory.
func NewMem() *Mem {
	m := &Mem{locks: map[string]*memLock{}}
	m.dirs = map[string]*memDir{"/": newMemDir()}
	return m
}

func newMemDir() *memDir {
	return &memDir{entries: map[string]*inode{}, durable: map[string]*inode{}}
}

func clean(name string) string { return path.Clean("/" + name) }

func pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// SetSyncHook installs fn (nil removes it). fn runs on the goroutine that
// syncs, without Mem's lock held, so it may call CrashClone; it must be safe
// for concurrent calls if several goroutines sync.
func (m *Mem) SetSyncHook(fn func(ev SyncEvent)) {
	m.mu.Lock()
	m.hook = fn
	m.mu.Unlock()
}

func (m *Mem) callHook(ev SyncEvent) {
	m.mu.RLock()
	h := m.hook
	m.mu.RUnlock()
	if h != nil {
		h(ev)
	}
}

// lookup returns the parent directory of p and p's base name. m.mu is held.
func (m *Mem) lookup(op, name, p string) (*memDir, string, error) {
	d, ok := m.dirs[path.Dir(p)]
	if !ok {
		return nil, "", pathErr(op, name, m.missingDir(path.Dir(p)))
	}
	return d, path.Base(p), nil
}

// missingDir says why the directory dir does not exist: a file where a
// directory should be is ENOTDIR, as on POSIX; otherwise ENOENT.
func (m *Mem) missingDir(dir string) error {
	for q := dir; q != "/"; q = path.Dir(q) {
		if d, ok := m.dirs[path.Dir(q)]; ok {
			if d.entries[path.Base(q)] != nil {
				return syscall.ENOTDIR
			}
			break
		}
	}
	return fs.ErrNotExist
}

func (m *Mem) Create(name string) (File, error) {
	p := clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, isDir := m.dirs[p]; isDir {
		return nil, pathErr("create", name, syscall.EISDIR)
	}
	d, base, err := m.lookup("create", name, p)
	if err != nil {
		return nil, err
	}
	ino := d.entries[base]
	if ino == nil {
		ino = &inode{cur: content{own: &owner{}}}
		m.journal(nsEffect{dir: path.Dir(p), name: base, ino: ino})
	} else if ino.cur.size != 0 {
		// O_TRUNC truncates the existing inode; the entry is unchanged.
		ino.do(memOp{kind: opTruncate, n: 0})
	}
	return m.handle(ino, name, false), nil
}

func (m *Mem) handle(ino *inode, name string, ro bool) *memFile {
	return &memFile{m: m, ino: ino, name: name, ro: ro, epoch: m.epoch}
}

func (m *Mem) open(op, name string, ro bool) (File, error) {
	p := clean(name)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if _, isDir := m.dirs[p]; isDir {
		return nil, pathErr(op, name, syscall.EISDIR)
	}
	d, base, err := m.lookup(op, name, p)
	if err != nil {
		return nil, err
	}
	ino := d.entries[base]
	if ino == nil {
		return nil, pathErr(op, name, fs.ErrNotExist)
	}
	return m.handle(ino, name, ro), nil
}

func (m *Mem) Open(name string) (File, error) { return m.open("open", name, true) }

func (m *Mem) OpenReadWrite(name string) (File, error) { return m.open("open", name, false) }

// Remove removes a file (durable only after SyncDir of its directory) or an
// empty directory (durable at once, like MkdirAll).
func (m *Mem) Remove(name string) error {
	p := clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, isDir := m.dirs[p]; isDir {
		if p == "/" || len(d.entries) > 0 || m.hasSubdir(p) {
			return pathErr("remove", name, syscall.ENOTEMPTY)
		}
		delete(m.dirs, p)
		m.pruneJournal()
		return nil
	}
	d, base, err := m.lookup("remove", name, p)
	if err != nil {
		return err
	}
	if d.entries[base] == nil {
		return pathErr("remove", name, fs.ErrNotExist)
	}
	m.journal(nsEffect{dir: path.Dir(p), name: base})
	return nil
}

func (m *Mem) hasSubdir(p string) bool {
	for q := range m.dirs {
		if q != p && path.Dir(q) == p {
			return true
		}
	}
	return false
}

func (m *Mem) Rename(oldname, newname string) error {
	op, np := clean(oldname), clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := &os.LinkError{Op: "rename", Old: oldname, New: newname}
	if _, isDir := m.dirs[op]; isDir {
		lerr.Err = errors.New("renaming a directory is not supported by Mem")
		return lerr
	}
	// Both parents are resolved before either entry, as the kernel does.
	od, obase, err := m.lookup("rename", oldname, op)
	if err != nil {
		lerr.Err = errors.Unwrap(err)
		return lerr
	}
	_, nbase, err := m.lookup("rename", newname, np)
	if err != nil {
		lerr.Err = errors.Unwrap(err)
		return lerr
	}
	ino := od.entries[obase]
	if ino == nil {
		lerr.Err = fs.ErrNotExist
		return lerr
	}
	if _, isDir := m.dirs[np]; isDir {
		lerr.Err = syscall.EISDIR
		return lerr
	}
	if op == np {
		return nil
	}
	m.journal(nsEffect{dir: path.Dir(op), name: obase}, nsEffect{dir: path.Dir(np), name: nbase, ino: ino})
	return nil
}

// List returns the names of the files and subdirectories in dir, sorted.
func (m *Mem) List(dir string) ([]string, error) {
	p := clean(dir)
	m.mu.RLock()
	defer m.mu.RUnlock()
	d, ok := m.dirs[p]
	if !ok {
		if _, base, err := m.lookup("open", dir, p); err == nil && m.dirs[path.Dir(p)].entries[base] != nil {
			return nil, pathErr("open", dir, syscall.ENOTDIR)
		}
		return nil, pathErr("open", dir, m.missingDir(p))
	}
	names := make([]string, 0, len(d.entries))
	names = slices.AppendSeq(names, maps.Keys(d.entries))
	for q := range m.dirs {
		if q != p && path.Dir(q) == p {
			names = append(names, path.Base(q))
		}
	}
	sort.Strings(names)
	return names, nil
}

// Stat returns the size of a file; a directory has size 0.
func (m *Mem) Stat(name string) (int64, error) {
	p := clean(name)
	m.mu.RLock()
	defer m.mu.RUnlock()
	if _, isDir := m.dirs[p]; isDir {
		return 0, nil
	}
	d, base, err := m.lookup("stat", name, p)
	if err != nil {
		return 0, err
	}
	ino := d.entries[base]
	if ino == nil {
		return 0, pathErr("stat", name, fs.ErrNotExist)
	}
	return ino.cur.size, nil
}

// MkdirAll creates dir and its parents, durably at once.
func (m *Mem) MkdirAll(dir string) error {
	p := clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mkdirAll(dir, p)
}

func (m *Mem) mkdirAll(dir, p string) error {
	if _, ok := m.dirs[p]; ok {
		return nil
	}
	parent := path.Dir(p)
	if err := m.mkdirAll(dir, parent); err != nil {
		return err
	}
	pd := m.dirs[parent]
	if pd.entries[path.Base(p)] != nil || pd.durable[path.Base(p)] != nil {
		return pathErr("mkdir", dir, syscall.ENOTDIR)
	}
	m.dirs[p] = newMemDir()
	m.dirs[p].synced = m.seq
	return nil
}

// Lock creates name if needed and takes an exclusive lock on it, which
// Crash releases (the holder died).
func (m *Mem) Lock(name string) (io.Closer, error) {
	p := clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, held := m.locks[p]; held {
		return nil, fmt.Errorf("vfs: lock %s: %w", name, ErrLocked)
	}
	if _, isDir := m.dirs[p]; isDir {
		return nil, pathErr("lock", name, syscall.EISDIR)
	}
	d, base, err := m.lookup("lock", name, p)
	if err != nil {
		return nil, err
	}
	if d.entries[base] == nil {
		m.journal(nsEffect{dir: path.Dir(p), name: base, ino: &inode{cur: content{own: &owner{}}}})
	}
	l := &memLock{m: m, path: p, epoch: m.epoch}
	m.locks[p] = l
	return l, nil
}

type memLock struct {
	m      *Mem
	path   string
	epoch  uint64
	closed bool
}

func (l *memLock) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.epoch != l.m.epoch {
		return ErrCrashed
	}
	if l.closed {
		return pathErr("unlock", l.path, fs.ErrClosed)
	}
	l.closed = true
	if l.m.locks[l.path] == l {
		delete(l.m.locks, l.path)
	}
	return nil
}

func (m *Mem) SyncDir(dir string) error {
	p := clean(dir)
	m.callHook(SyncEvent{Kind: DirSync, Name: p, Before: true})
	defer m.callHook(SyncEvent{Kind: DirSync, Name: p})
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.dirs[p]
	if !ok {
		return pathErr("syncdir", dir, fs.ErrNotExist)
	}
	d.durable = maps.Clone(d.entries)
	d.synced = m.seq
	m.pruneJournal()
	return nil
}

// pruneJournal drops the effects that a SyncDir made durable or whose
// directory is gone, and the operations left with none. m.mu is held.
func (m *Mem) pruneJournal() {
	kept := m.nslog[:0]
	for _, op := range m.nslog {
		var effects []nsEffect
		for _, e := range op.effects {
			if d, ok := m.dirs[e.dir]; ok && d.synced < op.seq {
				effects = append(effects, e)
			}
		}
		if len(effects) > 0 {
			kept = append(kept, nsOp{seq: op.seq, effects: effects})
		}
	}
	clear(m.nslog[len(kept):])
	m.nslog = kept
}

// ReadFile returns a copy of the current content of a file.
func (m *Mem) ReadFile(name string) ([]byte, error) {
	p := clean(name)
	m.mu.RLock()
	defer m.mu.RUnlock()
	d, base, err := m.lookup("open", name, p)
	if err != nil {
		return nil, err
	}
	ino := d.entries[base]
	if ino == nil {
		return nil, pathErr("open", name, fs.ErrNotExist)
	}
	return ino.cur.bytes(), nil
}

// WriteFile replaces the content of a file, creating it and its parent
// directories if needed, and makes the content and the directory entry
// durable at once: corruption tests use it to damage a file as a crash
// never could. Open handles of the file see the new content.
func (m *Mem) WriteFile(name string, data []byte) error {
	p := clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, isDir := m.dirs[p]; isDir {
		return pathErr("write", name, syscall.EISDIR)
	}
	if err := m.mkdirAll(name, path.Dir(p)); err != nil {
		return err
	}
	d, base := m.dirs[path.Dir(p)], path.Base(p)
	ino := d.entries[base]
	if ino == nil {
		ino = &inode{}
	}
	ino.cur = contentOf(data)
	ino.durable = ino.cur.snapshot()
	ino.pending = nil
	d.entries[base] = ino
	d.durable[base] = ino
	// Earlier unsynced changes of this name must not override, in a crash
	// image, the entry just made durable.
	for i, op := range m.nslog {
		m.nslog[i].effects = slices.DeleteFunc(slices.Clone(op.effects), func(e nsEffect) bool {
			return e.dir == path.Dir(p) && e.name == base
		})
	}
	m.nslog = slices.DeleteFunc(m.nslog, func(op nsOp) bool { return len(op.effects) == 0 })
	return nil
}

// FileNames returns the absolute paths of all files currently visible,
// sorted.
func (m *Mem) FileNames() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var names []string
	for p, d := range m.dirs {
		for base := range d.entries {
			names = append(names, path.Join(p, base))
		}
	}
	sort.Strings(names)
	return names
}

// CrashClone returns a new, independent Mem holding what a power loss at
// this instant would leave (see CrashMode), without changing m. The result
// depends only on m's state, mode and the values drawn from rng. The clone
// has no hook, no locks and no open handles. A nil rng stands for a fixed
// seed; rng is not guarded, so callers cloning from several goroutines must
// serialize their use of a shared one. An unknown mode behaves as
// CrashDropUnsynced.
func (m *Mem) CrashClone(mode CrashMode, rng *rand.Rand) *Mem {
	if rng == nil {
		rng = rand.New(rand.NewPCG(0, 0))
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	// The journal prefix that survives, per directory (CrashMetadataPrefix).
	survivors := map[string][]nsEffect{}
	if mode == CrashMetadataPrefix {
		for _, op := range m.nslog[:rng.IntN(len(m.nslog)+1)] {
			for _, e := range op.effects {
				survivors[e.dir] = append(survivors[e.dir], e)
			}
		}
	}
	out := NewMem()
	// Visit in sorted order so that rng is consumed deterministically.
	done := map[*inode]*inode{}
	for _, p := range slices.Sorted(maps.Keys(m.dirs)) {
		d := m.dirs[p]
		entries := d.durable
		if effects := survivors[p]; len(effects) > 0 {
			entries = maps.Clone(entries)
			for _, e := range effects {
				if e.ino == nil {
					delete(entries, e.name)
				} else {
					entries[e.name] = e.ino
				}
			}
		}
		nd := newMemDir()
		for _, base := range slices.Sorted(maps.Keys(entries)) {
			old := entries[base]
			ino, ok := done[old]
			if !ok {
				ino = crashInode(old, mode, rng)
				done[old] = ino
			}
			nd.entries[base] = ino
			nd.durable[base] = ino
		}
		out.dirs[p] = nd
	}
	return out
}

func crashInode(old *inode, mode CrashMode, rng *rand.Rand) *inode {
	ino := &inode{cur: old.durable.mutable()}
	switch mode {
	case CrashTearLast:
		last := -1
		for i, op := range old.pending {
			if op.kind == opWrite {
				last = i
			}
		}
		for i, op := range old.pending {
			if i == last {
				op.data = op.data[:rng.IntN(len(op.data))]
			}
			ino.apply(op)
		}
	case CrashRandomSubset:
		for _, op := range old.pending {
			if rng.IntN(2) == 0 {
				ino.apply(op)
			}
		}
	case CrashTornSectors:
		for _, op := range old.pending {
			if op.kind != opWrite {
				if rng.IntN(2) == 0 {
					ino.apply(op)
				}
				continue
			}
			end := op.off + int64(len(op.data))
			for lo := op.off; lo < end; {
				hi := min((lo/crashSector+1)*crashSector, end)
				if rng.IntN(2) == 0 {
					ino.cur.writeAt(op.data[lo-op.off:hi-op.off], lo)
				}
				lo = hi
			}
		}
	case CrashGarbageTail:
		dsize := old.durable.size
		if old.cur.size > dsize {
			ino.cur.resize(old.cur.size)
			for _, op := range old.pending {
				if op.kind != opWrite {
					continue
				}
				lo, hi := max(op.off, dsize), min(op.off+int64(len(op.data)), old.cur.size)
				if lo >= hi || rng.IntN(2) == 0 {
					continue // zeros: already there
				}
				junk := make([]byte, hi-lo)
				for i := range junk {
					junk[i] = byte(rng.Uint32())
				}
				ino.cur.writeAt(junk, lo)
			}
		}
	}
	ino.durable = ino.cur.snapshot()
	return ino
}

// Crash replaces m's state with CrashClone(mode, rng): everything not
// durable is lost, every open handle and lock fails with ErrCrashed from now
// on, and locks are released. The sync hook stays installed.
func (m *Mem) Crash(mode CrashMode, rng *rand.Rand) {
	c := m.CrashClone(mode, rng)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirs = c.dirs
	m.locks = map[string]*memLock{}
	m.epoch++
}

// memFile is an open handle. It refers to its inode, not its name.
type memFile struct {
	m      *Mem
	ino    *inode
	name   string
	ro     bool
	epoch  uint64
	closed bool // guarded by m.mu
}

// check reports whether the handle may be used. m.mu is held.
func (f *memFile) check(op string) error {
	if f.epoch != f.m.epoch {
		return pathErr(op, f.name, ErrCrashed)
	}
	if f.closed {
		return pathErr(op, f.name, fs.ErrClosed)
	}
	return nil
}

func (f *memFile) checkWrite(op string) error {
	if err := f.check(op); err != nil {
		return err
	}
	if f.ro {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	f.m.mu.RLock()
	defer f.m.mu.RUnlock()
	// Checked in the order os.File.ReadAt checks them.
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := f.check("read"); err != nil {
		return 0, err
	}
	size := f.ino.cur.size
	if off >= size {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), size-off))
	f.ino.cur.readAt(b[:n], off)
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// Map returns a copy of [0, size): the engine maps only files that no
// longer change, for which a copy and a shared mapping read the same.
func (f *memFile) Map(size int64) ([]byte, func() error, error) {
	f.m.mu.RLock()
	defer f.m.mu.RUnlock()
	if err := f.check("map"); err != nil {
		return nil, nil, err
	}
	if size <= 0 || size > f.ino.cur.size {
		return nil, nil, pathErr("map", f.name, syscall.EINVAL)
	}
	data := make([]byte, size)
	f.ino.cur.readAt(data, 0)
	return data, func() error { return nil }, nil
}

func (f *memFile) WriteAt(b []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	// Checked in the order os.File.WriteAt checks them.
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := f.checkWrite("write"); err != nil {
		return 0, err
	}
	if err := f.checkEnd("write", off, int64(len(b))); err != nil {
		return 0, err
	}
	f.ino.do(memOp{kind: opWrite, off: off, data: slices.Clone(b)})
	return len(b), nil
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.checkWrite("truncate"); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if err := f.checkEnd("truncate", size, 0); err != nil {
		return err
	}
	f.ino.do(memOp{kind: opTruncate, n: size})
	return nil
}

func (f *memFile) Preallocate(off, length int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.checkWrite("preallocate"); err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		// fallocate(2) refuses these with EINVAL too.
		return pathErr("preallocate", f.name, syscall.EINVAL)
	}
	if err := f.checkEnd("preallocate", off, length); err != nil {
		return err
	}
	f.ino.do(memOp{kind: opPrealloc, off: off, n: length})
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.m.mu.RLock()
	defer f.m.mu.RUnlock()
	if err := f.check("stat"); err != nil {
		return 0, err
	}
	return f.ino.cur.size, nil
}

func (f *memFile) Sync() error {
	p := clean(f.name)
	f.m.callHook(SyncEvent{Kind: FileSync, Name: p, Before: true})
	defer f.m.callHook(SyncEvent{Kind: FileSync, Name: p})
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("sync"); err != nil {
		return err
	}
	f.ino.durable = f.ino.cur.snapshot()
	f.ino.pending = nil
	return nil
}

// DropUnsynced reverts the file to its durable content, forgetting every
// unsynced operation: what Faulty's Linux fsync mode asks of a file whose
// sync failed (the kernel dropped the dirty pages).
func (f *memFile) DropUnsynced() {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.check("drop") != nil {
		return
	}
	f.ino.cur = f.ino.durable.mutable()
	f.ino.pending = nil
}

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check("close"); err != nil {
		return err
	}
	f.closed = true
	return nil
}

var _ FS = (*Mem)(nil)
