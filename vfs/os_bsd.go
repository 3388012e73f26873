//go:build unix && !linux && !darwin

package vfs

import "os"

// dataSync is fsync on the BSDs and the other Unix systems: x/sys/unix
// offers no fdatasync there. fsync flushes metadata too (a dearer barrier
// than Linux's fdatasync when only data changed); whether it also flushes
// the drive's write cache depends on the system and file system (FreeBSD's
// UFS and ZFS issue a cache flush).
func dataSync(f *os.File) error { return fsync(f) }

// dirSync is fsync of the directory.
func dirSync(d *os.File) error { return fsync(d) }
