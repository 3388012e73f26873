package backup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/segkv/segkv/backup/bucket"
)

var (
	// ErrGap reports a broken chain: an edit is missing (or unreadable)
	// while later ones exist, so the states after it cannot be rebuilt.
	ErrGap = errors.New("backup: chain of edits is broken")
	// ErrNoBackup reports a prefix that holds no recorded state.
	ErrNoBackup = errors.New("backup: no backup at this location")
	// ErrNotRecorded reports a restore target after the latest recorded
	// state, or before the oldest one still kept (the first one recorded,
	// until a prune).
	ErrNotRecorded = errors.New("backup: sequence not recorded")
)

// state is a recorded segment set.
type state struct {
	seq  uint64
	segs map[SegmentKey]Segment
	// encSize is the size the state's checkpoint object would have.
	encSize int
}

// emptyCheckpointSize is the encoded size of a checkpoint with no
// segments, but a one-byte count (magic, version, seq, time, count,
// checksum).
const emptyCheckpointSize = 4 + 1 + 8 + 8 + 1 + 8

func newState() *state {
	return &state{segs: map[SegmentKey]Segment{}, encSize: emptyCheckpointSize}
}

func stateOf(c *Checkpoint, name string) (*state, error) {
	st := newState()
	st.seq = c.Seq
	for _, s := range c.Segments {
		if _, dup := st.segs[s.SegmentKey]; dup {
			return nil, fmt.Errorf("%w: %s lists segment %s twice", ErrCorruptObject, name, s.SegmentKey)
		}
		st.add(s)
	}
	return st, nil
}

func (st *state) add(s Segment) {
	st.segs[s.SegmentKey] = s
	st.encSize += segmentSize(&s)
}

// apply moves the state forward by e, refusing an edit that does not fit
// it (removing what is absent, adding what is present): such an edit was
// not written against this state.
func (st *state) apply(e *Edit, name string) error {
	if e.Prev != st.seq {
		return fmt.Errorf("%w: %s follows seq %d, the state is at %d", ErrCorruptObject, name, e.Prev, st.seq)
	}
	for _, k := range e.Removed {
		s, ok := st.segs[k]
		if !ok {
			return fmt.Errorf("%w: %s removes segment %s, which the state does not hold", ErrCorruptObject, name, k)
		}
		delete(st.segs, k)
		st.encSize -= segmentSize(&s)
	}
	for _, s := range e.Added {
		if _, ok := st.segs[s.SegmentKey]; ok {
			return fmt.Errorf("%w: %s adds segment %s, which the state holds", ErrCorruptObject, name, s.SegmentKey)
		}
		st.add(s)
	}
	st.seq = e.Seq
	return nil
}

// sorted returns the segments oldest first.
func (st *state) sorted() []Segment {
	out := make([]Segment, 0, len(st.segs))
	for _, s := range st.segs {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Segment) int {
		if c := cmp.Compare(a.Order, b.Order); c != 0 {
			return c
		}
		return cmp.Compare(a.Digest, b.Digest)
	})
	return out
}

func (st *state) checkpoint(unixNano int64) *Checkpoint {
	return &Checkpoint{Seq: st.seq, UnixNano: unixNano, Segments: st.sorted()}
}

// chain is a prefix read from its newest usable checkpoint at or before a
// target to the target (or its head).
type chain struct {
	st *state
	// ckptSeq is the checkpoint the walk started from (0: none, the
	// empty state).
	ckptSeq uint64
	// editBytes is the size of the edits applied after that checkpoint.
	editBytes int
	edits     int   // how many
	last      *Edit // the last edit applied, nil if none
	// skipped names the checkpoints that could not be read and were
	// passed over for an older one.
	skipped []error
	// objects and bytes read
	reads     int
	readBytes int64
}

// listSeqs lists the sequence numbers named under dir, ascending.
func listSeqs(ctx context.Context, b bucket.Bucket, dir, after string) ([]uint64, error) {
	objs, err := b.List(ctx, dir, after, 0)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, o := range objs {
		if seq, ok := parseSeqName(o.Key, dir); ok {
			out = append(out, seq)
		}
	}
	return out, nil
}

func (c *chain) read(ctx context.Context, b bucket.Bucket, key string) ([]byte, error) {
	data, err := bucket.ReadAll(ctx, b, key)
	if err == nil {
		c.reads++
		c.readBytes += int64(len(data))
	}
	return data, err
}

// nextEdit reads and decodes the edit that follows seq: e is nil when no
// object holds one (the walk's end, or a gap its caller looks for). An edit
// that cannot be decoded breaks the chain (ErrGap). size is the object's.
func nextEdit(seq uint64, read func(key string) ([]byte, error)) (name string, e *Edit, size int, err error) {
	name = editObject(seq)
	data, err := read(name)
	if errors.Is(err, bucket.ErrNotFound) {
		return name, nil, 0, nil
	}
	if err != nil {
		return name, nil, 0, err
	}
	if e, err = DecodeEdit(name, data); err != nil {
		return name, nil, 0, fmt.Errorf("%w: %w", ErrGap, err)
	}
	return name, e, len(data), nil
}

// loadChain rebuilds the recorded state as of target (0: the latest): the
// newest recorded state whose seq is at most target. A checkpoint that is
// missing or corrupt is passed over for an older one (and noted); a
// missing or corrupt edit on the way is an error, since no other object
// holds what it changed.
func loadChain(ctx context.Context, b bucket.Bucket, target uint64) (*chain, error) {
	cks, err := listSeqs(ctx, b, checkpointsDir, "")
	if err != nil {
		return nil, err
	}
	c := &chain{}
	for i := len(cks) - 1; i >= 0 && c.st == nil; i-- {
		if target != 0 && cks[i] > target {
			continue
		}
		name := checkpointObject(cks[i])
		data, err := c.read(ctx, b, name)
		if err == nil {
			var ck *Checkpoint
			if ck, err = DecodeCheckpoint(name, data); err == nil {
				if ck.Seq != cks[i] {
					err = fmt.Errorf("%w: %s records seq %d", ErrCorruptObject, name, ck.Seq)
				} else if c.st, err = stateOf(ck, name); err == nil {
					c.ckptSeq = ck.Seq
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !errors.Is(err, bucket.ErrNotFound) && !errors.Is(err, ErrCorruptObject) {
				return nil, err
			}
			c.skipped = append(c.skipped, err)
		}
	}
	if c.st == nil {
		c.st = newState()
	}
	asOf := false // the walk stopped at an edit past target
	for target == 0 || c.st.seq < target {
		name, e, size, err := nextEdit(c.st.seq, func(key string) ([]byte, error) { return c.read(ctx, b, key) })
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if target != 0 && e.Seq > target {
			if c.st.seq == 0 && c.ckptSeq == 0 {
				// target is before the first recorded state. The
				// empty state the chain starts from is no recorded
				// state: a store backed up for the first time after
				// it held data held something else at target.
				return nil, fmt.Errorf("%w: seq %d is before the first recorded state (%d)", ErrNotRecorded, target, e.Seq)
			}
			asOf = true // the state as of target is the current one
			break
		}
		if err := c.st.apply(e, name); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrGap, err)
		}
		c.editBytes += size
		c.edits++
		c.last = e
	}
	if asOf || (target != 0 && c.st.seq == target) {
		return c, nil
	}
	// The walk stopped at a missing edit. An edit that follows a later
	// seq X means the missing one led to X: the states from X on are
	// lost (a gap), those before X are the current one.
	later, err := b.List(ctx, editsDir, editObject(c.st.seq), 1)
	if err != nil {
		return nil, err
	}
	if len(later) > 0 {
		next, ok := parseSeqName(later[0].Key, editsDir)
		if c.st.seq == 0 && ok && target != 0 && target < next {
			// The first edits are gone (pruned): there is no state
			// as of target, not an empty one.
			return nil, fmt.Errorf("%w: seq %d is before the oldest state kept (%d)", ErrNotRecorded, target, next)
		}
		if !ok || target == 0 || next <= target {
			return nil, fmt.Errorf("%w: no edit follows seq %d, but %s exists%s", ErrGap, c.st.seq, later[0].Key, skippedNote(c.skipped))
		}
		return c, nil
	}
	if c.st.seq == 0 && c.ckptSeq == 0 {
		if target != 0 && len(cks) > 0 && cks[0] > target {
			return nil, fmt.Errorf("%w: seq %d is before the oldest checkpoint kept (%d)", ErrNotRecorded, target, cks[0])
		}
		return nil, fmt.Errorf("%w%s", ErrNoBackup, skippedNote(c.skipped))
	}
	if target != 0 && c.st.seq < target {
		return nil, fmt.Errorf("%w: seq %d is after the latest recorded seq %d", ErrNotRecorded, target, c.st.seq)
	}
	return c, nil
}

func skippedNote(errs []error) string {
	if len(errs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (passed over: %v)", errors.Join(errs...))
}
