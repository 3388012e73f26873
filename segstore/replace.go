package segstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/wal"
)

// errReplaced is the cause with which ReplaceAll stops a merge step in
// progress: the state the step would fold is about to be replaced.
var errReplaced = errors.New("segkv: merge step stopped by ReplaceAll")

// ReplaceSegment is one segment of the state ReplaceAll installs.
type ReplaceSegment struct {
	Digest uint64    // SegmentInfo.Digest of the exported segment
	Size   int64     // SegmentInfo.Size
	Data   io.Reader // the exported data file; not read at all when a local segment has the same Digest and Size
}

// replacePart is one segment of the state a ReplaceAll installs: a local
// segment it keeps, or one it copied from its stream.
type replacePart struct {
	stream int     // index in ReplaceAll's segs
	local  *sealed // a local segment with the stream's digest and size, kept as it is
	copied *sealed // else the segment copied from the stream (not yet committed)
}

// ReplaceAll replaces the store's whole state (every sealed segment AND the
// live file's writes) by segs, given oldest first, in one manifest commit:
// afterwards the store holds exactly the keys the segments hold (keys absent
// from them are gone), shadowing among them as their order says. Segments
// whose Digest and Size are already local are reused: the file is kept, not
// copied, and its Data is not read; it is given its place in the new order.
// A segment that a later one in segs repeats (same Digest and Size) is
// shadowed whole by it and is skipped, its Data unread. Streams are
// validated like Import's, record by record, and their digest and length
// must equal the claimed Digest and Size; a bad stream, a reader error or a
// cancelled ctx fails the whole call with an *ImportError naming the stream
// (errors.Is(err, ErrCorrupt) for damage, a mismatch, or a stream shorter or
// longer than Size), and nothing changes. Returns the infos of the store's
// segments afterwards, oldest first. Empty segs makes the store empty.
//
// Atomicity: the commit names the new segments and a new, empty live file
// together, so after any crash the store opens either to its old state,
// complete, or to the new one, complete. Every write acknowledged before the
// call began is gone; a write concurrent with it lands wholly before the
// commit (and is gone) or after it (and is kept); one begun after the call
// returned is kept. Writers wait for the commit itself (one manifest append
// and fdatasync), not for the copying.
// Open snapshots and iterators keep seeing the old state until closed.
// A merge step in progress is stopped (its work would be replaced) and none
// runs until the call returns. docs/DESIGN.md, "Replace-all import", has
// the barriers.
func (s *Store) ReplaceAll(ctx context.Context, segs []ReplaceSegment) ([]SegmentInfo, error) {
	return s.ReplaceAllChecked(ctx, segs, nil)
}

// ReplaceAllChecked is ReplaceAll with a last check: once every stream the
// call reads has been copied and validated (which streams those are is
// decided under the lock that keeps merges out, so a caller cannot know it
// beforehand), and before the commit, check (if not nil) is called; an
// error from it fails the call and nothing changes. A caller whose streams
// are parts of one container uses it to verify the rest of the container.
func (s *Store) ReplaceAllChecked(ctx context.Context, segs []ReplaceSegment, check func() error) ([]SegmentInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	for i, sg := range segs {
		if sg.Size < 0 {
			return nil, &ImportError{Stream: i, Offset: -1, Err: fmt.Errorf("%w: negative size %d", ErrInvalidOption, sg.Size)}
		}
	}
	if err := s.enter(true); err != nil {
		return nil, err
	}
	defer s.ops.leave()
	ctx, done := s.opContext(ctx)
	defer done()

	// Stop the merge step in progress and keep new ones from picking a run
	// (replacing), then wait until no step runs (replaceMu).
	s.commitMu.Lock()
	s.replacing++
	if s.mergeCancel != nil {
		s.mergeCancel(errReplaced)
	}
	s.commitMu.Unlock()
	s.replaceMu.Lock()
	defer func() {
		s.commitMu.Lock()
		s.replacing--
		s.commitMu.Unlock()
		s.replaceMu.Unlock()
	}()

	parts := s.planReplace(segs)
	defer func() {
		s.commitMu.Lock()
		for _, p := range parts {
			if p.local != nil {
				delete(s.merging, p.local.meta.ID)
			}
		}
		s.commitMu.Unlock()
	}()

	var copied []*sealed
	cleanup := func() {
		for _, sg := range copied {
			s.discardUncommitted(sg)
		}
	}
	for j := range parts {
		p := &parts[j]
		if p.local != nil {
			continue
		}
		sg, err := s.replaceCopy(ctx, p.stream, segs[p.stream])
		if err != nil {
			cleanup()
			return nil, err
		}
		copied = append(copied, sg)
		p.copied = sg
	}
	if err := ctxErr(ctx); err != nil {
		cleanup()
		return nil, err
	}
	// One directory sync makes every new file's entry durable; only then may
	// the manifest name them.
	if len(copied) > 0 {
		if err := s.fs.SyncDir(s.dir); err != nil {
			cleanup()
			return nil, fmt.Errorf("segkv: replace: sync directory: %w", err)
		}
	}
	if check != nil {
		if err := check(); err != nil {
			cleanup()
			return nil, err
		}
	}
	out, maybeCommitted, err := s.commitReplace(ctx, parts)
	if err != nil {
		if !maybeCommitted {
			cleanup()
		}
		return nil, err
	}
	s.bg.requestMerge()
	return out, nil
}

// planReplace decides, for each segment of segs, whether a local segment
// stands for it or its stream is copied, and claims the local ones, so that
// no commit drops them under a range tombstone before the replace commits
// (merges do not run: replaceMu). A segment that a later one repeats is
// left out: the later copy shadows it whole (same keys, same range
// tombstones), so the state is the same without it.
func (s *Store) planReplace(segs []ReplaceSegment) []replacePart {
	type ident struct {
		digest uint64
		size   int64
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.RLock()
	local := make(map[ident]*sealed, len(s.mu.segs))
	for _, sg := range s.mu.segs {
		local[ident{sg.meta.DataDigest, sg.meta.DataLength}] = sg
	}
	s.mu.RUnlock()
	seen := make(map[ident]bool, len(segs))
	parts := make([]replacePart, 0, len(segs))
	for i := len(segs) - 1; i >= 0; i-- {
		k := ident{segs[i].Digest, segs[i].Size}
		if seen[k] {
			continue
		}
		seen[k] = true
		p := replacePart{stream: i}
		if sg := local[k]; sg != nil {
			p.local = sg
			s.merging[sg.meta.ID] = true
		}
		parts = append(parts, p)
	}
	slices.Reverse(parts)
	return parts
}

// replaceCopy copies stream i into a new ".seg" file, validated like an
// import's, synced, with its index written (unsynced), and checks that it
// is the segment claimed. Errors are *ImportError naming the stream.
func (s *Store) replaceCopy(ctx context.Context, i int, rs ReplaceSegment) (*sealed, error) {
	if rs.Data == nil {
		return nil, &ImportError{Stream: i, Offset: -1, Err: fmt.Errorf("%w: nil Data for a segment the store does not hold", ErrInvalidOption)}
	}
	return s.copyClaimed(ctx, i, fmt.Sprintf("replace stream %d", i), rs.Data, rs.Size, rs.Digest)
}

// discardUncommitted removes the files of a segment copied in (an import,
// a ReplaceAll or a Follow) that no commit named, and its index mapping:
// nobody read it. A failed removal leaves a file the next Open removes as
// uncommitted.
func (s *Store) discardUncommitted(sg *sealed) {
	sg.df.unmap()
	s.fs.Remove(sg.df.path)
	s.fs.Remove(filepath.Join(s.dir, segment.IndexName(sg.df.id)))
}

// copyClaimed copies r, which must hold exactly the data file of size bytes
// and digest claimed, into a new ".seg" file, validated like an import's,
// synced, with its index written (unsynced). A stream that is not the
// segment claimed is corruption; the copy is then removed. Errors are
// *ImportError naming stream i (name in corruption details).
func (s *Store) copyClaimed(ctx context.Context, i int, name string, r io.Reader, size int64, digest uint64) (*sealed, error) {
	sr := &sizedReader{r: r, left: size, size: size, name: name}
	sg, err := s.importOne(ctx, sr)
	if err != nil {
		return nil, importError(ctx, i, err)
	}
	if sg.meta.DataLength != size || sg.meta.DataDigest != digest {
		err := corruption.New(name, -1, "the stream holds %d bytes with digest %016x, the segment claimed is %d bytes with digest %016x",
			sg.meta.DataLength, sg.meta.DataDigest, size, digest)
		s.discardUncommitted(sg)
		return nil, &ImportError{Stream: i, Offset: -1, Err: err}
	}
	return sg, nil
}

// commitReplace names the new segment set and a new, empty live file in one
// manifest commit, with writers held off, and installs them. When the
// commit itself failed it fails the store and reports maybeCommitted: the
// edit may be durable, so the new files must stay for the next Open to keep
// or remove. On any other error nothing changed and the caller removes the
// copies.
func (s *Store) commitReplace(ctx context.Context, parts []replacePart) (_ []SegmentInfo, maybeCommitted bool, _ error) {
	// No seal runs from here on: a seal in progress would commit the old
	// live file after the replace, and its writes would come back.
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if err := s.failed(); err != nil {
		return nil, false, err
	}
	s.mu.RLock()
	old, frozen := s.mu.tail, s.mu.frozen
	s.mu.RUnlock()
	if frozen != nil {
		// Only a seal that failed the store leaves a frozen file behind.
		err := fmt.Errorf("segkv: replace found %s still frozen by an earlier seal", frozen.path)
		s.fail(err)
		return nil, false, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	// The new live file: made durable, with its directory entry, before the
	// manifest can name it (a spare is), and empty. It links to nothing, so
	// recovery never takes it for a continuation of the old live file.
	sp, err := s.takeSpare()
	if err != nil {
		return nil, false, fmt.Errorf("segkv: replace: %w", err)
	}
	if sp.id < old.id {
		// Keep live file ids increasing (recovery looks for a live file's
		// continuations only among higher ids).
		s.discardSpare(sp)
		if sp, err = s.makeSpare(); err != nil {
			return nil, false, fmt.Errorf("segkv: replace: %w", err)
		}
	}
	next := newTail(s, sp.id)
	next.path, next.file, next.df = sp.path, sp.f, s.newDataFile(sp.id, segment.KindLog)
	next.w = wal.NewWriter(s.timedSyncs(sp.f), sp.path, segment.HeaderSize, segment.HeaderSize, s.walOptions(next))

	// An Import checks for duplicates and commits under importMu: it sees
	// the state before the replace or after it, never a mixture.
	s.importMu.Lock()
	defer s.importMu.Unlock()
	// Writers wait from here to the install: every write acknowledged so
	// far is in the old live file, which the commit discards, and every
	// later one goes to the new live file, which the commit names.
	s.writeMu.Lock()
	abort := func(err error) ([]SegmentInfo, bool, error) {
		s.writeMu.Unlock()
		s.discardSpare(sp)
		return nil, false, err
	}
	if err := ctxErr(ctx); err != nil {
		return abort(err)
	}
	if s.closed.Load() {
		// Close has begun (its cancellation of ctx may not have landed
		// yet): commit nothing more.
		return abort(ErrClosed)
	}
	if err := s.failed(); err != nil {
		return abort(err)
	}
	s.commitMu.Lock()
	keep := make(map[uint64]bool, len(parts))
	add := make([]manifestlog.SegmentMeta, len(parts))
	for j, p := range parts {
		m := p.copied
		if p.local != nil {
			keep[p.local.meta.ID] = true
			m = p.local
		}
		add[j] = m.meta
		// The log assigns fresh orders, in this (oldest first) order, above
		// every order in use: a kept segment is restated under its new
		// order, in the same edit that removes the rest.
		add[j].Order, add[j].AddedSeq = 0, 0
		// The new state is the store's own: nothing in it is mirrored
		// from a leader any more (a follower that starts over follows
		// from scratch).
		add[j].Origin = 0
	}
	s.mu.RLock()
	var remove []uint64
	for _, sg := range s.mu.segs {
		if !keep[sg.meta.ID] {
			remove = append(remove, sg.meta.ID)
		}
	}
	s.mu.RUnlock()
	// The commit starts the store's history over: it mirrors no leader
	// (FollowedSeq 0) and has adopted nothing (an import of what it held
	// before is not a re-run).
	c, err := s.commitManifest(manifestlog.Edit{Add: add, Remove: remove, SetLive: true, LiveID: next.id,
		SetFollowed: true, Followed: 0, ForgetAdopted: true})
	if err != nil {
		s.commitMu.Unlock()
		if errors.Is(err, manifestlog.ErrInvalidEdit) {
			// Refused before anything was written (an edit too large).
			return abort(fmt.Errorf("segkv: replace: %w", err))
		}
		// The log failed and refuses every later commit; the edit may be
		// durable or not, so the new files stay, for the next Open to keep
		// or remove.
		s.writeMu.Unlock()
		s.fail(err)
		sp.f.Close()
		for _, p := range parts {
			if p.copied != nil {
				p.copied.df.unmap() // never installed: release the index mapping
			}
		}
		return nil, true, fmt.Errorf("%w: manifest commit: %w", ErrFailed, err)
	}
	installed := make([]*sealed, len(parts))
	for j, p := range parts {
		if p.local != nil {
			installed[j] = p.local.restated(c.Add[j])
			continue
		}
		p.copied.meta = c.Add[j]
		p.copied.df.setSealed(c.Add[j].DataLength)
		installed[j] = p.copied
	}
	out := make([]SegmentInfo, len(installed))
	for j, sg := range installed {
		out[j] = infoOf(sg.meta)
	}
	newestFirst := slices.Clone(installed)
	slices.Reverse(newestFirst)
	s.mu.Lock()
	var retired []*sealed
	for _, sg := range s.mu.segs {
		if !keep[sg.meta.ID] {
			retired = append(retired, sg)
		}
	}
	s.mu.segs = newestFirst
	s.mu.segsSeq = c.Seq
	s.mu.tail = next
	s.mu.Unlock()
	s.commitMu.Unlock()
	s.writeMu.Unlock()

	// Gets hold mu while they read, so none is using a retired file now;
	// snapshots and exports keep theirs pinned until they are done.
	for _, sg := range retired {
		sg.df.retire()
	}
	// The old live file's writes are discarded: a sync that raced this
	// finds it retired; its file goes when the last snapshot reading it is
	// closed (or at the next Open: the manifest no longer names it, and it
	// links to nothing the new live file starts).
	old.syncMu.Lock()
	old.retired = true
	if err := old.file.Close(); err != nil {
		s.log.Warn("segkv: closing the replaced live file failed", slog.String("path", old.path), slog.Any("err", err))
	}
	old.syncMu.Unlock()
	old.df.retire()
	s.log.Debug("segkv: replaced the store's state", slog.Int("segments", len(installed)), slog.Int("copied", len(installed)-len(keep)), slog.Int("kept", len(keep)), slog.Int("removed", len(remove)), slog.Uint64("live", next.id))
	return out, false, nil
}

// sizedReader reads a stream that must hold exactly size bytes: it never
// reads past them but to find out whether the stream ends there, and
// reports a longer stream as corruption at offset size. A shorter one ends
// early, which the caller's checks report.
type sizedReader struct {
	r    io.Reader
	left int64
	size int64
	name string
}

func (r *sizedReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.left <= 0 {
		var probe [1]byte
		n, err := r.r.Read(probe[:])
		if n > 0 {
			return 0, corruption.New(r.name, r.size, "the stream is longer than its claimed size of %d bytes", r.size)
		}
		return 0, err
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.left -= int64(n)
	return n, err
}
