package manifestlog

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// genName returns the file name of generation gen.
func genName(gen uint64) string { return fmt.Sprintf("%s%016x", filePrefix, gen) }

// parseGenName returns the generation of a manifest file name. Only the
// canonical form (16 lowercase hex digits) counts, so that a stray file never
// aliases a generation.
func parseGenName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, filePrefix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	gen, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || genName(gen) != name {
		return 0, false
	}
	return gen, true
}

type genFile struct {
	gen  uint64
	path string
}

// listGenerations returns the manifest generations in dir, oldest first.
func listGenerations(fsys vfs.FS, dir string) ([]genFile, error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("manifestlog: list %s: %w", dir, err)
	}
	var gens []genFile
	for _, n := range names {
		if gen, ok := parseGenName(n); ok {
			gens = append(gens, genFile{gen: gen, path: filepath.Join(dir, n)})
		}
	}
	// List is sorted by name and the names are fixed-width hex, so this is
	// already in generation order.
	return gens, nil
}

// loaded is the result of replaying one generation file.
type loaded struct {
	l         *Log // state, counters, change lists, ckptSeq, ckptEnd
	activated bool
	replayed  int
	scan      wal.ScanResult
	size      int64
}

// loadGeneration replays one generation. It returns a *corruption.Error for
// damage a crash cannot produce, an ErrUnsupportedVersion error for a file of
// another version, and activated=false for a file that a crash left
// incomplete (before its activate record).
func loadGeneration(fsys vfs.FS, path string, gen uint64) (*loaded, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifestlog: open %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("manifestlog: size of %s: %w", path, err)
	}
	ld := &loaded{l: newLog(), size: size}
	r := replayer{l: ld.l, path: path, gen: gen}
	res, err := wal.Scan(f, path, 0, size, r.frame)
	if err != nil {
		return nil, err
	}
	ld.scan = res
	ld.activated = r.phase == phaseActive
	ld.replayed = r.replayed
	return ld, nil
}

const (
	phaseHeader = iota
	phaseCheckpoint
	phaseSegments
	phaseBacklog // checkpoint complete; edits before activation
	phaseActive
)

// replayer is the state machine that applies the records of one generation.
type replayer struct {
	l         *Log
	path      string
	gen       uint64
	phase     int
	remaining uint64 // checkpoint segments still expected
	applied   bool   // an edit after the checkpoint was applied
	replayed  int
}

func (r *replayer) corrupt(off int64, format string, args ...any) error {
	return corruption.New(r.path, off, "manifest: "+format, args...)
}

func (r *replayer) frame(off int64, payload []byte) error {
	rec, err := decodeRecord(payload)
	if err != nil {
		return r.corrupt(off, "record: %v", err)
	}
	end := off + int64(frameHeaderSize+len(payload))
	l := r.l
	switch r.phase {
	case phaseHeader:
		if rec.kind != kindHeader {
			return r.corrupt(off, "first record is kind %d, not a header", rec.kind)
		}
		if rec.version != Version {
			return fmt.Errorf("%w: %s has format version %d; this build reads only version %d", ErrUnsupportedVersion, r.path, rec.version, Version)
		}
		if rec.gen != r.gen {
			return r.corrupt(off, "header says generation %d, the file name %d", rec.gen, r.gen)
		}
		r.phase = phaseCheckpoint
		return nil
	case phaseCheckpoint:
		if rec.kind != kindCheckpoint {
			return r.corrupt(off, "record kind %d where the checkpoint belongs", rec.kind)
		}
		l.seq.Store(rec.seq)
		l.ckptSeq = rec.seq
		l.liveID, l.nextID, l.nextOrder = rec.liveID, rec.nextID, rec.nextOrder
		r.remaining = rec.count
		r.phase = phaseSegments
		if rec.count == 0 {
			r.phase = phaseBacklog
			l.ckptEnd = end
		}
		return nil
	case phaseSegments:
		if rec.kind != kindSegments {
			return r.corrupt(off, "record kind %d inside the checkpoint (%d segments missing)", rec.kind, r.remaining)
		}
		if uint64(len(rec.segs)) > r.remaining {
			return r.corrupt(off, "checkpoint holds more segments than its count")
		}
		for _, m := range rec.segs {
			if m.ID == 0 {
				return r.corrupt(off, "checkpoint segment with id 0")
			}
			if _, dup := l.segs[m.ID]; dup {
				return r.corrupt(off, "checkpoint lists segment %d twice", m.ID)
			}
			if m.AddedSeq > l.ckptSeq {
				return r.corrupt(off, "checkpoint segment %d added at seq %d, after the checkpoint's seq %d", m.ID, m.AddedSeq, l.ckptSeq)
			}
			l.segs[m.ID] = m
		}
		r.remaining -= uint64(len(rec.segs))
		if r.remaining == 0 {
			r.phase = phaseBacklog
			l.ckptEnd = end
		}
		return nil
	}
	// phaseBacklog or phaseActive
	switch rec.kind {
	case kindActivate:
		if r.phase == phaseActive {
			return r.corrupt(off, "second activate record")
		}
		if rec.seq != l.seq.Load() {
			return r.corrupt(off, "activate record at seq %d, the log is at %d", rec.seq, l.seq.Load())
		}
		r.phase = phaseActive
		return nil
	case kindEdit:
		return r.edit(off, &rec)
	default:
		return r.corrupt(off, "record kind %d after the checkpoint", rec.kind)
	}
}

func (r *replayer) edit(off int64, rec *record) error {
	l := r.l
	cur := l.seq.Load()
	if !r.applied && r.phase != phaseActive && rec.seq <= l.ckptSeq {
		// Already covered by the checkpoint: replaying it again would
		// change nothing, by construction of results-not-deltas. Only the
		// copy-forward backlog (before the activate record) can hold such
		// an edit; after it, a repeat is corruption like any other.
		return nil
	}
	if rec.seq != cur+1 {
		return r.corrupt(off, "edit seq %d follows seq %d (gap or repeat)", rec.seq, cur)
	}
	e := Edit{Add: rec.segs, Remove: rec.remove, SetLive: rec.setLive, LiveID: rec.liveID, NextID: rec.nextID, NextOrder: rec.nextOrder}
	if err := validateStatic(&e); err != nil {
		return r.corrupt(off, "edit seq %d: %v", rec.seq, err)
	}
	for _, m := range rec.segs {
		if m.AddedSeq != rec.seq {
			return r.corrupt(off, "edit seq %d adds segment %d with added seq %d", rec.seq, m.ID, m.AddedSeq)
		}
	}
	for _, id := range rec.remove {
		if _, ok := l.segs[id]; !ok {
			return r.corrupt(off, "edit seq %d removes segment %d, which is not present", rec.seq, id)
		}
	}
	l.apply(&e, rec.seq)
	l.seq.Store(rec.seq)
	r.applied = true
	r.replayed++
	return nil
}

func newLog() *Log {
	return &Log{segs: map[uint64]SegmentMeta{}, pend: map[uint64]*pendInfo{}}
}

// Open opens the manifest log in dir, creating a fresh one if none exists,
// and returns it with the state it holds and a report of what was repaired.
//
// It picks the highest-numbered activated generation, truncates a torn tail
// (and syncs), removes older generations and newer ones that a crash left
// incomplete, and seeds every counter (seq, next id, next order, bytes since
// the checkpoint) from disk. Damage a crash cannot produce is returned as a
// *corruption.Error; a file of an unknown version as ErrUnsupportedVersion.
func Open(fsys vfs.FS, dir string, opts Options) (*Log, State, Report, error) {
	opts.fill()
	var rep Report
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, State{}, rep, fmt.Errorf("manifestlog: mkdir %s: %w", dir, err)
	}
	gens, err := listGenerations(fsys, dir)
	if err != nil {
		return nil, State{}, rep, err
	}
	var (
		ld     *loaded
		chosen genFile
		broken []genFile
		older  []genFile
	)
	for i := len(gens) - 1; i >= 0; i-- {
		g, err := loadGeneration(fsys, gens[i].path, gens[i].gen)
		if err != nil {
			return nil, State{}, rep, err
		}
		if g.activated {
			ld, chosen, older = g, gens[i], gens[:i]
			break
		}
		broken = append(broken, gens[i])
	}

	var l *Log
	if ld == nil {
		// No complete generation. Generation 1 is the only one a crash can
		// leave incomplete without a complete one beside it (every rotation
		// keeps its predecessor until the successor is activated and its
		// directory entry durable), and its checkpoint is always the empty
		// state: re-creating it loses nothing. Anything else is damage.
		for _, g := range broken {
			if g.gen != 1 {
				return nil, State{}, rep, corruption.New(g.path, -1,
					"manifest generation %d was never completed and no complete generation exists", g.gen)
			}
		}
		l = newLog()
		l.fsys, l.dir, l.opts, l.log = fsys, dir, opts, opts.Logger
		if err := l.create(1); err != nil {
			return nil, State{}, rep, err
		}
		rep.Created = true
		if len(broken) > 0 {
			rep.Actions = append(rep.Actions, fmt.Sprintf("re-created %s, which a crash left incomplete", l.path))
		}
	} else {
		l = ld.l
		l.fsys, l.dir, l.opts, l.log = fsys, dir, opts, opts.Logger
		l.gen, l.path = chosen.gen, chosen.path
		if err := l.openTail(ld, &rep); err != nil {
			return nil, State{}, rep, err
		}
		rep.Replayed = ld.replayed
		for _, g := range older {
			if err := fsys.Remove(g.path); err != nil && !errors.Is(err, errNotExist) {
				l.log.Warn("manifestlog: cannot remove old generation", "path", g.path, "err", err)
				continue
			}
			rep.RemovedOld = append(rep.RemovedOld, g.path)
			rep.Actions = append(rep.Actions, "removed older generation "+g.path)
		}
		for _, g := range broken {
			if err := fsys.Remove(g.path); err != nil && !errors.Is(err, errNotExist) {
				l.log.Warn("manifestlog: cannot remove incomplete generation", "path", g.path, "err", err)
				continue
			}
			rep.RemovedBroken = append(rep.RemovedBroken, g.path)
			rep.Actions = append(rep.Actions, "removed incomplete newer generation "+g.path)
		}
		// The generation's directory entry may not be durable yet if the
		// process that created it was killed before its directory sync
		// (no crash of the machine, so Open still sees it). Commits are
		// about to be acknowledged in it: make it durable. The removals
		// above ride along.
		if err := fsys.SyncDir(dir); err != nil {
			l.f.Close()
			return nil, State{}, rep, fmt.Errorf("manifestlog: sync dir %s at open: %w", dir, err)
		}
	}
	if len(gens) > 0 {
		l.maxGen = max(l.maxGen, gens[len(gens)-1].gen)
	}
	l.maxGen = max(l.maxGen, l.gen)
	seq := l.seq.Load()
	l.tipSeq, l.tipNextID, l.tipNextOrder = seq, l.nextID, l.nextOrder
	rep.Generation, rep.Path, rep.CheckpointSeq = l.gen, l.path, l.ckptSeq
	for _, a := range rep.Actions {
		l.log.Warn("manifestlog: repaired at open", "action", a)
	}

	l.mu.Lock()
	l.maybeRotate()
	l.mu.Unlock()
	return l, l.State(), rep, nil
}

// openTail opens the chosen generation for appending. Bytes after the valid
// end that are not zero fill (a torn tail, or frames a crash kept past a lost
// one) are truncated and the truncation synced: a frame appended later must
// never be followed by stale bytes that could replay as if they were newer.
func (l *Log) openTail(ld *loaded, rep *Report) error {
	f, err := l.fsys.OpenReadWrite(l.path)
	if err != nil {
		return fmt.Errorf("manifestlog: open %s: %w", l.path, err)
	}
	end := ld.scan.End
	// wal.Scan reports Torn whenever a non-zero byte follows End; when it
	// does not, [End, size) is preallocated zero fill and stays.
	dirty := ld.scan.Torn
	alloc := ld.size
	if dirty {
		if err := f.Truncate(end); err != nil {
			f.Close()
			return fmt.Errorf("manifestlog: truncate %s at %d: %w", l.path, end, err)
		}
		alloc = end
		rep.TruncatedPath, rep.TruncatedAt, rep.TruncatedBytes = l.path, end, ld.scan.TornBytes
		rep.Actions = append(rep.Actions, fmt.Sprintf("truncated torn tail of %s at offset %d (%d bytes)", l.path, end, ld.scan.TornBytes))
	}
	// Always sync once: what Open read may be in the page cache only (the
	// previous process can have been killed between its write and its
	// fdatasync), and the frames appended from now on claim, through
	// their watermark, that everything before them is durable. The same
	// sync makes a truncation durable.
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("manifestlog: sync %s at open: %w", l.path, err)
	}
	l.stats.Syncs++
	l.f, l.end, l.synced, l.alloc = f, end, end, alloc
	return nil
}
