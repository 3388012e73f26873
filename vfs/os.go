package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// OS is the real file system (Linux). Its zero value is ready to use and
// holds no state; NewOS returns one as an FS.
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

// Lock opens its own descriptor for name and flocks it. flock locks belong
// to the open file description, so a second Lock in this process conflicts
// just like another process does (fcntl locks would not).
func (OS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	err = control(f, func(fd int) error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("vfs: lock %s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("vfs: lock %s: %w", name, err)
	}
	return f, nil // closing the descriptor releases the lock
}

func (OS) SyncDir(dir string) error { return syncDir(dir) }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = control(d, unix.Fsync)
	if cerr := d.Close(); err == nil && cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("vfs: syncdir %s: %w", dir, err)
	}
	return nil
}

// control runs fn on f's descriptor without Fd's side effect of switching
// the file to blocking mode and detaching it from the poller.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
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

// Sync is fdatasync: the size is part of what it flushes, other metadata
// (mtime) is not, which spares a journal commit when the size is unchanged.
func (f *osFile) Sync() error {
	if err := control(f.f, unix.Fdatasync); err != nil {
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

// Preallocate uses fallocate mode 0, retried on EINTR (the Go runtime's
// preemption signal can interrupt it). Where the file system cannot
// fallocate, it writes zeros past the current end instead, never over
// existing data.
func (f *osFile) Preallocate(off, length int64) error {
	if off < 0 || length <= 0 {
		return fmt.Errorf("vfs: preallocate %s off=%d len=%d: %w", f.name, off, length, unix.EINVAL)
	}
	err := control(f.f, func(fd int) error {
		for {
			err := unix.Fallocate(fd, 0, off, length)
			if err != unix.EINTR {
				return err
			}
		}
	})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = f.zeroFill(off, length)
	}
	if err != nil {
		return fmt.Errorf("vfs: preallocate %s off=%d len=%d: %w", f.name, off, length, err)
	}
	return nil
}

func (f *osFile) zeroFill(off, length int64) error {
	size, err := f.Size()
	if err != nil {
		return err
	}
	start, end := max(off, size), off+length
	if start >= end {
		return nil
	}
	zeros := make([]byte, min(end-start, 1<<20))
	for p := start; p < end; {
		n, err := f.f.WriteAt(zeros[:min(int64(len(zeros)), end-p)], p)
		if err != nil {
			return err
		}
		p += int64(n)
	}
	return nil
}

var _ FS = OS{}

// Map maps [0, size) of the file read-only and shared (mmap). The caller
// keeps the file at least size bytes long while the mapping is in use.
// MapShared is Map: a MAP_SHARED mapping is a view of the page cache, so it
// shows writes made after it through any descriptor of the file.
func (f *osFile) MapShared(size int64) ([]byte, func() error, error) { return f.Map(size) }

func (f *osFile) Map(size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("vfs: map %s: size %d: %w", f.name, size, unix.EINVAL)
	}
	var data []byte
	err := control(f.f, func(fd int) error {
		var err error
		data, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("vfs: map %s: %w", f.name, err)
	}
	return data, func() error {
		if err := unix.Munmap(data); err != nil {
			return fmt.Errorf("vfs: unmap %s: %w", f.name, err)
		}
		return nil
	}, nil
}
