package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// OS is the real file system. Its zero value is ready to use and holds no
// state; NewOS returns one as an FS. The operating-system specific parts
// (the data barrier, preallocation, locking, memory mapping and directory
// sync) are in the os_<goos>.go files beside this one; docs/DESIGN.md
// ("Portability") describes each platform's choices and their gaps. The
// tests run on Linux only.
//
// Errors from the os package keep their *fs.PathError form (which already
// names the operation and the path); errors of the raw system calls are
// wrapped as "vfs: <op> <path>: <errno>". Either way errors.Is works on the
// underlying errno and on fs.ErrNotExist.
type OS struct{}

// NewOS returns the real file system.
func NewOS() FS { return OS{} }

func (OS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, name: name}, nil
}

func (OS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, name: name}, nil
}

func (OS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, name: name}, nil
}

func (OS) Remove(name string) error { return os.Remove(name) }

func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (OS) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (OS) Stat(name string) (int64, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// MkdirAll creates dir and its missing parents, then fsyncs the parent of
// each directory it created, so that the new entries survive a crash.
func (OS) MkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	var created []string // outermost first
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		created = append([]string{p}, created...)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range created {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// Lock opens its own handle for name and locks it exclusively without
// blocking (lockFile: flock on Unix, LockFileEx on Windows). Both lock per
// open handle, so a second Lock in this process conflicts just like another
// process does (fcntl locks would not).
func (OS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	l, err := lockFile(f)
	if err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("vfs: lock %s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	return l, nil
}

func (OS) SyncDir(dir string) error { return syncDir(dir) }

// control runs fn on f's descriptor (a Windows handle) without Fd's side
// effect of switching the file to blocking mode and detaching it from the
// poller.
func control(f *os.File, fn func(fd uintptr) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(fd) }); err != nil {
		// Control fails only on a closed file; report it the way os does.
		return os.ErrClosed
	}
	return ferr
}

type osFile struct {
	f    *os.File
	name string
}

func (f *osFile) ReadAt(b []byte, off int64) (int, error)  { return f.f.ReadAt(b, off) }
func (f *osFile) WriteAt(b []byte, off int64) (int, error) { return f.f.WriteAt(b, off) }
func (f *osFile) Close() error                             { return f.f.Close() }
func (f *osFile) Name() string                             { return f.name }

// Sync is the operating system's data barrier (dataSync): fdatasync on
// Linux, F_FULLFSYNC on macOS, fsync on the BSDs, FlushFileBuffers on
// Windows. docs/DESIGN.md ("Portability") says what each guarantees.
func (f *osFile) Sync() error {
	if err := dataSync(f.f); err != nil {
		return fmt.Errorf("vfs: sync %s: %w", f.name, err)
	}
	return nil
}

func (f *osFile) Truncate(size int64) error { return f.f.Truncate(size) }

func (f *osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Preallocate reserves and zero-extends [off, off+length) the way the
// operating system allows (preallocate: fallocate on Linux, a size
// extension elsewhere).
func (f *osFile) Preallocate(off, length int64) error {
	if off < 0 || length <= 0 {
		return fmt.Errorf("vfs: preallocate %s off=%d len=%d: %w", f.name, off, length, syscall.EINVAL)
	}
	if err := f.preallocate(off, length); err != nil {
		return fmt.Errorf("vfs: preallocate %s off=%d len=%d: %w", f.name, off, length, err)
	}
	return nil
}

// extend grows the file to off+length if it is shorter, and never shrinks
// it: the preallocation of systems without fallocate. The new range is a
// hole that reads as zeros, exactly what fallocate mode 0 shows, and the
// size change becomes durable with the next Sync, as fallocate's does. No
// blocks are reserved: the first write into the range allocates them. The
// caller does not write past the end concurrently (the engine preallocates
// a file only while it alone writes it), which would race with the size
// read here.
func (f *osFile) extend(off, length int64) error {
	size, err := f.Size()
	if err != nil {
		return err
	}
	if off+length <= size {
		return nil
	}
	return f.f.Truncate(off + length)
}

var _ FS = OS{}
