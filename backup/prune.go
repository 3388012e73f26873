package backup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segkv/segkv/backup/bucket"
)

// PruneOptions say which restore points Prune keeps. At least one of
// KeepCheckpoints and KeepWithin must be set; with both, a point either
// keeps is kept.
type PruneOptions struct {
	// KeepCheckpoints keeps the newest K checkpoints and every recorded
	// state after the oldest of them.
	KeepCheckpoints int
	// KeepWithin keeps every recorded state newer than now - KeepWithin
	// (and the checkpoint they are rebuilt from).
	KeepWithin time.Duration
	// Orphans also deletes segment objects that no edit or checkpoint
	// names (uploads a crash left before their edit). Only safe while no
	// loop writes to the prefix: a running loop's next edit may name them.
	Orphans bool
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// Now is the clock for KeepWithin. Default time.Now.
	Now func() time.Time
}

// PruneResult reports a prune.
type PruneResult struct {
	Base        uint64 // the oldest checkpoint kept: every state from it on is restorable
	Checkpoints int    // checkpoint objects deleted
	Edits       int    // edit objects deleted
	Segments    int    // segment objects deleted
	Bytes       int64  // segment bytes deleted
	Orphans     int    // unnamed segment objects found (deleted with Orphans)
}

// Prune deletes the restore points older than the retention keeps, and the
// segment objects that only they reach. It never deletes an object a kept
// point can reach: it first rebuilds the chain from the oldest kept
// checkpoint to the head (refusing to prune a chain it cannot rebuild),
// and keeps every segment that walk names. Points go first, oldest first,
// then segments: a prune stopped half-way leaves unreferenced segment
// objects (found again with Orphans), never a listed point that is broken.
func Prune(ctx context.Context, b bucket.Bucket, opts PruneOptions) (PruneResult, error) {
	var res PruneResult
	if opts.KeepCheckpoints <= 0 && opts.KeepWithin <= 0 {
		return res, errors.New("backup: prune: set KeepCheckpoints or KeepWithin")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cks, err := listSeqs(ctx, b, checkpointsDir, "")
	if err != nil {
		return res, err
	}
	if len(cks) == 0 {
		return res, nil // no checkpoint: every state hangs off the first edit
	}
	base := cks[0]
	if k := opts.KeepCheckpoints; k > 0 && len(cks) > k {
		base = cks[len(cks)-k]
	} else if k > 0 {
		base = cks[0]
	}
	if opts.KeepWithin > 0 {
		cutoff := opts.Now().Add(-opts.KeepWithin).UnixNano()
		// The newest checkpoint at or before the cutoff rebuilds every
		// state after it.
		wb := cks[0]
		for _, seq := range cks {
			t, err := checkpointTime(ctx, b, seq)
			if err != nil {
				return res, err
			}
			if t > cutoff {
				break
			}
			wb = seq
		}
		if opts.KeepCheckpoints <= 0 || wb < base {
			base = wb
		}
	}
	res.Base = base

	// Everything a kept point reaches: the base's set and each segment
	// added after it. loadChain from the base reads exactly that chain.
	keep, err := reachableFrom(ctx, b, base)
	if err != nil {
		return res, fmt.Errorf("backup: prune: the chain from checkpoint %d cannot be rebuilt, nothing deleted: %w", base, err)
	}

	// What the deleted points named: the oldest deleted checkpoint's set
	// and every segment an edit before the base added.
	named := map[SegmentKey]bool{}
	var delCks []uint64
	for _, seq := range cks {
		if seq < base {
			delCks = append(delCks, seq)
		}
	}
	if len(delCks) > 0 {
		name := checkpointObject(delCks[0])
		if data, err := bucket.ReadAll(ctx, b, name); err == nil {
			if ck, err := DecodeCheckpoint(name, data); err == nil {
				for _, s := range ck.Segments {
					named[s.SegmentKey] = true
				}
			}
		} else if !errors.Is(err, bucket.ErrNotFound) {
			return res, err
		}
	}
	edits, err := listSeqs(ctx, b, editsDir, "")
	if err != nil {
		return res, err
	}
	var delEdits []uint64
	for _, prev := range edits {
		if prev >= base {
			break
		}
		delEdits = append(delEdits, prev)
		name := editObject(prev)
		data, err := bucket.ReadAll(ctx, b, name)
		if err != nil {
			if errors.Is(err, bucket.ErrNotFound) {
				continue
			}
			return res, err
		}
		if e, err := DecodeEdit(name, data); err == nil {
			for _, s := range e.Added {
				named[s.SegmentKey] = true
			}
			for _, k := range e.Removed {
				named[k] = true
			}
		}
	}
	objs, err := b.List(ctx, segmentsDir, "", 0)
	if err != nil {
		return res, err
	}
	var delSegs []bucket.ObjectInfo
	for _, o := range objs {
		k, ok := parseSegmentName(o.Key)
		if ok && keep[k] {
			continue
		}
		switch {
		case ok && named[k]:
			delSegs = append(delSegs, o)
		default:
			res.Orphans++
			if opts.Orphans {
				delSegs = append(delSegs, o)
			}
		}
	}
	res.Checkpoints, res.Edits, res.Segments = len(delCks), len(delEdits), len(delSegs)
	for _, o := range delSegs {
		res.Bytes += o.Size
	}
	if opts.DryRun {
		return res, nil
	}
	for _, seq := range delCks {
		if err := b.Delete(ctx, checkpointObject(seq)); err != nil {
			return res, err
		}
	}
	for _, prev := range delEdits {
		if err := b.Delete(ctx, editObject(prev)); err != nil {
			return res, err
		}
	}
	for _, o := range delSegs {
		if err := b.Delete(ctx, o.Key); err != nil {
			return res, err
		}
	}
	return res, nil
}

// reachableFrom returns every segment a state from checkpoint base on
// names, by walking the chain from base to the head.
func reachableFrom(ctx context.Context, b bucket.Bucket, base uint64) (map[SegmentKey]bool, error) {
	name := checkpointObject(base)
	data, err := bucket.ReadAll(ctx, b, name)
	if err != nil {
		return nil, err
	}
	ck, err := DecodeCheckpoint(name, data)
	if err != nil {
		return nil, err
	}
	st, err := stateOf(ck, name)
	if err != nil {
		return nil, err
	}
	keep := map[SegmentKey]bool{}
	for k := range st.segs {
		keep[k] = true
	}
	for {
		name, e, _, err := nextEdit(st.seq, func(key string) ([]byte, error) { return bucket.ReadAll(ctx, b, key) })
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if err := st.apply(e, name); err != nil {
			return nil, err
		}
		for _, s := range e.Added {
			keep[s.SegmentKey] = true
		}
	}
	later, err := b.List(ctx, editsDir, editObject(st.seq), 1)
	if err != nil {
		return nil, err
	}
	if len(later) > 0 {
		return nil, fmt.Errorf("%w: no edit follows seq %d, but %s exists", ErrGap, st.seq, later[0].Key)
	}
	return keep, nil
}

// checkpointTime reads a checkpoint's recorded time from its header with
// a ranged get (magic, version, seq, time: 21 bytes), without fetching the
// whole set.
func checkpointTime(ctx context.Context, b bucket.Bucket, seq uint64) (int64, error) {
	rc, err := b.Get(ctx, checkpointObject(seq), 0, 21)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	var hdr [21]byte
	if _, err := io.ReadFull(rc, hdr[:]); err != nil {
		return 0, fmt.Errorf("%w: %s: header: %w", ErrCorruptObject, checkpointObject(seq), err)
	}
	if [4]byte(hdr[:4]) != checkpointMagic || hdr[4] != formatVersion || binary.LittleEndian.Uint64(hdr[5:]) != seq {
		return 0, fmt.Errorf("%w: %s: bad header", ErrCorruptObject, checkpointObject(seq))
	}
	return int64(binary.LittleEndian.Uint64(hdr[13:])), nil
}
