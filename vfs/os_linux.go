package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// dataSync is fdatasync: the size is part of what it flushes, other
// metadata (mtime) is not, which spares a journal commit when the size is
// unchanged. Linux's fdatasync also flushes the device's write cache.
func dataSync(f *os.File) error {
	return control(f, func(fd uintptr) error { return unix.Fdatasync(int(fd)) })
}

// StartWriteback starts writeback of [off, off+n) with sync_file_range
// (SYNC_FILE_RANGE_WRITE): it queues the dirty pages of the range for the
// device and returns without waiting (see WritebackStarter).
func (f *osFile) StartWriteback(off, n int64) error {
	return control(f.f, func(fd uintptr) error {
		return unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}

// dirSync is fsync of the directory: Linux has no cheaper barrier for
// directory entries.
func dirSync(d *os.File) error { return fsync(d) }

// preallocate uses fallocate mode 0, retried on EINTR (the Go runtime's
// preemption signal can interrupt it). Where the file system cannot
// fallocate, it writes zeros past the current end instead, never over
// existing data: that reserves the blocks as fallocate would.
func (f *osFile) preallocate(off, length int64) error {
	err := control(f.f, func(fd uintptr) error {
		for {
			err := unix.Fallocate(int(fd), 0, off, length)
			if err != unix.EINTR {
				return err
			}
		}
	})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = f.zeroFill(off, length)
	}
	return err
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
