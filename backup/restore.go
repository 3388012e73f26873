package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/segkv/segkv/backup/bucket"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// ErrTargetExists reports a restore into a directory that holds something.
var ErrTargetExists = errors.New("backup: restore target exists and is not empty")

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// Seq restores the newest recorded state at or before this manifest
	// seq; 0 restores the latest.
	Seq uint64
	// Store are the options the new store is opened with (its FS too);
	// nil: defaults on the real file system. Limits such as MaxValueSize
	// must admit the backed-up data.
	Store *segstore.Options
	// Progress, if set, is told of each segment as it is fetched.
	Progress func(done, total int, bytes int64)
}

// RestoreResult describes a restore.
type RestoreResult struct {
	Seq      uint64 // the recorded seq restored
	Segments int
	Bytes    int64 // segment bytes fetched
	Objects  int   // edit and checkpoint objects read
	Skipped  []error
	// Cleaned are the temporary directories of earlier restores into the
	// same target that were killed, removed before this one began
	// (CleanRestores); CleanErrors what kept others from being removed.
	Cleaned     []string
	CleanErrors []error
}

// Restore rebuilds the recorded state as of opts.Seq (or the latest) from
// b into a new store at dir: the newest readable checkpoint at or before
// it, then the edits in order (a missing one is ErrGap), then every
// segment fetched, verified (its digest and size, and every record, as
// segstore.ReplaceAll checks them) and installed in one commit. The store
// is built in a temporary sibling directory and renamed to dir only when
// complete: dir holds the whole restored store or nothing new. dir must
// not exist or be empty. Before it starts, Restore removes what earlier
// restores into dir left when they were killed (CleanRestores); a failure
// to remove one is reported in CleanErrors and does not stop the restore.
func Restore(ctx context.Context, b bucket.Bucket, dir string, opts *RestoreOptions) (res RestoreResult, err error) {
	var o RestoreOptions
	if opts != nil {
		o = *opts
	}
	var so segstore.Options
	if o.Store != nil {
		so = *o.Store
	}
	if so.FS == nil {
		so.FS = vfs.NewOS()
	}
	fsys := so.FS
	dir = filepath.Clean(dir)
	if names, err := fsys.List(dir); err == nil && len(names) > 0 {
		return res, fmt.Errorf("%w: %s", ErrTargetExists, dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("backup: restore: %w", err)
	}
	c, err := loadChain(ctx, b, o.Seq)
	if err != nil {
		return res, err
	}
	res.Seq, res.Objects, res.Skipped = c.st.seq, c.reads, c.skipped
	segs := c.st.sorted()
	res.Segments = len(segs)

	var rnd [restoreRandBytes]byte
	_, _ = rand.Read(rnd[:])
	parent := filepath.Dir(dir)
	if err := fsys.MkdirAll(parent); err != nil {
		return res, fmt.Errorf("backup: restore: %w", err)
	}
	res.Cleaned, res.CleanErrors = cleanRestores(fsys, dir)
	tmp := filepath.Join(parent, restorePrefix(dir)+hex.EncodeToString(rnd[:]))
	// The lock marks tmp as in use for as long as this call may touch it:
	// taken before tmp exists, released after tmp is renamed onto dir or
	// removed. A process that dies releases it, which is what lets a later
	// restore prove tmp abandoned.
	lock, err := fsys.Lock(tmp + restoreLockSuffix)
	if err != nil {
		return res, fmt.Errorf("backup: restore: lock %s: %w", tmp+restoreLockSuffix, err)
	}
	defer func() {
		if err != nil {
			removeAll(fsys, tmp)
		}
		lock.Close()
		_ = fsys.Remove(tmp + restoreLockSuffix) // a lock file left behind is removed by the next restore
	}()
	st, err := segstore.Open(tmp, &so)
	if err != nil {
		return res, fmt.Errorf("backup: restore: open %s: %w", tmp, err)
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	streams := make([]*lazyObject, len(segs))
	rs := make([]segstore.ReplaceSegment, len(segs))
	for i, s := range segs {
		streams[i] = &lazyObject{ctx: ctx, b: b, key: segmentObject(s.SegmentKey), onDone: func(int64) {
			if o.Progress != nil {
				o.Progress(i+1, len(segs), streams[i].n)
			}
		}}
		rs[i] = segstore.ReplaceSegment{Digest: s.Digest, Size: s.Size, Data: streams[i]}
	}
	_, err = st.ReplaceAll(ctx, rs)
	for _, s := range streams {
		res.Bytes += s.n
		s.close()
	}
	if err != nil {
		var ie *segstore.ImportError
		if errors.As(err, &ie) && ie.Stream >= 0 && ie.Stream < len(segs) {
			key := segmentObject(segs[ie.Stream].SegmentKey)
			if errors.Is(err, bucket.ErrNotFound) {
				return res, fmt.Errorf("backup: restore: segment object %s is missing: %w", key, err)
			}
			if errors.Is(err, segstore.ErrCorrupt) {
				return res, fmt.Errorf("%w: %s: %w", ErrCorruptObject, key, err)
			}
			return res, fmt.Errorf("backup: restore: %s: %w", key, err)
		}
		return res, fmt.Errorf("backup: restore: %w", err)
	}
	closed = true
	if err := st.Close(); err != nil {
		return res, fmt.Errorf("backup: restore: close: %w", err)
	}
	// An empty dir is replaced by the rename (rename(2) allows it).
	if err := fsys.Rename(tmp, dir); err != nil {
		return res, fmt.Errorf("backup: restore: rename %s to %s: %w", tmp, dir, err)
	}
	if err := fsys.SyncDir(parent); err != nil {
		return res, fmt.Errorf("backup: restore: sync %s: %w", parent, err)
	}
	return res, nil
}

// Temporary directories of a restore into dir are named
// restorePrefix(dir) + 12 random hex digits, each beside a lock file of the
// same name + restoreLockSuffix.
const (
	restoreRandBytes  = 6
	restoreLockSuffix = ".lock"
)

func restorePrefix(dir string) string { return "." + filepath.Base(dir) + ".restore-" }

// CleanRestores removes what restores into dir (through fsys) left beside
// it when they were killed: hidden directories .<name>.restore-<random>
// and their lock files. It removes only those provably abandoned: a
// restore locks <directory>.lock before it creates the directory and
// holds the lock until the directory is renamed onto dir or removed, so a
// lock that can be taken belongs to a restore that is no longer running
// (the operating system releases a dead process's lock). A directory
// whose lock is held (a restore running now, in this process or another)
// is left alone, and so is one without a lock file at all (made by a
// segbackup from before the lock existed: whether its restore still runs
// cannot be told; remove it by hand once none does). It returns the
// directories removed; errors say what could not be.
//
// Restore calls it first; it is safe to call while other restores run.
func CleanRestores(fsys vfs.FS, dir string) (removed []string, err error) {
	removed, errs := cleanRestores(fsys, filepath.Clean(dir))
	return removed, errors.Join(errs...)
}

func cleanRestores(fsys vfs.FS, dir string) (removed []string, errs []error) {
	parent, prefix := filepath.Dir(dir), restorePrefix(dir)
	names, err := fsys.List(parent)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{fmt.Errorf("backup: clean restores: %w", err)}
	}
	seen := map[string]bool{}
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		rnd := strings.TrimSuffix(rest, restoreLockSuffix)
		if !isRestoreRand(rnd) || seen[rnd] {
			continue
		}
		seen[rnd] = true
		tmp := filepath.Join(parent, prefix+rnd)
		gone, err := cleanRestore(fsys, tmp)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, tmp)
		}
	}
	if len(removed) > 0 {
		if err := fsys.SyncDir(parent); err != nil {
			errs = append(errs, fmt.Errorf("backup: clean restores: sync %s: %w", parent, err))
		}
	}
	return removed, errs
}

// cleanRestore removes the restore directory tmp and its lock file if its
// lock can be taken; removed says whether tmp existed and is gone.
func cleanRestore(fsys vfs.FS, tmp string) (removed bool, err error) {
	lockPath := tmp + restoreLockSuffix
	if _, err := fsys.Stat(lockPath); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // no lock file: not provably abandoned
		}
		return false, fmt.Errorf("backup: clean restores: %w", err)
	}
	lock, err := fsys.Lock(lockPath)
	if errors.Is(err, vfs.ErrLocked) {
		return false, nil // a restore running now
	}
	if err != nil {
		return false, fmt.Errorf("backup: clean restores: lock %s: %w", lockPath, err)
	}
	_, lerr := fsys.List(tmp)
	existed := lerr == nil
	if existed {
		removeAll(fsys, tmp)
		if _, err := fsys.List(tmp); !errors.Is(err, fs.ErrNotExist) {
			lock.Close()
			return false, fmt.Errorf("backup: clean restores: could not remove all of %s (%v)", tmp, err)
		}
	}
	// Released before the lock file goes (a file still open cannot be
	// removed everywhere); a restore never locks the same name again, and
	// another cleaner that takes it now finds tmp gone.
	lock.Close()
	if err := fsys.Remove(lockPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return existed, fmt.Errorf("backup: clean restores: %w", err)
	}
	return existed, nil
}

func isRestoreRand(s string) bool {
	if len(s) != 2*restoreRandBytes {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// lazyObject opens its object on the first Read, so ReplaceAll can skip
// streams it does not need without a request.
type lazyObject struct {
	ctx    context.Context
	b      bucket.Bucket
	key    string
	rc     io.ReadCloser
	n      int64
	onDone func(n int64)
	done   bool
}

func (l *lazyObject) Read(p []byte) (int, error) {
	if l.rc == nil {
		rc, err := l.b.Get(l.ctx, l.key, 0, -1)
		if err != nil {
			return 0, err
		}
		l.rc = rc
	}
	n, err := l.rc.Read(p)
	l.n += int64(n)
	if err == io.EOF && !l.done {
		l.done = true
		l.onDone(l.n)
	}
	return n, err
}

func (l *lazyObject) close() {
	if l.rc != nil {
		l.rc.Close()
	}
}

// removeAll removes dir and everything under it, through fsys (which has
// no RemoveAll): entries that List can open as directories are recursed.
func removeAll(fsys vfs.FS, dir string) {
	names, err := fsys.List(dir)
	if err != nil {
		return
	}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := fsys.Remove(p); err != nil {
			removeAll(fsys, p)
		}
	}
	fsys.Remove(dir)
}
