// Package recovery owns what Open runs before a store serves anything: given
// the manifest state, it checks every segment the manifest names, verifies or
// rebuilds each segment's index, finds the live chain (the live file plus any
// live files that continued it before a seal committed), truncates torn
// tails, and removes files that the manifest does not name when that is
// provably safe. Every step is recorded in a Report.
//
// Cost: O(files + manifest bytes + live chain bytes + index top blocks):
// an index is mapped and only its top block read (package index). Sealed
// data files are not read unless their index must be rebuilt. Recovery
// decides which index to rebuild; package index knows how (Build, Builder).
//
// What is removed, and why it is safe:
//   - "<id>.seg" files the manifest does not name: outputs of a merge or
//     import whose commit never became durable. Their content also exists in
//     the inputs (merge) or was never acknowledged (import).
//   - "<id>.log" files the manifest does not name and that are not part of
//     the live chain: spares made ahead of need that were never written,
//     files a committed merge retired, or a continuation whose predecessor
//     lost a torn tail (its writes were not acknowledged as durable, and
//     keeping them would break the prefix property).
//   - "<id>.idx" files of segments the manifest does not name, and
//     "<id>.idx.rebuild" files an interrupted index rebuild left.
//
// Each proof assumes the manifest state is the store's own: the store opens
// the manifest log with HasData (IsStoreFile), so that no manifest is
// created beside data files and a stray MANIFEST-* name is refused. A
// directory under any of these names, or where a segment's index belongs,
// is never removed or written over: Plan fails with a *corruption.Error
// naming it.
//
// Run is Plan, which reads and decides, then Settle, which truncates,
// syncs and removes (and syncs the directory after a removal). Plan's named
// steps, in order: inventory (list the directory), checkSegmentFiles (every
// segment the manifest names is there, long enough), loadSegments (load or
// rebuild each index), findLiveChain (replay the live file and its
// continuations), digestChain (digest the chain files Open will seal), and
// planRemovals. Settle's: settleChain (truncate torn tails, sync), then
// removeFiles (remove, sync the directory). A file is removed only once it
// has been read and so proved to hold no acknowledged data. A candidate
// continuation that cannot be read (an I/O error, a short read) makes Run
// fail with that error, and one damaged in a way a crash cannot produce
// makes it fail with a *corruption.Error naming the file and offset; in
// both cases nothing at all is removed, so a later Open (after the error
// passed, or after an explicit repair) finds every file where it was.
//
// A read-only recovery (Options.ReadOnly, then WouldSettle instead of
// Settle) changes nothing at all: indexes are rebuilt in memory, torn tails
// are read up to their last valid record and left, and the files Settle
// would remove are left and not served. The Report then says what would
// have been repaired.
//
// Nothing else in the directory is touched.
package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// IsStoreFile reports whether name is one a store writes beside its
// manifest: a data file or an index (segment.ParseName), or an index
// rebuild's temporary file. A store writes none of them before its
// manifest exists, so a directory holding any of them is a store, and a
// manifest is never created there (manifestlog.Options.HasData).
func IsStoreFile(name string) bool {
	if base, ok := strings.CutSuffix(name, rebuildSuffix); ok {
		_, ext, ok := segment.ParseName(base)
		return ok && ext == segment.NameIndex
	}
	_, _, ok := segment.ParseName(name)
	return ok
}

// Options configures Run.
type Options struct {
	Logger *slog.Logger
	// OnLiveRecord receives every put and delete record of the live chain in
	// file order, with the id of the data file that holds it.
	OnLiveRecord func(fileID uint64, r segment.Record, off int64, length int) error
	// NoMap reads index files into the heap instead of mapping them.
	NoMap bool
	// Repair, if set, returns for a segment the function its index calls
	// when it finds damage after Open (index.LoadOptions.Repair).
	Repair func(m manifestlog.SegmentMeta) func(cause error) (*index.Index, error)
	// Repaired, if set, returns for a segment the function its index calls
	// after each repair, outside its repair lock
	// (index.LoadOptions.Repaired).
	Repaired func(m manifestlog.SegmentMeta) func(cause, err error, took time.Duration)
	// ReadOnly: an index that must be rebuilt is rebuilt in memory only, and
	// its file (missing, torn or stale) is left as it is. The caller then
	// calls WouldSettle instead of Settle, so that nothing in the directory
	// changes.
	ReadOnly bool
}

// Segment is a sealed segment named by the manifest, with its index ready.
type Segment struct {
	Meta  manifestlog.SegmentMeta
	Path  string
	Index *index.Index
}

// LiveFile is one file of the live chain.
type LiveFile struct {
	ID      uint64
	Path    string
	End     int64 // end of valid data; the file is durable up to here
	Records int
	// Digest is the xxhash64 of [0, End) of every chain file but the last
	// (the ones Open seals), read by Plan so that sealing them after Settle
	// needs no read that could fail once files were changed.
	Digest uint64
}

// Result is what the store needs to start serving.
type Result struct {
	Segments  []Segment  // in manifest order of Order, oldest first
	Live      []LiveFile // the live chain, oldest first; the last is the live file
	MaxFileID uint64     // highest id of any data or index file seen on disk

	// What Settle will change, decided by Plan after every read succeeded.
	dir     string
	rep     *Report
	log     *slog.Logger
	settle  []settleJob // every file of the live chain
	removes []string    // files that provably hold no acknowledged data
}

// settleJob is a live chain file to make durable, cut at end if torn.
type settleJob struct {
	path      string
	end       int64
	torn      bool
	tornBytes int64
}

// TornTail records a torn tail that was truncated.
type TornTail struct {
	Path   string
	Offset int64 // where valid data ended
	Bytes  int64 // how many bytes were dropped
}

// Report records every repair Run made. For a read-only recovery
// (ReadOnly set: Options.ReadOnly, then WouldSettle) nothing was changed,
// and the report says what a writable one would have repaired: the torn
// tails it would have truncated (they were read up to their last valid
// record), the files it would have removed (left in place and not served)
// and the indexes it rebuilt in memory only.
type Report struct {
	TornTails      []TornTail
	RemovedFiles   []string
	RebuiltIndexes []string // index paths, with the reason after a colon
	DroppedChain   []string // live continuations dropped because their predecessor was torn
	// ManifestActions are the manifest log's repairs, in words (set by the
	// store from manifestlog.Report.Actions; recovery itself does not
	// touch the manifest).
	ManifestActions []string
	ReadOnly        bool // nothing was changed; the fields above say what would have been
}

// Repaired reports whether anything was repaired (for a read-only report:
// whether anything needed repair). A value receiver, so that it can be
// called on the Report a Store returns by value.
func (r Report) Repaired() bool {
	return len(r.TornTails)+len(r.RemovedFiles)+len(r.RebuiltIndexes)+len(r.DroppedChain)+len(r.ManifestActions) > 0
}

// Run recovers the directory dir against the manifest state: Plan, then
// Settle.
func Run(fsys vfs.FS, dir string, state manifestlog.State, opts Options) (*Result, *Report, error) {
	res, rep, err := Plan(fsys, dir, state, opts)
	if err != nil {
		return res, rep, err
	}
	return res, rep, res.Settle(fsys)
}

// Plan reads and checks everything recovery needs (the segments the
// manifest names, their indexes, the live chain) and decides what to repair,
// changing nothing but index files (a cache, rebuilt where needed). A read
// error or damage fails it before any data file is touched; Settle then
// makes the repairs. A caller with reads of its own to do before anything
// changes (opening the chain's files) does them between the two.
func Plan(fsys vfs.FS, dir string, state manifestlog.State, opts Options) (*Result, *Report, error) {
	res, rep, err := plan(fsys, dir, state, opts)
	if err != nil {
		if res != nil {
			// The indexes loaded so far hold mappings nobody will use.
			res.CloseIndexes()
		}
		return nil, rep, err
	}
	return res, rep, nil
}

// CloseIndexes releases the indexes of the result's segments: for a caller
// that gives up on the result.
func (r *Result) CloseIndexes() {
	for _, sg := range r.Segments {
		if sg.Index != nil {
			_ = sg.Index.Close() // read-only mappings: nothing to lose
		}
	}
}

// planner holds what Plan has learned so far; each of its methods is one
// named step of Plan, run in this order: inventory, checkSegmentFiles,
// loadSegments, findLiveChain, digestChain, planRemovals. Every step only
// reads (loadSegments may rewrite an index file, a cache, unless
// Options.ReadOnly).
type planner struct {
	fsys  vfs.FS
	dir   string
	state manifestlog.State
	opts  Options
	log   *slog.Logger
	res   *Result
	rep   *Report
	// files is what inventory found on disk, by id.
	files map[uint64]*onDisk
	// metas are the manifest's segments, oldest (lowest Order) first.
	metas []manifestlog.SegmentMeta
	// chainIDs are the files of the live chain.
	chainIDs map[uint64]bool
}

// onDisk says which files of one id exist.
type onDisk struct{ log, seg, idx bool }

func (p *planner) path(name string) string { return filepath.Join(p.dir, name) }

func plan(fsys vfs.FS, dir string, state manifestlog.State, opts Options) (*Result, *Report, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &Report{ReadOnly: opts.ReadOnly}
	p := &planner{fsys: fsys, dir: dir, state: state, opts: opts, log: log, rep: rep,
		res: &Result{dir: dir, rep: rep, log: log}, files: map[uint64]*onDisk{}}
	if err := p.inventory(); err != nil {
		return nil, nil, err
	}
	for _, step := range []func() error{p.checkSegmentFiles, p.loadSegments, p.findLiveChain, p.digestChain} {
		if err := step(); err != nil {
			return p.partial(), rep, err
		}
	}
	if err := p.planRemovals(); err != nil {
		return p.partial(), rep, err
	}
	return p.res, rep, nil
}

// partial is the result to hand back with an error: the segments loaded so
// far, whose indexes Plan closes, or nil.
func (p *planner) partial() *Result {
	if len(p.res.Segments) == 0 {
		return nil
	}
	return p.res
}

// inventory lists the directory: which data and index files exist for
// each id, the highest id seen, and leftover temporary files of an index
// rebuild a crash interrupted (a cache's, holding no data: removed).
func (p *planner) inventory() error {
	names, err := p.fsys.List(p.dir)
	if err != nil {
		return fmt.Errorf("recovery: list %s: %w", p.dir, err)
	}
	for _, name := range names {
		if base, ok := strings.CutSuffix(name, rebuildSuffix); ok {
			if _, ext, ok := segment.ParseName(base); ok && ext == segment.NameIndex {
				p.res.removes = append(p.res.removes, p.path(name))
			}
			continue
		}
		id, ext, ok := segment.ParseName(name)
		if !ok {
			continue
		}
		p.res.MaxFileID = max(p.res.MaxFileID, id)
		d := p.files[id]
		if d == nil {
			d = &onDisk{}
			p.files[id] = d
		}
		switch ext {
		case segment.NameLog:
			d.log = true
		case segment.NameSeg:
			d.seg = true
		case segment.NameIndex:
			d.idx = true
		}
	}
	return nil
}

// checkSegmentFiles checks that every sealed segment the manifest names is
// on disk and at least as long as recorded: a shorter or missing file is
// never papered over with a smaller store.
func (p *planner) checkSegmentFiles() error {
	p.metas = make([]manifestlog.SegmentMeta, 0, len(p.state.Segments))
	for _, m := range p.state.Segments {
		p.metas = append(p.metas, m)
	}
	slices.SortFunc(p.metas, func(a, b manifestlog.SegmentMeta) int { return cmp.Compare(a.Order, b.Order) })
	for _, m := range p.metas {
		dataPath := p.path(segment.DataName(m.ID, m.FileKind))
		size, err := p.fsys.Stat(dataPath)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return corruption.New(dataPath, -1, "segment %d named by the manifest is missing", m.ID)
			}
			return fmt.Errorf("recovery: stat %s: %w", dataPath, err)
		}
		if size < m.DataLength {
			return corruption.New(dataPath, size, "segment %d is %d bytes, the manifest recorded %d", m.ID, size, m.DataLength)
		}
	}
	return nil
}

// loadSegments loads (or rebuilds) every segment's index, in parallel, and
// records the rebuilds. On an error it closes every index it loaded.
func (p *planner) loadSegments() error {
	loads := loadIndexes(p.fsys, p.dir, p.metas, p.opts)
	// The first real failure in manifest order: a segment skipped because
	// another failed first (errNotLoaded) is not one.
	closeLoads := func() {
		for _, ld := range loads {
			if ld.ix != nil {
				_ = ld.ix.Close() // read-only mappings: nothing to lose
			}
		}
	}
	for _, ld := range loads {
		if ld.err != nil && !errors.Is(ld.err, errNotLoaded) {
			closeLoads()
			return ld.err
		}
	}
	for i, m := range p.metas {
		ld := loads[i]
		if ld.err != nil {
			closeLoads()
			p.res.Segments = nil // closed: not for Plan to close again
			return ld.err
		}
		if ld.reason != "" {
			ixPath := p.path(segment.IndexName(m.ID))
			p.rep.RebuiltIndexes = append(p.rep.RebuiltIndexes, ixPath+": "+ld.reason)
			if p.opts.ReadOnly {
				p.log.Warn("segkv: rebuilt index from its data file in memory (read-only)", "index", ixPath, "reason", ld.reason)
			} else {
				p.log.Warn("segkv: rebuilt index from its data file", "index", ixPath, "reason", ld.reason)
			}
		}
		p.res.Segments = append(p.res.Segments, Segment{Meta: m, Path: p.path(segment.DataName(m.ID, m.FileKind)), Index: ld.ix})
	}
	return nil
}

// findLiveChain finds the live chain: the live file, then every unnamed log
// file that links to its predecessor with the predecessor's exact length.
// Each file of the chain is replayed into Options.OnLiveRecord.
func (p *planner) findLiveChain() error {
	if p.state.LiveID == 0 {
		return nil
	}
	p.chainIDs = map[uint64]bool{}
	// Continuations have larger ids than the file they continue, but not
	// necessarily the next id: merges and imports draw from the same counter.
	candidates := []uint64{p.state.LiveID}
	for _, id := range sortedKeys(p.files) {
		if _, named := p.state.Segments[id]; id > p.state.LiveID && p.files[id].log && !named {
			candidates = append(candidates, id)
		}
	}
	prevID := uint64(0)
	prevEnd := int64(-1)
	for _, id := range candidates {
		lf, rr, ok, err := p.chainCandidate(id, prevID, prevEnd)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		// Settle makes the recovered content durable and cuts off anything
		// after it, so that new frames appended at End can never be
		// followed by stale ones.
		p.res.settle = append(p.res.settle, settleJob{path: lf.Path, end: lf.End, torn: rr.Scan.Torn, tornBytes: rr.Scan.TornBytes})
		p.chainIDs[id] = true
		p.res.Live = append(p.res.Live, lf)
		prevID, prevEnd = id, lf.End
	}
	return nil
}

// chainCandidate replays live file id if it belongs to the chain after
// prevID (which ends at prevEnd); ok is false for a file that does not.
func (p *planner) chainCandidate(id, prevID uint64, prevEnd int64) (lf LiveFile, rr segment.ReplayResult, ok bool, err error) {
	path := p.path(segment.DataName(id, segment.KindLog))
	if id == p.state.LiveID {
		lf, rr, err = replayLive(p.fsys, path, id, p.opts)
		err = orNotAFile(p.fsys, path, err)
		if errors.Is(err, fs.ErrNotExist) {
			// Named by the manifest, so it was durable: its absence is
			// damage, not something a crash leaves.
			return lf, rr, false, corruption.New(path, -1, "live file %d named by the manifest is missing", id)
		}
		// A read error or damage a crash cannot produce: the file may hold
		// acknowledged writes, so nothing is removed and Open fails with
		// the error (a read error may pass; damage is a typed corruption
		// error naming the file and offset).
		return lf, rr, err == nil, err
	}
	unused, err := unusedSpare(p.fsys, path)
	if err != nil {
		if isDir(p.fsys, path) {
			return lf, rr, false, notAFile(path)
		}
		// Not proved unused: it may hold acknowledged writes.
		return lf, rr, false, fmt.Errorf("recovery: check live continuation candidate %s: %w", path, err)
	}
	if unused {
		// A continuation's first frame is its link record, and any later
		// sync made it durable too: no first frame, nothing written. Skip
		// it without scanning its preallocated space.
		return lf, rr, false, nil
	}
	// Validate a candidate before any of its records reach the caller;
	// continuations only exist after a crash inside a seal, so reading one
	// twice costs nothing in the common case.
	if lf, rr, err = replayLive(p.fsys, path, id, Options{}); err != nil {
		return lf, rr, false, err
	}
	if !rr.HasLink || rr.LinkID != prevID {
		// A spare never written to, or a file that continues something else.
		return lf, rr, false, nil
	}
	if rr.LinkLen != prevEnd {
		// The predecessor lost a torn tail that this file's writes came
		// after (a longer link), or was cut (a shorter one): either way
		// these writes do not extend a prefix of history.
		p.log.Warn("segkv: live continuation dropped: its predecessor does not end where it links",
			"path", path, "predecessor_end", prevEnd, "link_length", rr.LinkLen)
		p.rep.DroppedChain = append(p.rep.DroppedChain, path)
		return lf, rr, false, nil
	}
	lf, rr, err = replayLive(p.fsys, path, id, p.opts)
	return lf, rr, err == nil, err
}

// digestChain reads the digests of the chain files Open will seal (all
// but the last), now, while nothing has changed yet.
func (p *planner) digestChain() error {
	res := p.res
	for i := range res.Live[:max(len(res.Live)-1, 0)] {
		lf := &res.Live[i]
		d, err := digestFile(p.fsys, lf.Path, lf.End)
		if err != nil {
			return err
		}
		lf.Digest = d
	}
	return nil
}

// planRemovals picks what the manifest does not name and the chain does
// not hold: files that provably hold no acknowledged data. A directory
// under such a name is not the store's (it makes files only): Plan fails
// with a *corruption.Error naming it, and nothing is removed.
func (p *planner) planRemovals() error {
	for _, id := range sortedKeys(p.files) {
		d := p.files[id]
		m, named := p.state.Segments[id]
		if d.seg && (!named || m.FileKind != segment.KindSeg) {
			p.res.removes = append(p.res.removes, p.path(segment.DataName(id, segment.KindSeg)))
		}
		if d.log && !p.chainIDs[id] && (!named || m.FileKind != segment.KindLog) {
			p.res.removes = append(p.res.removes, p.path(segment.DataName(id, segment.KindLog)))
		}
		if d.idx && !named {
			p.res.removes = append(p.res.removes, p.path(segment.IndexName(id)))
		}
	}
	for _, path := range p.res.removes {
		if isDir(p.fsys, path) {
			p.res.removes = nil
			return notAFile(path)
		}
	}
	return nil
}

// isDir reports whether path names a directory. vfs.FS has no file modes:
// List succeeds on a directory only (a file gives ENOTDIR, a missing
// name ErrNotExist).
func isDir(fsys vfs.FS, path string) bool {
	_, err := fsys.List(path)
	return err == nil
}

// notAFile is the error for a directory where the store keeps a file of
// its own. The store never makes one and never removes what it did not
// make, so Open refuses rather than remove it or write over it.
func notAFile(path string) error {
	return corruption.New(path, -1,
		"a directory where the store keeps a file; the store never makes one and does not remove what it did not make: move it out of the store's directory")
}

// orNotAFile is err, or notAFile when path turns out to be a directory
// (the reason the read or open failed).
func orNotAFile(fsys vfs.FS, path string, err error) error {
	if err != nil && !errors.Is(err, fs.ErrNotExist) && isDir(fsys, path) {
		return notAFile(path)
	}
	return err
}

// Settle makes the repairs Plan decided: it cuts torn tails off the live
// chain and syncs every chain file, removes the files that hold no
// acknowledged data, and, if it removed any, syncs the directory, so that a
// removed continuation cannot come back after a power loss and be taken for
// part of the chain again (a later write can make its predecessor as long
// as its link record says). Call it once.
func (res *Result) Settle(fsys vfs.FS) error {
	if err := res.settleChain(fsys); err != nil {
		return err
	}
	if err := res.removeFiles(fsys); err != nil {
		return err
	}
	res.settle, res.removes = nil, nil
	return nil
}

// WouldSettle records in the report what Settle would change, and changes
// nothing: a torn tail stays on disk (the store reads each chain file up
// to its End), and a file Settle would remove stays, unserved. For a
// read-only Open, which calls it instead of Settle. Call it once.
func (res *Result) WouldSettle() {
	for _, j := range res.settle {
		if j.torn {
			res.rep.TornTails = append(res.rep.TornTails, TornTail{Path: j.path, Offset: j.end, Bytes: j.tornBytes})
			res.log.Warn("segkv: torn tail left in place (read-only)", "path", j.path, "offset", j.end, "bytes", j.tornBytes)
		}
	}
	for _, p := range res.removes {
		res.rep.RemovedFiles = append(res.rep.RemovedFiles, p)
		res.log.Warn("segkv: file the manifest does not name left in place (read-only)", "path", p)
	}
	res.settle, res.removes = nil, nil
}

// settleChain cuts torn tails off the live chain and syncs every chain
// file.
func (res *Result) settleChain(fsys vfs.FS) error {
	for _, j := range res.settle {
		if j.torn {
			res.rep.TornTails = append(res.rep.TornTails, TornTail{Path: j.path, Offset: j.end, Bytes: j.tornBytes})
			res.log.Warn("segkv: truncated torn tail", "path", j.path, "offset", j.end, "bytes", j.tornBytes)
		}
		if err := settleLive(fsys, j.path, j.end, j.torn); err != nil {
			return err
		}
	}
	return nil
}

// removeFiles removes the files Plan proved hold no acknowledged data and,
// if it removed any, syncs the directory.
func (res *Result) removeFiles(fsys vfs.FS) error {
	for _, p := range res.removes {
		if err := remove(fsys, p, res.rep, res.log); err != nil {
			return err
		}
	}
	if len(res.removes) > 0 {
		if err := fsys.SyncDir(res.dir); err != nil {
			return fmt.Errorf("recovery: sync directory %s after removals: %w", res.dir, err)
		}
	}
	return nil
}

// digestFile is segment.Digest of [0, length) of the file at p.
func digestFile(fsys vfs.FS, p string, length int64) (uint64, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return 0, fmt.Errorf("recovery: open %s: %w", p, err)
	}
	defer f.Close()
	d, err := segment.Digest(f, length)
	if err != nil {
		return 0, fmt.Errorf("recovery: digest of %s: %w", p, err)
	}
	return d, nil
}

// replayLive replays one file of the live chain into OnLiveRecord.
func replayLive(fsys vfs.FS, p string, id uint64, opts Options) (LiveFile, segment.ReplayResult, error) {
	lf := LiveFile{ID: id, Path: p}
	rr, err := segment.Replay(fsys, p, -1, func(r segment.Record, off int64, length int) error {
		if opts.OnLiveRecord == nil {
			return nil
		}
		return opts.OnLiveRecord(id, r, off, length)
	})
	if err != nil {
		return lf, rr, err
	}
	lf.End = rr.Scan.End
	lf.Records = rr.Records
	return lf, rr, nil
}

// unusedSpare reports whether the live file at p has no first frame: a
// spare made ahead of need that no writer used.
func unusedSpare(fsys vfs.FS, p string) (bool, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return false, err
	}
	if size < segment.HeaderSize+wal.HeaderSize {
		// No room for a first frame: nothing was ever written after the
		// header. Decided by the size, never by a read that came back short.
		return true, nil
	}
	hdr := make([]byte, wal.HeaderSize)
	if _, err := f.ReadAt(hdr, segment.HeaderSize); err != nil {
		return false, err
	}
	for _, b := range hdr {
		if b != 0 {
			return false, nil
		}
	}
	return true, nil
}

// settleLive truncates a torn tail and syncs the live file, so that what the
// store serves from now on is durable before any new write depends on it.
func settleLive(fsys vfs.FS, p string, end int64, torn bool) error {
	f, err := fsys.OpenReadWrite(p)
	if err != nil {
		return fmt.Errorf("recovery: open %s: %w", p, err)
	}
	defer f.Close()
	if torn {
		if err := f.Truncate(end); err != nil {
			return fmt.Errorf("recovery: truncate %s: %w", p, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("recovery: sync %s: %w", p, err)
	}
	return nil
}

func remove(fsys vfs.FS, p string, rep *Report, log *slog.Logger) error {
	if err := fsys.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // gone already (a rebuild renamed its temporary file)
		}
		return fmt.Errorf("recovery: remove %s: %w", p, err)
	}
	rep.RemovedFiles = append(rep.RemovedFiles, p)
	log.Warn("segkv: removed file the manifest does not name", "path", p)
	return nil
}

// errNotLoaded marks the segments loadIndexes skipped after a failure.
var errNotLoaded = errors.New("recovery: index not loaded: an earlier segment failed")

// indexLoad is the outcome of LoadOrRebuildIndex for one segment.
type indexLoad struct {
	ix     *index.Index
	reason string
	err    error
}

// loadIndexes runs LoadOrRebuildIndex for every segment, on as many
// goroutines as there are CPUs: loading an index is a large read into fresh
// memory plus a checksum and a validation pass, CPU-bound when the page
// cache holds the file, so the store's Open scales with cores rather than
// with the sum of the index sizes. Rebuilds from data files, which hold a
// map of every key of the segment, run one at a time, so memory stays that
// of one rebuild however many indexes are missing. After the first error no
// new segment is started: Open fails anyway. Results are in metas' order,
// so the caller reports the first failure in that order among those tried.
func loadIndexes(fsys vfs.FS, dir string, metas []manifestlog.SegmentMeta, opts Options) []indexLoad {
	out := make([]indexLoad, len(metas))
	next := make(chan int)
	var (
		wg        sync.WaitGroup
		rebuildMu sync.Mutex
		failed    atomic.Bool
	)
	for range min(runtime.GOMAXPROCS(0), len(metas)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if failed.Load() {
					// Handed over before the dispatcher saw the failure.
					out[i].err = errNotLoaded
					continue
				}
				load := loadOrRebuildIndex
				if opts.ReadOnly {
					load = loadOrRebuildInMemory
				}
				ix, reason, err := load(fsys, dir, metas[i], loadOptions(opts, metas[i]), &rebuildMu, failed.Load)
				out[i] = indexLoad{ix: ix, reason: reason, err: err}
				if err != nil {
					failed.Store(true)
				}
			}
		}()
	}
	for i := range metas {
		if failed.Load() {
			// Never reached by the caller, which stops at the failure that
			// was dispatched before these; filled in all the same.
			for j := i; j < len(metas); j++ {
				out[j].err = errNotLoaded
			}
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// loadOptions are the index load options of segment m.
func loadOptions(opts Options, m manifestlog.SegmentMeta) index.LoadOptions {
	lo := index.LoadOptions{NoMap: opts.NoMap}
	if opts.Repair != nil {
		lo.Repair = opts.Repair(m)
	}
	if opts.Repaired != nil {
		lo.Repaired = opts.Repaired(m)
	}
	return lo
}

// LoadOrRebuildIndex loads the index of segment m, its top block verified
// against the checksum and identity the manifest recorded. If the index is
// missing, torn, stale, corrupt or of an older format it is rebuilt from the
// data file and rewritten (without a sync: it is a cache), and reason says
// why. A rebuilt index that still does not match the manifest means the
// data file is not what was sealed: that is corruption of the data file.
func LoadOrRebuildIndex(fsys vfs.FS, dir string, m manifestlog.SegmentMeta, opts index.LoadOptions) (*index.Index, string, error) {
	return loadOrRebuildIndex(fsys, dir, m, opts, nil, nil)
}

// loadOrRebuildIndex is LoadOrRebuildIndex; a rebuild holds rebuildMu, if
// set, for its duration, and does not start once stopped (if set) reports
// that another segment failed.
func loadOrRebuildIndex(fsys vfs.FS, dir string, m manifestlog.SegmentMeta, opts index.LoadOptions, rebuildMu *sync.Mutex, stopped func() bool) (*index.Index, string, error) {
	ixPath := filepath.Join(dir, segment.IndexName(m.ID))
	id := index.Identity{DataLength: m.DataLength, DataDigest: m.DataDigest}
	ix, err := index.Load(fsys, ixPath, m.IndexChecksum, id, opts)
	if err == nil {
		return ix, "", nil
	}
	reason := rebuildReason(err)
	if rebuildMu != nil {
		rebuildMu.Lock()
		defer rebuildMu.Unlock()
	}
	if stopped != nil && stopped() {
		return nil, reason, errNotLoaded
	}
	if err := RebuildIndexFile(fsys, dir, m); err != nil {
		return nil, reason, err
	}
	// Read back through a mapping like any other index, so that a rebuilt
	// index does not hold the heap its file would.
	ix, err = index.Load(fsys, ixPath, m.IndexChecksum, id, opts)
	if err != nil {
		return nil, reason, fmt.Errorf("recovery: read back rebuilt index %s: %w", ixPath, err)
	}
	return ix, reason, nil
}

// loadOrRebuildInMemory is loadOrRebuildIndex for a read-only recovery: a
// rebuilt index is decoded in the heap and no file is written or replaced.
func loadOrRebuildInMemory(fsys vfs.FS, dir string, m manifestlog.SegmentMeta, opts index.LoadOptions, rebuildMu *sync.Mutex, stopped func() bool) (*index.Index, string, error) {
	ixPath := filepath.Join(dir, segment.IndexName(m.ID))
	id := index.Identity{DataLength: m.DataLength, DataDigest: m.DataDigest}
	ix, err := index.Load(fsys, ixPath, m.IndexChecksum, id, opts)
	if err == nil {
		return ix, "", nil
	}
	if isDir(fsys, ixPath) {
		// Refused as a writable Open refuses it (which could not write
		// the rebuilt index there), though a rebuild in memory could
		// serve: a read-only Open answers what a writable one would.
		return nil, "", notAFile(ixPath)
	}
	reason := rebuildReason(err)
	rebuildMu.Lock()
	defer rebuildMu.Unlock()
	if stopped() {
		return nil, reason, errNotLoaded
	}
	ix, err = RebuildIndexInMemory(fsys, dir, m)
	return ix, reason, err
}

// RebuildIndexInMemory rebuilds segment m's index from its data file,
// checked against the manifest as RebuildIndex checks it, and decodes it in
// the heap, writing nothing.
func RebuildIndexInMemory(fsys vfs.FS, dir string, m manifestlog.SegmentMeta) (*index.Index, error) {
	data, err := RebuildIndex(fsys, dir, m)
	if err != nil {
		return nil, err
	}
	ixPath := filepath.Join(dir, segment.IndexName(m.ID))
	ix, err := index.Decode(ixPath, data, m.IndexChecksum, index.Identity{DataLength: m.DataLength, DataDigest: m.DataDigest})
	if err != nil {
		return nil, fmt.Errorf("recovery: decode rebuilt index %s: %w", ixPath, err)
	}
	return ix, nil
}

// rebuildReason says in words why an index load failed.
func rebuildReason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case !errors.Is(err, corruption.ErrCorrupt):
		return "unreadable: " + err.Error()
	}
	return err.Error()
}

// RebuildIndexFile rebuilds the index file of segment m from its data file,
// checked against the manifest as RebuildIndex checks it, and puts it in
// place of the index file by a rename, so that a mapping of a damaged file
// being replaced stays valid. A segment whose records are in key order (a
// merge output; the manifest's key count and first and last keys say what
// to expect) is indexed in one streaming pass whose memory does not grow
// with the segment; any other is rebuilt in memory (RebuildIndex), as are
// segments recorded before index version 3. Not synced: a lost file is
// rebuilt again.
func RebuildIndexFile(fsys vfs.FS, dir string, m manifestlog.SegmentMeta) error {
	ixPath := filepath.Join(dir, segment.IndexName(m.ID))
	tmp := ixPath + rebuildSuffix
	for _, p := range []string{ixPath, tmp} {
		// The rename onto a directory would fail with a bare "file
		// exists", after the whole rebuild.
		if isDir(fsys, p) {
			return notAFile(p)
		}
	}
	streamed, err := rebuildOrdered(fsys, dir, m, tmp)
	if err != nil {
		return err
	}
	if !streamed {
		data, err := RebuildIndex(fsys, dir, m)
		if err != nil {
			return err
		}
		if err := index.Write(fsys, tmp, data); err != nil {
			_ = fsys.Remove(tmp)
			return fmt.Errorf("recovery: rewrite index %s: %w", ixPath, err)
		}
	}
	if err := fsys.Rename(tmp, ixPath); err != nil {
		_ = fsys.Remove(tmp)
		return fmt.Errorf("recovery: rewrite index %s: %w", ixPath, err)
	}
	return nil
}

// rebuildSuffix names an index file being rebuilt, until its rename.
const rebuildSuffix = ".rebuild"

// rebuildOrdered tries the streaming rebuild of RebuildIndexFile into tmp.
// It reports false, having left no file, when the segment is not one it
// can index that way (records out of key order, no key bounds in the
// manifest, or a checksum only the in-memory rebuild can match, such as a
// legacy one); a data file that is not what was sealed is an error.
func rebuildOrdered(fsys vfs.FS, dir string, m manifestlog.SegmentMeta, tmp string) (bool, error) {
	if m.Keys > 0 && (m.MinKey == nil || m.MaxKey == nil) || m.Keys > math.MaxInt {
		return false, nil
	}
	dataPath := filepath.Join(dir, segment.DataName(m.ID, m.FileKind))
	digest, err := digestFile(fsys, dataPath, m.DataLength)
	if err != nil {
		return false, err
	}
	if digest != m.DataDigest {
		return false, corruption.New(dataPath, -1, "data digest %016x, the manifest recorded %016x", digest, m.DataDigest)
	}
	sum, err := index.WriteOrdered(context.Background(), fsys, dataPath, tmp, index.WriterParams{
		Count: int(m.Keys), FirstKey: m.MinKey, LastKey: m.MaxKey,
		ID: index.Identity{DataLength: m.DataLength, DataDigest: m.DataDigest},
	})
	switch {
	case errors.Is(err, index.ErrInvalidEntries):
		return false, nil
	case err != nil:
		return false, err
	case sum != m.IndexChecksum:
		_ = fsys.Remove(tmp)
		return false, nil
	}
	return true, nil
}

// RebuildIndex rebuilds the index file of segment m from its data file and
// checks it against the manifest: the data digest, and the index checksum,
// either of a version 3 index or, for a segment recorded before version 3,
// of its legacy index (the file returned then carries that checksum, see
// index.EncodeUpgrade). Any mismatch is a *corruption.Error: the data file
// is not what was sealed.
func RebuildIndex(fsys vfs.FS, dir string, m manifestlog.SegmentMeta) ([]byte, error) {
	dataPath := filepath.Join(dir, segment.DataName(m.ID, m.FileKind))
	built, err := index.Build(fsys, dataPath, m.DataLength)
	if err != nil {
		return nil, err
	}
	if built.Digest != m.DataDigest {
		return nil, corruption.New(dataPath, -1, "data digest %016x, the manifest recorded %016x", built.Digest, m.DataDigest)
	}
	data, err := built.Anchored(m.IndexChecksum)
	if err != nil {
		return nil, corruption.New(filepath.Join(dir, segment.IndexName(m.ID)), -1, "%v", err)
	}
	return data, nil
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
