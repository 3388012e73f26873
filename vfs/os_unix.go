//go:build unix

package vfs

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// errWouldBlock is what lockFile's error matches when another handle holds
// the lock.
var errWouldBlock error = unix.EWOULDBLOCK

// lockFile flocks f. flock locks belong to the open file description, so a
// second descriptor of the same file in this process conflicts; closing f
// releases the lock.
func lockFile(f *os.File) (io.Closer, error) {
	err := control(f, func(fd uintptr) error { return unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB) })
	if err != nil {
		return nil, err
	}
	return f, nil
}

// syncDir makes dir's entries durable: fsync of the directory (dirSync,
// which is F_FULLFSYNC on macOS).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = dirSync(d)
	if cerr := d.Close(); err == nil && cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("vfs: syncdir %s: %w", dir, err)
	}
	return nil
}

// fsync is the full barrier of POSIX: data and every piece of metadata.
// Retried on EINTR, as os.File.Sync is.
func fsync(f *os.File) error {
	return control(f, func(fd uintptr) error {
		for {
			if err := unix.Fsync(int(fd)); err != unix.EINTR {
				return err
			}
		}
	})
}

// Map maps [0, size) of the file read-only and shared (mmap). The caller
// keeps the file at least size bytes long while the mapping is in use.
// MapShared is Map: a MAP_SHARED mapping is a view of the page cache, which
// Linux, macOS and FreeBSD keep coherent with write(2), so it shows writes
// made after it through any descriptor of the file.
func (f *osFile) MapShared(size int64) ([]byte, func() error, error) { return f.Map(size) }

func (f *osFile) Map(size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("vfs: map %s: size %d: %w", f.name, size, syscall.EINVAL)
	}
	var data []byte
	err := control(f.f, func(fd uintptr) error {
		var err error
		data, err = unix.Mmap(int(fd), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
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

var (
	_ Mapper       = (*osFile)(nil)
	_ SharedMapper = (*osFile)(nil)
)
