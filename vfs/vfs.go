// Package vfs is the file-system seam of segkv: the only package that touches
// the operating system's files. Everything the engine writes goes through an
// FS so that tests can substitute a strict in-memory file system that loses
// unsynced data on Crash, inject I/O errors, or count every barrier.
//
// Implementations in this package:
//
//   - OS: the real file system (fdatasync, flock and fallocate via x/sys/unix).
//   - Mem: a strict in-memory file system for crash tests. It keeps synced and
//     unsynced state apart; Crash (or CrashClone, which leaves the Mem alone)
//     discards unsynced file data, or keeps a torn, random or garbage part of
//     it as the CrashMode says, and every directory entry (create, rename,
//     remove) that a SyncDir has not made durable (CrashMetadataPrefix keeps
//     a random prefix of those instead).
//   - Faulty: a wrapper that injects errors (fail the Nth sync or write, ENOSPC
//     after N bytes, ...).
//   - Counting: a wrapper that counts file syncs, directory syncs, renames and
//     bytes written per file name.
//
// Durability semantics every implementation follows (and Mem enforces):
// File.Sync makes the file's data and size durable, not its directory entry;
// FS.SyncDir makes the entries (creates, renames, removes) of one directory
// durable.
package vfs

import (
	"errors"
	"io"
)

// ErrLocked is returned by FS.Lock when another holder (in this process or
// another) already holds the lock.
var ErrLocked = errors.New("vfs: lock held by another process or store")

// FS is the set of file-system operations the engine needs, and no more.
// Paths are slash-separated OS paths; implementations clean them.
type FS interface {
	// Create creates the named file for reading and writing, truncating it if
	// it exists. The new directory entry is not durable until SyncDir.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenReadWrite opens an existing file for reading and writing, without
	// truncating it.
	OpenReadWrite(name string) (File, error)
	// Remove removes a file. Not durable until SyncDir of its directory.
	Remove(name string) error
	// Rename atomically renames oldname to newname, replacing newname if it
	// exists. Not durable until SyncDir.
	Rename(oldname, newname string) error
	// List returns the names (not paths) of the entries of dir, sorted.
	List(dir string) ([]string, error)
	// Stat returns the size of the named file. A missing file yields an error
	// for which errors.Is(err, fs.ErrNotExist) holds.
	Stat(name string) (size int64, err error)
	// MkdirAll creates dir and its parents. Directory creation is made durable
	// by the implementation (a store directory must survive a crash once Open
	// returned).
	MkdirAll(dir string) error
	// Lock takes an exclusive advisory lock on the named file, creating it if
	// needed. It fails with ErrLocked, without blocking, if the lock is held,
	// whether by another process or by another handle in this process.
	Lock(name string) (io.Closer, error)
	// SyncDir makes every directory entry change in dir durable (fsync of the
	// directory).
	SyncDir(dir string) error
}

// File is an open file. Writes are positioned: the engine tracks its own
// append offsets, which keeps writes independent of any shared cursor.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data and size durable (fdatasync). It does not
	// make the file's directory entry durable.
	Sync() error
	// Truncate changes the file size. Not durable until Sync.
	Truncate(size int64) error
	// Preallocate reserves space for [off, off+length) and extends the file
	// size to cover it, as zeros (fallocate mode 0). Writing into
	// preallocated space and then syncing does not change the file size,
	// which makes the barrier cheaper. Not durable until Sync.
	Preallocate(off, length int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
	// Name returns the path the file was opened with.
	Name() string
}

// Mapper is implemented by files whose first bytes can be mapped read-only
// into memory. The engine maps only files that no longer change (sealed
// segments), so a mapping is a view of immutable bytes; where a file does
// not implement Mapper, or Map fails, the engine reads with ReadAt.
//
// The mapping stays valid after the file is closed, until unmap is called
// (once). With the OS implementation, an I/O error on a mapped page, or the
// file shrinking below the mapped range, raises SIGBUS rather than
// returning an error: the trade made by mmap-based engines (bbolt, LMDB).
type Mapper interface {
	Map(size int64) (data []byte, unmap func() error, err error)
}

// SharedMapper is implemented by files that can be mapped read-only so that
// the mapping shows every later write to the mapped range, through any
// handle, as soon as the write returns: a shared mapping of the operating
// system's page cache. The engine maps its live file this way and reads
// through the mapping only records already written and published. The
// in-memory file system does not implement it (its Map is a copy, which
// cannot follow writes), so there the engine reads the live file with
// ReadAt. The SIGBUS caveat of Mapper applies.
type SharedMapper interface {
	MapShared(size int64) (data []byte, unmap func() error, err error)
}

// WritebackStarter is implemented by files that can ask the operating
// system to start writing a range of dirty pages to the device without
// waiting for it (Linux: sync_file_range with SYNC_FILE_RANGE_WRITE). It is
// a pacing hint, never a barrier: it makes nothing durable and its failure
// loses nothing. A writer streaming a large file (a merge's output) asks
// for each range it has written, so that the pages do not pile up in the
// page cache and reach the disk in one burst, at its closing fdatasync or
// when the kernel's dirty limits force it, that a small durable write's
// barrier on the same disk would wait behind.
type WritebackStarter interface {
	StartWriteback(off, n int64) error
}

// NewWriter returns an io.Writer that writes f front to back from off: a
// File has only WriterAt, and streams (bufio, encoders) want a Writer.
func NewWriter(f File, off int64) io.Writer { return &fileWriter{f: f, off: off} }

type fileWriter struct {
	f   File
	off int64
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}
