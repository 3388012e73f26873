package manifestlog

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/internal/groupcommit"
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

// IsGenerationName reports whether name is the canonical file name of a
// manifest generation (MANIFEST- and 16 lower-case hex digits): the only
// names Open and OpenReadOnly read.
func IsGenerationName(name string) bool {
	_, ok := parseGenName(name)
	return ok
}

type genFile struct {
	gen  uint64
	path string
}

// listGenerations returns the manifest generations in dir, oldest first.
func listGenerations(fsys vfs.FS, dir string) ([]genFile, error) {
	gens, _, err := listManifestFiles(fsys, dir)
	return gens, err
}

// listManifestFiles returns the manifest generations in dir, oldest first,
// and the paths of the other names that start with MANIFEST- (strays: a
// renamed generation, a copy kept by hand), which are never read.
func listManifestFiles(fsys vfs.FS, dir string) (gens []genFile, strays []string, err error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("manifestlog: list %s: %w", dir, err)
	}
	for _, n := range names {
		if gen, ok := parseGenName(n); ok {
			gens = append(gens, genFile{gen: gen, path: filepath.Join(dir, n)})
		} else if strings.HasPrefix(n, filePrefix) {
			strays = append(strays, filepath.Join(dir, n))
		}
	}
	// List is sorted by name and the names are fixed-width hex, so this is
	// already in generation order.
	return gens, strays, nil
}

// refuseStrays is the rule for names that start with MANIFEST- but are not
// a generation's: beside data files (Options.HasData) Open cannot tell
// which manifest those files belong to. A renamed generation would
// otherwise be ignored, and the state of another generation (or a new,
// empty one) taken for the store's, disowning every file it does not name;
// so both Open and OpenReadOnly refuse, naming the file, and change
// nothing. Without data files there is nothing to disown, and a stray is
// left alone.
func refuseStrays(strays []string, opts Options) error {
	if len(strays) == 0 || !opts.HasData {
		return nil
	}
	return corruption.New(strays[0], -1,
		"not a manifest generation name (%s<16 lower-case hex digits>) in a directory that holds data files: "+
			"a renamed or copied manifest; refusing to guess which manifest the data files belong to "+
			"(rename it back to the generation its header names, or move it out of the directory)", filePrefix)
}

// loaded is the result of replaying one generation file.
type loaded struct {
	l         *Log // state, counters, change lists, ckptSeq, ckptEnd
	version   uint32
	activated bool
	replayed  int
	scan      wal.ScanResult
	size      int64
	// restores are byte ranges rebuilt from a replica (frames that were
	// torn or damaged): Open writes them back in place.
	restores []restore
	// openGroup is the replica the last group lacks (a crash kept the
	// group and lost its replica), or nil; Open appends it at scan.End.
	openGroup []byte
}

// restore is a run of frames rebuilt from their replica.
type restore struct {
	off    int64
	frames []byte
}

// loadGeneration replays one generation. It returns a *corruption.Error for
// damage a crash cannot produce, an ErrUnsupportedVersion error for a file of
// another version, and activated=false for a file that a crash left
// incomplete (before its activate record).
func loadGeneration(fsys vfs.FS, path string, gen uint64, observe func(wal.Frame, *record)) (*loaded, error) {
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
	r := replayer{l: ld.l, path: path, gen: gen, observe: observe}
	res, err := wal.ScanFrames(f, path, 0, size, r.frame)
	if err != nil {
		return nil, err
	}
	for res.Torn {
		// An invalid frame with nothing after it that vouches for it: a
		// torn tail, unless the replica of its group follows (replica.go).
		next, err := r.restoreFromReplica(f, res.End, size)
		if err != nil {
			return nil, err
		}
		if next < 0 {
			break
		}
		more, err := wal.ScanFrames(f, path, next, size, r.frame)
		if err != nil {
			return nil, err
		}
		more.Frames += res.Frames
		res = more
	}
	ld.scan = res
	ld.version = r.version
	ld.activated = r.phase == phaseActive
	ld.replayed = r.replayed
	ld.restores = r.restores
	if r.phase >= phaseBacklog && len(r.groupLens) > 0 {
		ld.openGroup = wal.AppendFrame(nil, r.groupReplica(), r.groupWM)
	}
	return ld, nil
}

// restoreFromReplica handles the invalid frame at y. If the first valid
// frame after it is the replica of the group y belongs to, it replays the
// group's missing frames from the replica, records their bytes for Open to
// write back, and returns the offset after the replica; otherwise -1 (a
// torn tail).
func (r *replayer) restoreFromReplica(f vfs.File, y, limit int64) (int64, error) {
	next, err := r.restoreFromGroupReplica(f, y, limit)
	if next >= 0 || err != nil {
		return next, err
	}
	return r.rebuildReplica(f, y, limit)
}

// rebuildReplica handles an invalid frame at y where the replica of a
// complete group belongs, when the next group of the same write follows
// it. One write larger than maxGroupPayload is several groups sharing one
// watermark, so the later groups do not vouch for an earlier replica: a
// damaged one would otherwise read as a torn tail and take the later
// groups' acknowledged commits with it. The group's frames are intact, so
// its replica is rebuilt from them, if it fits the gap exactly and the
// frame after the gap belongs to the same write (same watermark). Returns
// the offset after the replica, or -1 (a torn tail).
func (r *replayer) rebuildReplica(f vfs.File, y, limit int64) (int64, error) {
	if r.phase < phaseBacklog || len(r.groupLens) == 0 {
		return -1, nil
	}
	payload := r.groupReplica()
	rebuilt := wal.AppendFrame(nil, payload, r.groupWM)
	end := y + int64(len(rebuilt))
	next, ok, err := wal.NextFrame(f, r.path, y, limit)
	if err != nil || !ok || next.Off != end || next.Watermark != r.groupWM {
		return -1, err
	}
	if err := r.frame(wal.Frame{Off: y, Watermark: r.groupWM, Payload: payload}); err != nil {
		return -1, err
	}
	r.restores = append(r.restores, restore{off: y, frames: rebuilt})
	return end, nil
}

// restoreFromGroupReplica restores frames of the current group from the
// group's replica after them.
func (r *replayer) restoreFromGroupReplica(f vfs.File, y, limit int64) (int64, error) {
	if r.phase < phaseBacklog {
		return -1, nil // a checkpoint is synced before anything relies on it
	}
	// Every valid frame after y has a watermark <= y (the scan would have
	// reported corruption otherwise): later frames of y's own group, then
	// its replica. Frames of a later group would vouch for y.
	var (
		fr      wal.Frame
		rec     record
		between []wal.Frame // valid frames of the group after y
	)
	for after := y; ; {
		next, ok, err := wal.NextFrame(f, r.path, after, limit)
		if err != nil || !ok {
			return -1, err
		}
		if d, err := decodeRecord(next.Payload, r.version); err == nil && d.kind == kindReplica {
			fr, rec = next, d
			break
		}
		between = append(between, next)
		after = next.Off
	}
	if int64(rec.groupStart) != r.groupStart || len(rec.payloads) <= len(r.groupLens) {
		// Not the replica of this group (debris inside the tear, such as
		// a frame-shaped key inside a damaged record): a torn tail.
		return -1, nil
	}
	k := len(r.groupLens)
	if k > 0 && fr.Watermark != r.groupWM {
		return -1, r.corrupt(fr.Off, "replica watermark %d differs from its group's %d", fr.Watermark, r.groupWM)
	}
	for i := range k {
		if !bytes.Equal(rec.payloads[i], r.groupPayload(i)) {
			return -1, r.corrupt(fr.Off, "replica of the group at offset %d differs from its frame %d", r.groupStart, i)
		}
	}
	frames := appendFrames(nil, rec.payloads[k:], fr.Watermark)
	if y+int64(len(frames)) != fr.Off {
		return -1, r.corrupt(y, "invalid frame; the replica at offset %d of its group does not fit the gap (%d bytes rebuilt, %d missing)",
			fr.Off, len(frames), fr.Off-y)
	}
	// Frames of the group that survived after y must be what the replica
	// says they are.
	at := map[int64][]byte{}
	off := y
	for _, p := range rec.payloads[k:] {
		at[off] = p
		off += frameHeaderSize + int64(len(p))
	}
	for _, b := range between {
		if p, ok := at[b.Off]; ok && (!bytes.Equal(p, b.Payload) || b.Watermark != fr.Watermark) {
			return -1, r.corrupt(b.Off, "frame differs from its group's replica at offset %d", fr.Off)
		}
	}
	off = y
	for _, p := range rec.payloads[k:] {
		if recordKind(p[0]) == kindReplica {
			return -1, r.corrupt(fr.Off, "replica holds a replica record")
		}
		if err := r.frame(wal.Frame{Off: off, Watermark: fr.Watermark, Payload: p}); err != nil {
			return -1, err
		}
		off += frameHeaderSize + int64(len(p))
	}
	if err := r.frame(fr); err != nil {
		return -1, err
	}
	r.restores = append(r.restores, restore{off: y, frames: frames})
	return fr.Off + fr.Size(), nil
}

// appendFrames appends one frame per payload, all with watermark wm.
func appendFrames(buf []byte, payloads [][]byte, wm uint64) []byte {
	for _, p := range payloads {
		buf = wal.AppendFrame(buf, p, wm)
	}
	return buf
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
	version   uint32 // the file's format version, from its header
	remaining uint64 // checkpoint segments still expected
	applied   bool   // an edit after the checkpoint was applied
	replayed  int

	// The group of frames since the checkpoint or the last replica: where
	// it starts, its frames' common watermark, and their payloads (kept
	// back to back in groupBuf) to compare with its replica.
	groupStart int64
	groupWM    uint64
	groupBuf   []byte
	groupLens  []int
	restores   []restore

	// observe, if set (Inspect), sees every record replayed, in order.
	observe func(wal.Frame, *record)
}

func (r *replayer) groupPayload(i int) []byte {
	off := 0
	for _, n := range r.groupLens[:i] {
		off += n
	}
	return r.groupBuf[off : off+r.groupLens[i]]
}

// groupReplica is the payload of the replica record of the group so far:
// what its writer appended after it, or should have.
func (r *replayer) groupReplica() []byte {
	return appendReplica(nil, r.groupStart, r.groupPayloads())
}

func (r *replayer) groupPayloads() [][]byte {
	ps := make([][]byte, len(r.groupLens))
	for i := range ps {
		ps[i] = r.groupPayload(i)
	}
	return ps
}

// replica checks a replica record against the group it closes.
func (r *replayer) replica(fr wal.Frame, rec *record) error {
	if int64(rec.groupStart) != r.groupStart {
		return r.corrupt(fr.Off, "replica of a group at offset %d; the group starts at %d", rec.groupStart, r.groupStart)
	}
	if len(rec.payloads) != len(r.groupLens) {
		return r.corrupt(fr.Off, "replica of %d frames; its group has %d", len(rec.payloads), len(r.groupLens))
	}
	if fr.Watermark != r.groupWM {
		return r.corrupt(fr.Off, "replica watermark %d differs from its group's %d", fr.Watermark, r.groupWM)
	}
	for i, p := range rec.payloads {
		if !bytes.Equal(p, r.groupPayload(i)) {
			return r.corrupt(fr.Off, "replica differs from frame %d of its group at offset %d", i, r.groupStart)
		}
	}
	r.groupStart = fr.Off + fr.Size()
	r.groupBuf, r.groupLens = r.groupBuf[:0], r.groupLens[:0]
	return nil
}

func (r *replayer) corrupt(off int64, format string, args ...any) error {
	return corruption.New(r.path, off, "manifest: "+format, args...)
}

func (r *replayer) frame(fr wal.Frame) error {
	rec, err := decodeRecord(fr.Payload, r.version)
	if err != nil {
		return r.corrupt(fr.Off, "record: %v", err)
	}
	if err := r.record(fr, rec); err != nil {
		return err
	}
	if r.observe != nil {
		r.observe(fr, &rec)
	}
	return nil
}

// record replays one decoded record.
func (r *replayer) record(fr wal.Frame, rec record) error {
	off, payload := fr.Off, fr.Payload
	end := off + fr.Size()
	l := r.l
	switch r.phase {
	case phaseHeader:
		if rec.kind != kindHeader {
			return r.corrupt(off, "first record is kind %d, not a header", rec.kind)
		}
		if !knownVersion(rec.version) {
			return fmt.Errorf("%w: %s has format version %d; this build reads versions %d to %d", ErrUnsupportedVersion, r.path, rec.version, minVersion, Version)
		}
		r.version = rec.version
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
		l.followed = rec.followed
		if len(rec.adopt) > AdoptedMemory {
			return r.corrupt(off, "checkpoint remembers %d adopted digests, more than %d", len(rec.adopt), AdoptedMemory)
		}
		l.adopted = rec.adopt
		r.remaining = rec.count
		r.phase = phaseSegments
		if rec.count == 0 {
			r.phase = phaseBacklog
			l.ckptEnd, r.groupStart = end, end
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
			l.ckptEnd, r.groupStart = end, end
		}
		return nil
	}
	// phaseBacklog or phaseActive: frames come in groups, each closed by
	// its replica.
	if rec.kind == kindReplica {
		return r.replica(fr, &rec)
	}
	if len(r.groupLens) == 0 {
		r.groupWM = fr.Watermark
	} else if fr.Watermark != r.groupWM {
		return r.corrupt(off, "frame with watermark %d inside a group written with watermark %d (its replica is missing)", fr.Watermark, r.groupWM)
	}
	r.groupBuf = append(r.groupBuf, payload...)
	r.groupLens = append(r.groupLens, len(payload))
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
	e := Edit{Add: rec.segs, Remove: rec.remove, SetLive: rec.setLive, LiveID: rec.liveID, NextID: rec.nextID, NextOrder: rec.nextOrder,
		SetFollowed: rec.setFollowed, Followed: rec.followed, Adopt: rec.adopt, ForgetAdopted: rec.forget}
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

// refuseIncomplete is Open's rule when no generation is complete: only
// generation 1 may be incomplete (a crash while creating the log), and only
// while nothing else exists beside it (Options.HasData). Anything else is
// damage.
func refuseIncomplete(dir string, broken []genFile, opts Options) error {
	if len(broken) == 0 && opts.HasData {
		// Nothing to re-create from, and data files beside nothing: the
		// manifest was lost, not yet to be made. Creating one would name
		// none of the data files.
		return corruption.New(dir, -1,
			"the directory holds data files but no manifest generation; refusing to create an empty manifest that names none of them (restore the MANIFEST-* file)")
	}
	for _, g := range broken {
		if g.gen != 1 {
			return corruption.New(g.path, -1,
				"manifest generation %d was never completed and no complete generation exists", g.gen)
		}
		if opts.HasData {
			return corruption.New(g.path, -1,
				"manifest generation 1 holds no complete state but the directory holds data files, which only a complete manifest names; refusing to re-create it empty (restore the MANIFEST-* file)")
		}
	}
	return nil
}

func newLog() *Log {
	l := &Log{segs: map[uint64]SegmentMeta{}, pend: map[uint64]*pendInfo{}}
	l.gc = groupcommit.New(l.writeBatch, nil)
	return l
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
	gens, strays, err := listManifestFiles(fsys, dir)
	if err != nil {
		return nil, State{}, rep, err
	}
	if err := refuseStrays(strays, opts); err != nil {
		return nil, State{}, rep, err
	}
	ld, chosen, broken, older, err := newestActivated(fsys, gens)
	if err != nil {
		return nil, State{}, rep, err
	}

	var l *Log
	if ld == nil {
		// No complete generation. Generation 1 is the only one a crash can
		// leave incomplete without a complete one beside it (every rotation
		// keeps its predecessor until the successor is activated and its
		// directory entry durable), and its checkpoint is always the empty
		// state: re-creating it loses nothing. Anything else is damage, and
		// so is any data file beside it: a manifest is never created in a
		// directory that holds data files (Options.HasData).
		if err := refuseIncomplete(dir, broken, opts); err != nil {
			return nil, State{}, rep, err
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
	if ld != nil && ld.version < Version {
		// Records of this build's format must not be appended to a file
		// whose header promises an older one: rewrite the state as a new
		// generation first (a checkpoint: the old file stays until the new
		// one is activated and durable).
		if err := l.rotate(); err != nil {
			l.f.Close()
			return nil, State{}, rep, fmt.Errorf("manifestlog: upgrade %s from format version %d: %w", rep.Path, ld.version, err)
		}
		rep.Actions = append(rep.Actions, fmt.Sprintf("rewrote %s (format version %d) as %s (version %d)", rep.Path, ld.version, l.path, Version))
		rep.Generation, rep.Path, rep.CheckpointSeq = l.gen, l.path, l.ckptSeq
	}
	for _, a := range rep.Actions {
		l.log.Warn("manifestlog: repaired at open", "action", a)
	}

	l.mu.Lock()
	l.maybeRotate()
	l.mu.Unlock()
	return l, l.State(), rep, nil
}

// openTail opens the chosen generation for appending. It writes back frames
// restored from a replica and a missing replica. Bytes after the valid
// end that are not zero fill (a torn tail, or frames a crash kept past a lost
// one) are truncated and the truncation synced: a frame appended later must
// never be followed by stale bytes that could replay as if they were newer.
func (l *Log) openTail(ld *loaded, rep *Report) error {
	f, err := l.fsys.OpenReadWrite(l.path)
	if err != nil {
		return fmt.Errorf("manifestlog: open %s: %w", l.path, err)
	}
	end := ld.scan.End
	// Frames restored from their replica go back in place first: the
	// bytes are exactly those the writer wrote (same payloads, same
	// watermark), and the replica stays intact after them, so a crash
	// during the rewrite leaves a file this same repair handles again.
	for _, rs := range ld.restores {
		if _, err := f.WriteAt(rs.frames, rs.off); err != nil {
			f.Close()
			return fmt.Errorf("manifestlog: restore frames of %s at %d: %w", l.path, rs.off, err)
		}
		rep.RestoredFrames = append(rep.RestoredFrames, rs.off)
		rep.Actions = append(rep.Actions, fmt.Sprintf("rewrote %d bytes of torn or damaged frames of %s at offset %d from their replica", len(rs.frames), l.path, rs.off))
	}
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
	// A last group that lost its replica to a crash gets it back, so that
	// damage to that group later can still be repaired.
	if ld.openGroup != nil {
		if _, err := f.WriteAt(ld.openGroup, end); err != nil {
			f.Close()
			return fmt.Errorf("manifestlog: write missing replica of %s at %d: %w", l.path, end, err)
		}
		rep.Actions = append(rep.Actions, fmt.Sprintf("wrote the missing replica of the last group of %s at offset %d", l.path, end))
		end += int64(len(ld.openGroup))
		alloc = max(alloc, end)
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

// newestActivated loads the generations newest first and stops at the first
// activated one: ld and chosen are it (nil and the zero genFile when none
// is), broken the newer ones a crash left before their activation, older
// the ones before it.
func newestActivated(fsys vfs.FS, gens []genFile) (ld *loaded, chosen genFile, broken, older []genFile, err error) {
	for i := len(gens) - 1; i >= 0; i-- {
		g, err := loadGeneration(fsys, gens[i].path, gens[i].gen, nil)
		if err != nil {
			return nil, genFile{}, nil, nil, err
		}
		if g.activated {
			return g, gens[i], broken, gens[:i], nil
		}
		broken = append(broken, gens[i])
	}
	return nil, genFile{}, broken, nil, nil
}
