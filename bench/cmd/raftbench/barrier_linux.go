package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The disk's own barrier, for context: the batch-of-1 StoreLogs latency of
// every store here is one small write and one sync, so its p50 is mostly
// what the disk charges for that sync. Two patterns, each a sequential
// stream of small writes, a sync after each:
//
//   - zeroed: overwrite of preallocated space that zeros were written to
//     and synced beforehand, then fdatasync (segkv's live file, which is
//     preallocated and zeroed ahead of its writes);
//   - fallocated: write into fallocated, never written space, then fsync
//     (raft-wal's segment files, which are fallocated when made and fsynced
//     on every append).
var barrierPatterns = []string{"zeroed+fdatasync", "fallocated+fsync"}

const barrierFileSize = 16 << 20

// barrierFile is one pattern's file.
type barrierFile struct {
	f       *os.File
	pattern string
	off     int64
}

func openBarrier(dir, pattern string) (*barrierFile, error) {
	f, err := os.Create(filepath.Join(dir, "barrier-"+pattern))
	if err != nil {
		return nil, err
	}
	bf := &barrierFile{f: f, pattern: pattern}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, barrierFileSize); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if pattern == "zeroed+fdatasync" {
		z := make([]byte, 1<<20)
		for off := int64(0); off < barrierFileSize; off += int64(len(z)) {
			if _, err := f.WriteAt(z, off); err != nil {
				return nil, errors.Join(err, f.Close())
			}
		}
	}
	if err := f.Sync(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return bf, nil
}

// write writes buf at the next offset and syncs, the pattern's way, and
// returns the time both took. It fails once the file is full.
func (bf *barrierFile) write(buf []byte) (time.Duration, error) {
	if bf.off+int64(len(buf)) > barrierFileSize {
		return 0, fmt.Errorf("barrier file %s full", bf.pattern)
	}
	t0 := time.Now()
	if _, err := bf.f.WriteAt(buf, bf.off); err != nil {
		return 0, err
	}
	var err error
	if bf.pattern == "zeroed+fdatasync" {
		err = unix.Fdatasync(int(bf.f.Fd()))
	} else {
		err = unix.Fsync(int(bf.f.Fd()))
	}
	d := time.Since(t0)
	bf.off += int64(len(buf))
	return d, err
}

func (bf *barrierFile) close() error { return bf.f.Close() }
