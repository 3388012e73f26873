package bucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/segkv/segkv/vfs"
)

// lockName is the file in a Local bucket's root that serializes the
// existence check and the rename of every PutIfAbsent, across processes.
const lockName = ".segbackup.lock"

// tmpPrefix starts the names of objects being written; List skips them.
const tmpPrefix = ".tmp-"

// Local is a Bucket in a directory, written through vfs: each object is a
// file at root/key, written under a temporary name, synced, then renamed
// into place under an exclusive lock after checking that the key is free,
// and its directory synced. Two writers (in one process or several) can
// therefore not both win a PutIfAbsent: the check and the rename happen
// under one lock, and the lock is the file system's (flock), not the
// process's. List sees one directory level: the objects in the directory
// named by the prefix up to its last slash (the backup layout never nests
// deeper). A crash can leave temporary files (names beginning ".tmp-");
// they are never listed and may be removed by hand.
type Local struct {
	fs   vfs.FS
	root string
}

// NewLocal returns a Local bucket rooted at dir, creating it. fsys nil
// means the real file system.
func NewLocal(fsys vfs.FS, dir string) (*Local, error) {
	if fsys == nil {
		fsys = vfs.NewOS()
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("bucket: create %s: %w", dir, err)
	}
	return &Local{fs: fsys, root: filepath.Clean(dir)}, nil
}

func (l *Local) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") || path.Clean(key) != key ||
		key == "." || strings.HasPrefix(key, "../") || key == ".." {
		return "", fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	if base := path.Base(key); strings.HasPrefix(base, tmpPrefix) || base == lockName {
		return "", fmt.Errorf("%w: %q (reserved name)", ErrInvalidKey, key)
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

// PutIfAbsent implements Bucket.
func (l *Local) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := l.fs.MkdirAll(dir); err != nil {
		return fmt.Errorf("bucket: put %s: create directory: %w", key, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, tmpPrefix+filepath.Base(p)+"-"+hex.EncodeToString(rnd[:]))
	f, err := l.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("bucket: put %s: %w", key, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			f.Close()
			l.fs.Remove(tmp)
		}
	}()
	// Written outside the lock: a large object does not hold up others.
	n, err := io.Copy(vfs.NewWriter(f, 0), &ctxReader{ctx: ctx, r: io.LimitReader(r, size+1)})
	if err != nil {
		return fmt.Errorf("bucket: put %s: %w", key, err)
	}
	if n != size {
		return fmt.Errorf("bucket: put %s: reader gave %d bytes, want %d", key, n, size)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("bucket: put %s: sync: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bucket: put %s: close: %w", key, err)
	}
	unlock, err := l.lock(ctx)
	if err != nil {
		l.fs.Remove(tmp)
		renamed = true // nothing left to clean
		return fmt.Errorf("bucket: put %s: %w", key, err)
	}
	defer unlock()
	if _, err := l.fs.Stat(p); err == nil {
		l.fs.Remove(tmp)
		renamed = true
		return fmt.Errorf("%w: %s", ErrExists, key)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("bucket: put %s: stat: %w", key, err)
	}
	if err := l.fs.Rename(tmp, p); err != nil {
		return fmt.Errorf("bucket: put %s: rename: %w", key, err)
	}
	renamed = true
	// The object is not durable until its directory entry is.
	if err := l.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("bucket: put %s: sync directory: %w", key, err)
	}
	return nil
}

// lock takes the bucket's lock, waiting (politely) while another holder
// has it: vfs locks do not block.
func (l *Local) lock(ctx context.Context) (func(), error) {
	wait := time.Millisecond
	for {
		c, err := l.fs.Lock(filepath.Join(l.root, lockName))
		if err == nil {
			return func() { c.Close() }, nil
		}
		if !errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Get implements Bucket.
func (l *Local) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := l.fs.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, fmt.Errorf("bucket: get %s: %w", key, err)
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bucket: get %s: %w", key, err)
	}
	off = min(max(off, 0), size)
	if length < 0 || off+length > size {
		length = size - off
	}
	return &fileReader{SectionReader: io.NewSectionReader(f, off, length), f: f}, nil
}

type fileReader struct {
	*io.SectionReader
	f vfs.File
}

func (r *fileReader) Close() error { return r.f.Close() }

// List implements Bucket.
func (l *Local) List(ctx context.Context, prefix, after string, limit int) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dirKey := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirKey = prefix[:i+1]
	}
	dir := filepath.Join(l.root, filepath.FromSlash(dirKey))
	names, err := l.fs.List(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("bucket: list %s: %w", prefix, err)
	}
	var out []ObjectInfo
	for _, name := range names { // sorted, so keys come out in order
		key := dirKey + name
		if strings.HasPrefix(name, ".") || !strings.HasPrefix(key, prefix) || key <= after {
			continue
		}
		size, err := l.fs.Stat(filepath.Join(dir, name))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile
			}
			return nil, fmt.Errorf("bucket: list %s: %w", prefix, err)
		}
		out = append(out, ObjectInfo{Key: key, Size: size})
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// Delete implements Bucket.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.fs.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("bucket: delete %s: %w", key, err)
	}
	if err := l.fs.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("bucket: delete %s: sync directory: %w", key, err)
	}
	return nil
}

// Close implements Bucket.
func (l *Local) Close() error { return nil }

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
