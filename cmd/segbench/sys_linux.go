package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// fsType names the file system holding dir, so that a table says what it
// measured; on tmpfs every fsync is free and the figures mean nothing.
func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown file system"
	}
	names := map[int64]string{
		0xEF53:     "ext4",
		0x58465342: "xfs",
		0x9123683E: "btrfs",
		0x01021994: "tmpfs: fsync is free here, use -dir on a disk",
		0x794c7630: "overlayfs",
		0x2fc12fc1: "zfs",
		0x6969:     "nfs",
		0xF2F52010: "f2fs",
	}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("file system type %#x", st.Type)
}
