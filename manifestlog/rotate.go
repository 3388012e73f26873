package manifestlog

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

var errNotExist = fs.ErrNotExist

// chunkPayload bounds the payload of one checkpoint segments record, so that
// a large state becomes many modest frames rather than one huge one.
const chunkPayload = 64 << 10

// writeBuffer is how much of a checkpoint is buffered before one WriteAt.
const writeBuffer = 1 << 20

// snapshot is what a checkpoint records.
type snapshot struct {
	gen, seq, liveID, nextID, nextOrder, followed uint64
	adopted                                       []uint64
	segs                                          map[uint64]SegmentMeta
}

// snapshotLocked captures the state's counters and lists for a checkpoint
// of generation gen; segs is shared (the caller freezes it). mu held.
func (l *Log) snapshotLocked(gen uint64) *snapshot {
	return &snapshot{gen: gen, seq: l.seq.Load(), liveID: l.liveID, nextID: l.nextID, nextOrder: l.nextOrder,
		followed: l.followed, adopted: slices.Clone(l.adopted), segs: l.segs}
}

// writeCheckpoint creates path and writes the header and checkpoint frames
// (watermark 0: nothing of the new file is synced yet), preallocates ahead,
// and syncs the file. It returns the file, the checkpoint's end offset and
// the allocated size. The caller makes the directory entry durable.
func (l *Log) writeCheckpoint(path string, s *snapshot) (_ vfs.File, end, alloc int64, err error) {
	f, err := l.fsys.Create(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("manifestlog: create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	// Deterministic output (sorted by id): the golden file and the
	// equivalence tests rely on it, and it costs O(n log n) off the lock.
	ids := make([]uint64, 0, len(s.segs))
	for id := range s.segs {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	buf := make([]byte, 0, min(writeBuffer+2*chunkPayload, 64+len(ids)*96))
	buf = wal.AppendFrame(buf, appendHeader(nil, s.gen), 0)
	buf = wal.AppendFrame(buf, appendCheckpoint(nil, s, uint64(len(ids))), 0)
	flush := func() error {
		l.ensureAlloc(f, &alloc, end+int64(len(buf)))
		if _, err := f.WriteAt(buf, end); err != nil {
			return err
		}
		end += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	var chunk []*SegmentMeta
	payload := make([]byte, 0, chunkPayload+256)
	size := 0
	emit := func() error {
		payload = appendSegments(payload[:0], chunk)
		buf = wal.AppendFrame(buf, payload, 0)
		chunk, size = chunk[:0], 0
		if len(buf) >= writeBuffer {
			return flush()
		}
		return nil
	}
	for _, id := range ids {
		m := s.segs[id]
		// Close the chunk before it would pass the bound, so that a chunk
		// is never larger than its largest segment's own edit record was
		// (which Commit kept within a frame's limit).
		if ms := segmentSize(&m); len(chunk) > 0 && size+ms > chunkPayload {
			if err := emit(); err != nil {
				return nil, 0, 0, fmt.Errorf("manifestlog: write checkpoint %s: %w", path, err)
			}
		}
		chunk = append(chunk, &m)
		size += segmentSize(&m)
	}
	if len(chunk) > 0 {
		if err := emit(); err != nil {
			return nil, 0, 0, fmt.Errorf("manifestlog: write checkpoint %s: %w", path, err)
		}
	}
	if len(buf) > 0 {
		if err := flush(); err != nil {
			return nil, 0, 0, fmt.Errorf("manifestlog: write checkpoint %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return nil, 0, 0, fmt.Errorf("manifestlog: sync %s: %w", path, err)
	}
	return f, end, alloc, nil
}

// create writes generation gen holding the current (empty or given) state,
// activated, and makes it durable with its directory entry. Used for a fresh
// log; l is not yet shared.
func (l *Log) create(gen uint64) error {
	path := filepath.Join(l.dir, genName(gen))
	s := l.snapshotLocked(gen)
	f, end, alloc, err := l.writeCheckpoint(path, s)
	if err != nil {
		return err
	}
	l.stats.Syncs++
	act := appendGroups(nil, end, [][]byte{appendActivate(nil, s.seq)}, uint64(end))
	l.ensureAlloc(f, &alloc, end+int64(len(act)))
	_, err = f.WriteAt(act, end)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		l.stats.Syncs++
		// The directory entry must be durable before any commit is
		// acknowledged in this file.
		err = l.fsys.SyncDir(l.dir)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("manifestlog: create %s: %w", path, err)
	}
	l.f, l.path, l.gen = f, path, gen
	l.ckptEnd, l.ckptSeq = end, s.seq
	l.end = end + int64(len(act))
	l.synced, l.alloc = l.end, alloc
	return nil
}

// maybeRotate starts a background rotation when the bytes appended since the
// checkpoint exceed max(CheckpointRatio x checkpoint size, MinCheckpointBytes).
// Because a rotation writes about one checkpoint's worth of bytes only after
// at least CheckpointRatio times as much was appended, the amortized bytes
// per commit stay O(size of an edit) at any state size. mu held.
func (l *Log) maybeRotate() {
	if l.bgRunning || l.closed || l.err != nil || l.f == nil {
		return
	}
	since := l.end - l.ckptEnd
	trigger := max(int64(l.opts.CheckpointRatio*float64(l.ckptEnd)), l.opts.MinCheckpointBytes)
	if since <= trigger || since < l.rotRetry {
		return
	}
	l.bgRunning = true
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.rotMu.Lock()
		err := l.rotate()
		l.rotMu.Unlock()
		l.mu.Lock()
		l.bgRunning = false
		if err != nil {
			// The old generation is still complete and in use; retry
			// after as many bytes again.
			l.rotRetry = (l.end - l.ckptEnd) + trigger
			l.stats.RotationFailures++
			l.log.Warn("manifestlog: checkpoint rotation failed; will retry", "err", err)
		}
		l.mu.Unlock()
	}()
}

// Checkpoint rotates to a new generation now (waiting for a background
// rotation first).
func (l *Log) Checkpoint() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.Unlock()
	l.rotMu.Lock()
	defer l.rotMu.Unlock()
	return l.rotate()
}

// rotate writes a new generation with copy-forward, so that commits are not
// held up by the checkpoint write:
//
//  1. under mu, snapshot the counters at seq S and freeze the segment map
//     (later commits go to an overlay and to a backlog of their payloads);
//  2. without mu, write header + checkpoint to MANIFEST-<gen+1>, fdatasync it,
//     and fsync the directory so its entry is durable;
//  3. holding the write token (commits queue meanwhile), append the backlog
//     (edits after S) and an activate record, with their replica, in one
//     write, fdatasync, and
//     switch commits to the new file;
//  4. remove the old generation (not dir-synced: Open removes it again).
//
// A crash before step 3's sync leaves the new file unactivated and Open
// ignores it; after it, the new file holds every acknowledged commit.
// rotMu held.
func (l *Log) rotate() error {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return l.err
	}
	if l.f == nil {
		l.mu.Unlock()
		return ErrClosed
	}
	l.maxGen++
	s := l.snapshotLocked(l.maxGen)
	l.rotating = true
	l.over = map[uint64]*SegmentMeta{}
	l.backlog = nil
	l.mu.Unlock()

	path := filepath.Join(l.dir, genName(s.gen))
	f, ckptEnd, alloc, err := l.writeCheckpoint(path, s)
	if err == nil {
		err = l.fsys.SyncDir(l.dir)
		if err != nil {
			err = fmt.Errorf("manifestlog: sync dir %s: %w", l.dir, err)
		}
	}
	l.mu.Lock()
	l.stats.Syncs++
	if err != nil {
		l.unfreeze()
		l.mu.Unlock()
		l.discard(f, path)
		return err
	}

	// Take the write token; mu is released meanwhile, as a group's leader
	// needs it.
	l.mu.Unlock()
	l.gc.Acquire()
	l.mu.Lock()
	if l.err != nil || l.f == nil {
		ferr := l.err
		if ferr == nil {
			ferr = ErrClosed
		}
		l.unfreeze()
		l.gc.Release()
		l.mu.Unlock()
		l.discard(f, path)
		return ferr
	}
	seq := l.seq.Load()
	group := append(slices.Clip(l.backlog), appendActivate(nil, seq))
	buf := appendGroups(nil, ckptEnd, group, uint64(ckptEnd))
	l.mu.Unlock()

	l.ensureAlloc(f, &alloc, ckptEnd+int64(len(buf)))
	_, err = f.WriteAt(buf, ckptEnd)
	if err == nil {
		err = f.Sync()
	}

	l.mu.Lock()
	l.stats.Syncs++
	if err != nil {
		// The activate record may or may not be durable: after a crash
		// Open might pick the new file, so the old one must not take
		// further commits. Stop, as after any failed sync.
		l.err = fmt.Errorf("%w: activating %s: %w", ErrFailed, path, err)
		l.log.Error("manifestlog: rotation failed after activation write; refusing further commits", "path", path, "err", err)
		l.unfreeze()
		l.gc.Fail(l.err)
		l.gc.Release()
		l.mu.Unlock()
		f.Close()
		return l.err
	}
	old, oldPath := l.f, l.path
	l.f, l.path, l.gen = f, path, s.gen
	l.ckptEnd, l.ckptSeq = ckptEnd, s.seq
	l.end = ckptEnd + int64(len(buf))
	l.synced, l.alloc = l.end, alloc
	l.stats.CopiedForward += uint64(len(l.backlog))
	l.unfreeze()
	// The change lists restart at the checkpoint: what is older is in it.
	i, _ := slices.BinarySearchFunc(l.adds, s.seq+1, func(a added, t uint64) int { return cmpU64(a.seq, t) })
	l.adds = slices.Clone(l.adds[i:])
	j, _ := slices.BinarySearchFunc(l.rems, s.seq+1, func(r removed, t uint64) int { return cmpU64(r.seq, t) })
	l.rems = slices.Clone(l.rems[j:])
	l.stats.Rotations++
	l.gc.Release()
	l.mu.Unlock()

	if err := old.Close(); err != nil {
		l.log.Warn("manifestlog: close old generation", "path", oldPath, "err", err)
	}
	if err := l.fsys.Remove(oldPath); err != nil && !errors.Is(err, errNotExist) {
		l.log.Warn("manifestlog: remove old generation (Open will retry)", "path", oldPath, "err", err)
	}
	if l.opts.OnRotate != nil {
		l.opts.OnRotate(s.gen, s.seq, ckptEnd)
	}
	return nil
}

// unfreeze folds the overlay into the segment map and ends the rotation
// window. mu held.
func (l *Log) unfreeze() {
	for id, m := range l.over {
		if m == nil {
			delete(l.segs, id)
		} else {
			l.segs[id] = *m
		}
	}
	l.over = nil
	l.rotating = false
	l.backlog = nil
}

// discard closes and removes a generation that was never activated. Its
// removal need not be durable: Open removes an unactivated generation.
func (l *Log) discard(f vfs.File, path string) {
	if f != nil {
		f.Close()
	}
	if err := l.fsys.Remove(path); err != nil && !errors.Is(err, errNotExist) {
		l.log.Warn("manifestlog: remove abandoned generation", "path", path, "err", err)
	}
}
