package vfs

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/windows"
)

// errWouldBlock is what LockFileEx reports when another handle holds the
// range it asked for.
var errWouldBlock error = windows.ERROR_LOCK_VIOLATION

// dataSync is FlushFileBuffers (os.File.Sync): the file's data and
// metadata, and a flush of the drive's write cache. Windows has no
// data-only barrier.
func dataSync(f *os.File) error { return f.Sync() }

// syncDir cannot make directory entries durable on Windows: a directory
// cannot be opened for FlushFileBuffers through the os package, and Windows
// offers no fsync of a directory. NTFS journals its metadata, but a create,
// rename or remove may still be lost at power loss after SyncDir returned:
// a durability gap documented in docs/DESIGN.md ("Portability"). It still
// reports a missing directory, as the other systems do.
func syncDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("vfs: syncdir %s: not a directory", dir)
	}
	return nil
}

// lockFile takes an exclusive lock of the file's first byte with LockFileEx,
// failing at once if held. Windows locks per handle, so a second handle in
// this process conflicts, as with flock. The lock is mandatory for that
// byte, which nothing reads or writes: the lock file is empty.
func lockFile(f *os.File) (io.Closer, error) {
	err := control(f, func(h uintptr) error {
		var ov windows.Overlapped
		return windows.LockFileEx(windows.Handle(h), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ov)
	})
	if err != nil {
		return nil, err
	}
	return &winLock{f: f}, nil
}

// winLock unlocks before closing: Windows releases the locks of a closed
// handle only when it gets round to it, and a Store reopened at once would
// find the lock still held.
type winLock struct{ f *os.File }

func (l *winLock) Close() error {
	uerr := control(l.f, func(h uintptr) error {
		var ov windows.Overlapped
		return windows.UnlockFileEx(windows.Handle(h), 0, 1, 0, &ov)
	})
	cerr := l.f.Close()
	if uerr != nil {
		return fmt.Errorf("vfs: unlock %s: %w", l.f.Name(), uerr)
	}
	return cerr
}

// No memory mapping on Windows: osFile implements neither Mapper nor
// SharedMapper here, so the engine reads segments with ReadAt and loads
// index files into the heap, the paths Options.DisableMmap selects on the
// other systems (and that the Linux tests run). A CreateFileMapping view
// would not fit the engine: it maps the live file and later shrinks it
// (a seal releases the unused preallocation), and Windows refuses to
// shrink a file below a mapped view (ERROR_USER_MAPPED_FILE). Copying the
// file into memory instead would keep every sealed segment resident. See
// docs/DESIGN.md, "Portability".
