//go:build !linux

package vfs

// preallocate extends the file (extend) where there is no fallocate(2).
// Zero-filling instead would reserve the blocks, but it writes every live
// file twice (its whole segment size in zeros, then the records), and on
// the copy-on-write file systems these platforms default to (APFS, ZFS)
// overwriting the zeros allocates new blocks anyway, so it would reserve
// nothing there. What the extension keeps is what the crash contract
// needs: the range reads as zeros (the clean end of the frames), the new
// size is durable after the Sync that follows, and appends into the range
// do not change the size. What it gives up: a full disk shows as ENOSPC on
// an append (which fails the store as any write error does) rather than
// when the live file is made; and the first write into each block
// allocates it, which the wal's zero-ahead fill makes rare, as it does for
// ext4's unwritten extents.
func (f *osFile) preallocate(off, length int64) error { return f.extend(off, length) }
