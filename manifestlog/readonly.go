package manifestlog

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/segkv/segkv/vfs"
)

// ErrReadOnly is the sticky error of a log opened with OpenReadOnly: every
// commit returns it.
var ErrReadOnly = errors.New("manifestlog: log opened read-only")

// OpenReadOnly is Open for a reader that must change nothing: it picks the
// generation Open would pick and replays it the same way (frames a replica
// restores are replayed from the replica), but it writes, truncates,
// creates, removes and syncs nothing and starts no rotation. The report's
// fields say what Open would have repaired, and its Actions are worded so.
// The returned log answers State, Seq, Changes and Stats; every commit
// returns ErrReadOnly.
//
// A directory without any manifest generation is not a store: the error
// wraps fs.ErrNotExist (Open would create a fresh log). A lone generation 1
// that a crash left before its activation is the empty state, as for Open.
func OpenReadOnly(fsys vfs.FS, dir string, opts Options) (*Log, State, Report, error) {
	opts.fill()
	var rep Report
	gens, strays, err := listManifestFiles(fsys, dir)
	if err != nil {
		return nil, State{}, rep, err
	}
	if err := refuseStrays(strays, opts); err != nil {
		return nil, State{}, rep, err
	}
	if len(gens) == 0 && opts.HasData {
		// Open's rule: data files with no manifest are a lost manifest.
		return nil, State{}, rep, refuseIncomplete(dir, nil, opts)
	}
	if len(gens) == 0 {
		return nil, State{}, rep, fmt.Errorf("manifestlog: no manifest in %s: %w", dir, fs.ErrNotExist)
	}
	ld, chosen, broken, older, err := newestActivated(fsys, gens)
	if err != nil {
		return nil, State{}, rep, err
	}
	l := newLog()
	if ld == nil {
		// Open's rule: only generation 1 may be incomplete with no complete
		// one beside it, and it holds the empty state.
		if err := refuseIncomplete(dir, broken, opts); err != nil {
			return nil, State{}, rep, err
		}
		rep.Actions = append(rep.Actions, fmt.Sprintf("would re-create %s, which a crash left incomplete", broken[0].path))
	} else {
		l = ld.l
		l.gen, l.path = chosen.gen, chosen.path
		for _, rs := range ld.restores {
			rep.RestoredFrames = append(rep.RestoredFrames, rs.off)
			rep.Actions = append(rep.Actions, fmt.Sprintf("would rewrite %d bytes of torn or damaged frames of %s at offset %d from their replica", len(rs.frames), l.path, rs.off))
		}
		if ld.scan.Torn {
			rep.TruncatedPath, rep.TruncatedAt, rep.TruncatedBytes = l.path, ld.scan.End, ld.scan.TornBytes
			rep.Actions = append(rep.Actions, fmt.Sprintf("would truncate torn tail of %s at offset %d (%d bytes)", l.path, ld.scan.End, ld.scan.TornBytes))
		}
		if ld.openGroup != nil {
			rep.Actions = append(rep.Actions, fmt.Sprintf("would write the missing replica of the last group of %s at offset %d", l.path, ld.scan.End))
		}
		rep.Replayed = ld.replayed
		for _, g := range older {
			rep.RemovedOld = append(rep.RemovedOld, g.path)
			rep.Actions = append(rep.Actions, "would remove older generation "+g.path)
		}
		for _, g := range broken {
			rep.RemovedBroken = append(rep.RemovedBroken, g.path)
			rep.Actions = append(rep.Actions, "would remove incomplete newer generation "+g.path)
		}
		l.end, l.synced, l.alloc = ld.scan.End, ld.scan.End, ld.size
	}
	l.fsys, l.dir, l.opts, l.log = fsys, dir, opts, opts.Logger
	// No file handle is kept (Close has nothing to close) and every commit
	// fails: the sticky error also keeps maybeRotate away.
	l.err = ErrReadOnly
	l.maxGen = max(l.gen, gens[len(gens)-1].gen)
	seq := l.seq.Load()
	l.tipSeq, l.tipNextID, l.tipNextOrder = seq, l.nextID, l.nextOrder
	rep.Generation, rep.Path, rep.CheckpointSeq = l.gen, l.path, l.ckptSeq
	return l, l.State(), rep, nil
}
