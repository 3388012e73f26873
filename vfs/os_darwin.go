package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// dataSync is fcntl(F_FULLFSYNC). macOS's fsync only hands the data to the
// drive, whose write cache may still lose it at power loss; F_FULLFSYNC
// also makes the drive flush that cache, the guarantee fdatasync gives on
// Linux. macOS has no barrier for data alone, so this one also flushes
// metadata, and it costs more than Linux's.
//
// Some file systems (network mounts such as SMB, some external formats)
// refuse F_FULLFSYNC. Only then, when the refusal says "not supported",
// does it fall back to fsync: the best those file systems offer, and
// weaker (the drive's cache is not flushed). Any other error (EIO, say) is
// returned, never hidden by a retry with a weaker barrier.
func dataSync(f *os.File) error {
	err := control(f, func(fd uintptr) error {
		for {
			if _, err := unix.FcntlInt(fd, unix.F_FULLFSYNC, 0); err != unix.EINTR {
				return err
			}
		}
	})
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTTY) {
		return fsync(f)
	}
	return err
}

// dirSync is F_FULLFSYNC of the directory (with dataSync's fallback): a
// plain fsync would leave the new entries in the drive's cache.
func dirSync(d *os.File) error { return dataSync(d) }
