package segstore

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// A follower mirrors a leader's sealed segments exactly: the same
// segments, in the same order (the leader's Orders), with the leader's
// removals applied. That is what makes it read what the leader read: a
// merge that dropped tombstones, or a merge of old segments that is older
// than what came after it, is only right together with the leader's
// removals and its order, which an Import (newest wins, nothing removed)
// does not reproduce. Each mirrored segment records the leader's id
// (SegmentMeta.Origin) and the follower's manifest records the leader's
// ManifestSeq it mirrors (Followed), both in the commit that installs them,
// so a crash leaves either the old mirror or the new one, whole.

// ErrDiverged is returned by Follow when the store holds data of its own
// besides what it mirrors: unsealed writes, or sealed segments that did not
// come from the leader (local writes sealed, imports, a ReplaceAll). A
// mirror with local data could not read what the leader read; the local
// data is not discarded silently. Start a follower from an empty store, or
// empty it with ReplaceAll(ctx, nil) to start over.
var ErrDiverged = errors.New("segkv: the store holds data of its own; it cannot mirror a leader")

// ErrFollowGap is returned by Follow for Changes that do not start where
// the follower stands: Changes.Since differs from FollowedSeq (and the
// changes are not a full listing, nor the state the follower already
// mirrors). Ask the leader for ChangesSince(FollowedSeq()).
var ErrFollowGap = errors.New("segkv: changes do not start at the seq the store mirrors")

// FollowedSeq returns the leader's ManifestSeq that the store's sealed
// segments mirror (the Seq of the last Follow), 0 if it never followed.
// Pass it to the leader's ChangesSince for the next Follow.
func (s *Store) FollowedSeq() uint64 { return s.mlog.Followed() }

// followPart is one segment of the mirrored state a Follow installs.
type followPart struct {
	info   SegmentInfo // the leader's description
	local  *sealed     // the follower's copy, already held
	copied *sealed     // else the segment fetched for this Follow
}

// Follow makes the store's sealed segments mirror the leader's as described by ch (from the leader's
// ChangesSince): it fetches, through open, only the segments it does not already hold, and applies the
// leader's additions, their order, and its removals in one manifest commit. All or nothing.
//
// After it returns nil the store's sealed segments are exactly the leader's
// at ch.Seq (FollowedSeq() == ch.Seq): when the leader's live file was
// empty at ch.Seq (it had sealed), every Get and iterator on the follower
// answers what the leader answered then. Segments are matched by the
// leader's id and digest; each fetched stream is validated record by record
// like an Import, its index is built locally, and it must have the digest
// and size ch claims (else an *ImportError, errors.Is ErrCorrupt). New files
// share one directory sync; the commit is one manifest append.
//
// Rules: ch must start where the store stands (ch.Since == FollowedSeq(),
// else ErrFollowGap), unless it is a full listing (Complete false), which
// is always accepted, or describes the state already mirrored (ch.Seq ==
// FollowedSeq(): nothing to do, so a re-run is harmless). A store that
// holds writes of its own is refused with ErrDiverged and left as it is.
// The store's merges never touch mirrored segments (the leader's merges
// reach it through Follow). On any error nothing changed, and a crash in
// the middle leaves the state before the call: re-running the same Follow
// ends in the same place. open is called at most once per fetched segment,
// and the reader it returns is closed.
func (s *Store) Follow(ctx context.Context, ch Changes, open func(SegmentInfo) (io.ReadCloser, error)) error {
	if ctx == nil || open == nil {
		return fmt.Errorf("%w: nil context or open func", ErrInvalidOption)
	}
	if err := checkChanges(ch); err != nil {
		return err
	}
	if err := s.enter(true); err != nil {
		return err
	}
	defer s.ops.leave()
	ctx, done := s.opContext(ctx)
	defer done()
	// One Follow at a time, and no Import beside it (an import is a
	// segment of the store's own).
	s.importMu.Lock()
	defer s.importMu.Unlock()

	followed := s.mlog.Followed()
	if ch.Seq == followed && followed != 0 {
		return s.checkMirror()
	}
	if ch.Complete && ch.Since != followed {
		return fmt.Errorf("%w: changes since %d, the store mirrors %d", ErrFollowGap, ch.Since, followed)
	}
	if err := s.checkMirror(); err != nil {
		return err
	}
	mirrored := s.mirroredSegments()
	parts, remove, err := planFollow(ch, mirrored)
	if err != nil {
		return err
	}

	var copied []*sealed
	cleanup := func() {
		for _, sg := range copied {
			s.discardUncommitted(sg)
		}
	}
	for i := range parts {
		p := &parts[i]
		if p.local != nil {
			continue
		}
		sg, err := s.fetchFollowed(ctx, i, p.info, open)
		if err != nil {
			cleanup()
			return err
		}
		copied = append(copied, sg)
		p.copied = sg
	}
	if err := ctxErr(ctx); err != nil {
		cleanup()
		return err
	}
	if len(copied) > 0 {
		// One directory sync makes every new file's entry durable before
		// the manifest names it.
		if err := s.fs.SyncDir(s.dir); err != nil {
			cleanup()
			return fmt.Errorf("segkv: follow: sync directory: %w", err)
		}
	}

	spec := commitSpec{remove: remove, mirror: true, followed: ch.Seq}
	for _, p := range parts {
		spec.nextOrder = max(spec.nextOrder, p.info.Order+1)
		switch {
		case p.copied != nil:
			p.copied.meta.Order, p.copied.meta.Origin = p.info.Order, p.info.ID
			spec.add = append(spec.add, p.copied)
		case p.local.meta.Order != p.info.Order:
			// The leader restated the segment under a new order (its
			// ReplaceAll reorders the segments it keeps).
			m := p.local.meta
			m.Order = p.info.Order
			spec.restate = append(spec.restate, &sealed{meta: m, df: p.local.df, ix: p.local.ix})
		}
	}
	s.commitMu.Lock()
	// Checked again where no commit can slip in: a segment of the store's
	// own committed since the first check (a seal of a concurrent write)
	// would survive the mirror's commit unnoticed.
	if err := s.checkSegmentsMirroredLocked(); err != nil {
		s.commitMu.Unlock()
		cleanup()
		return err
	}
	err = s.commitLocked(spec)
	s.commitMu.Unlock()
	if err != nil {
		// A failed commit fails the store; it may be durable, so the new
		// files stay for the next Open to keep or remove.
		for _, sg := range copied {
			sg.df.unmap()
		}
		return err
	}
	s.stats.imports.Add(int64(len(copied)))
	return nil
}

// checkChanges validates what a caller passes as Changes: ids and orders
// set, no id or order twice, no id both added and removed.
func checkChanges(ch Changes) error {
	ids := make(map[uint64]bool, len(ch.Added))
	orders := make(map[uint64]bool, len(ch.Added))
	for i, in := range ch.Added {
		switch {
		case in.ID == 0 || in.Order == 0:
			return fmt.Errorf("%w: Changes.Added[%d] has id %d, order %d", ErrInvalidOption, i, in.ID, in.Order)
		case in.Size < 0:
			return fmt.Errorf("%w: Changes.Added[%d] has negative size", ErrInvalidOption, i)
		case ids[in.ID] || orders[in.Order]:
			return fmt.Errorf("%w: Changes.Added lists id %d or order %d twice", ErrInvalidOption, in.ID, in.Order)
		}
		ids[in.ID], orders[in.Order] = true, true
	}
	if !ch.Complete && len(ch.Removed) > 0 {
		return fmt.Errorf("%w: a full listing (Complete false) with removals", ErrInvalidOption)
	}
	removed := make(map[uint64]bool, len(ch.Removed))
	for _, id := range ch.Removed {
		if ids[id] || removed[id] {
			return fmt.Errorf("%w: Changes.Removed lists id %d twice or also adds it", ErrInvalidOption, id)
		}
		removed[id] = true
	}
	if ch.Complete && ch.Seq < ch.Since {
		return fmt.Errorf("%w: Changes.Seq %d is before Since %d", ErrInvalidOption, ch.Seq, ch.Since)
	}
	return nil
}

// checkMirror returns ErrDiverged when the store holds data of its own: a
// write in the live file, or a sealed segment that no leader gave it.
func (s *Store) checkMirror() error {
	s.mu.RLock()
	live, frozen := s.mu.tail, s.mu.frozen
	s.mu.RUnlock()
	if frozen != nil || !live.empty() {
		return fmt.Errorf("%w: it has unsealed writes", ErrDiverged)
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.checkSegmentsMirroredLocked()
}

// checkSegmentsMirroredLocked: ErrDiverged unless every installed segment
// is mirrored. commitMu held (no commit changes the set meanwhile).
func (s *Store) checkSegmentsMirroredLocked() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sg := range s.mu.segs {
		if sg.meta.Origin == 0 {
			return fmt.Errorf("%w: segment %d is its own", ErrDiverged, sg.meta.ID)
		}
	}
	return nil
}

// mirroredSegments maps the leader's id of each installed segment to it.
func (s *Store) mirroredSegments() map[uint64]*sealed {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[uint64]*sealed, len(s.mu.segs))
	for _, sg := range s.mu.segs {
		out[sg.meta.Origin] = sg
	}
	return out
}

// planFollow computes the mirrored state ch leads to from mirrored (the
// leader's id -> the local copy): the parts (oldest first; a local copy
// where one with the same digest and size is held) and the local ids to
// remove. For a history (Complete) every removed id must be mirrored;
// anything else means ch does not describe the history the follower went
// through, and it is refused.
func planFollow(ch Changes, mirrored map[uint64]*sealed) ([]followPart, []uint64, error) {
	target := make(map[uint64]SegmentInfo)
	if ch.Complete {
		for origin, sg := range mirrored {
			target[origin] = SegmentInfo{ID: origin, Order: sg.meta.Order, Digest: sg.meta.DataDigest, Size: sg.meta.DataLength}
		}
		for _, id := range ch.Removed {
			if _, ok := target[id]; !ok {
				return nil, nil, fmt.Errorf("%w: the leader removed segment %d, which the store does not mirror", ErrFollowGap, id)
			}
			delete(target, id)
		}
	}
	for _, in := range ch.Added {
		target[in.ID] = in
	}
	parts := make([]followPart, 0, len(target))
	for _, in := range target {
		p := followPart{info: in}
		if sg := mirrored[in.ID]; sg != nil && sg.meta.DataDigest == in.Digest && sg.meta.DataLength == in.Size {
			p.local = sg
		}
		parts = append(parts, p)
	}
	sortParts(parts)
	for i := 1; i < len(parts); i++ {
		if parts[i].info.Order == parts[i-1].info.Order {
			return nil, nil, fmt.Errorf("%w: segments %d and %d would share order %d", ErrFollowGap, parts[i-1].info.ID, parts[i].info.ID, parts[i].info.Order)
		}
	}
	keep := make(map[uint64]bool, len(parts))
	for _, p := range parts {
		if p.local != nil {
			keep[p.local.meta.ID] = true
		}
	}
	var remove []uint64
	for _, sg := range mirrored {
		if !keep[sg.meta.ID] {
			remove = append(remove, sg.meta.ID)
		}
	}
	return parts, remove, nil
}

func sortParts(parts []followPart) {
	infos := make([]SegmentInfo, len(parts))
	byOrder := make(map[uint64]followPart, len(parts))
	for i, p := range parts {
		infos[i] = p.info
		byOrder[p.info.Order] = p
	}
	sortInfos(infos)
	for i, in := range infos {
		parts[i] = byOrder[in.Order]
	}
}

// fetchFollowed copies the leader's segment in through open, validated like
// an import, and checks that it is the segment ch claims. Errors are
// *ImportError naming the part's position.
func (s *Store) fetchFollowed(ctx context.Context, i int, in SegmentInfo, open func(SegmentInfo) (io.ReadCloser, error)) (*sealed, error) {
	rc, err := open(in)
	if err != nil {
		return nil, &ImportError{Stream: i, Offset: -1, Err: fmt.Errorf("segkv: follow: open segment %d: %w", in.ID, err)}
	}
	if rc == nil {
		return nil, &ImportError{Stream: i, Offset: -1, Err: fmt.Errorf("%w: open returned a nil reader for segment %d", ErrInvalidOption, in.ID)}
	}
	defer rc.Close()
	return s.copyClaimed(ctx, i, fmt.Sprintf("leader segment %d", in.ID), rc, in.Size, in.Digest)
}
