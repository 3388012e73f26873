// Package manifestlog is the durable, append-only record of which segments
// of a segkv store exist: the trusted commit point of every seal, merge and
// import.
//
// # Format, version 3
//
// The log lives in generation files named MANIFEST-<16 lowercase hex digits>
// (the generation number) in the store directory. Every file is a sequence of
// wal frames (package wal, docs/FORMAT.md):
//
//	offset 0  u64 LE  xxhash64 checksum (as defined by wal)
//	offset 8  u32 LE  payload length
//	offset 12 u32 LE  reserved, 0
//	offset 16 u64 LE  watermark: the file offset below which the writer knew
//	                  the file to be synced when it wrote this frame
//	offset 24 payload
//
// Every payload is one record; its first byte is the record kind. Integers
// are uvarint (encoding/binary) unless marked LE (fixed-width little endian);
// "bytes" is a uvarint length followed by that many bytes. A generation is:
//
//	header      kind=1 | magic "segkvMNF" (8 bytes) | version u32 LE (=3)
//	            | generation u64 LE (must equal the file name's number)
//	checkpoint  kind=2 | seq | liveID | nextID | nextOrder | segment count N
//	            | followed | nAdopted | nAdopted x digest u64 LE
//	segments*   kind=3 | n (>0) | n x segment       (the N segments, in chunks)
//	edit*       kind=4 | ...                        (copy-forward backlog, see below)
//	activate    kind=5 | seq (the state's seq at this point)
//	replica     kind=6 | ...                        (of the backlog and activate)
//	then, per group commit:
//	edit+       kind=4 | seq | flags u8 (bit 0: sets the live id; bit 1:
//	            sets the followed seq; bit 2: adopts digests; bit 3: forgets
//	            the adopted digests first; other bits 0)
//	            | [liveID if bit 0] | [followed if bit 1] | nextID | nextOrder
//	            | nAdd | nAdd x segment | nRemove | nRemove x id
//	            | [nAdopt (>0) | nAdopt x digest u64 LE if bit 2]
//	replica     kind=6 | groupStart (offset of the group's first frame) | n
//	            | n x bytes (the payloads of the group's n frames)
//
//	segment     id | fileKind u8 | order | dataLength | dataDigest u64 LE
//	            | indexChecksum u64 LE | records | keys | minKey bytes
//	            | maxKey bytes | addedSeq | origin
//
// Version 2 lacks origin, followed, the adopted digests and edit flag bits
// 1 to 3; this package reads it (as origin 0, followed 0, nothing adopted)
// and rewrites it as version 3 before appending.
//
// Records state results: an edit's added segment is "this id is live with
// this metadata" (addedSeq equals the edit's seq), a removal is "this id is
// gone", nextID/nextOrder are the counters after the edit. Replay applies
// edits in order, last wins. An edit's seq is the previous seq + 1; an edit
// whose seq the checkpoint already covers is skipped (only before the first
// applied edit); any other gap or repeat, an unknown record kind, an unknown
// fileKind (see segment.FileKind), unknown flag bits, trailing bytes, or the
// removal of an unknown id is corruption.
// A header with another version is refused with ErrUnsupportedVersion: it is
// not read further.
//
// A generation counts only once its activate record is present: a file
// without one (a crash while creating it) is removed by Open if an older
// complete generation exists. The activate record is what makes rotation
// crash-safe: the checkpoint covers seq S, edits committed to the old
// generation while the checkpoint was being written follow it, and only then
// is the generation activated (one write + fdatasync), so an activated
// generation always holds every acknowledged commit.
//
// Open picks the highest-numbered activated generation, truncates a torn tail
// (the scanner tells a torn tail from corruption by the frames' watermarks),
// and removes every other generation. The frames of the last group have no
// later frame to vouch for them, so every group ends with a replica written
// in the same write: Open rebuilds a torn or damaged frame of the last group
// from it and writes it back in place (replica.go), so that a bit flip there
// is not taken for a torn tail that drops an acknowledged commit.
//
// # Costs
//
// A commit is one pwrite of its frame(s) and their replica at the end of the
// current file and one fdatasync; concurrent commits share both. The file is preallocated
// ahead in chunks so that most commits do not change the file size. When the
// bytes appended since the checkpoint exceed max(CheckpointRatio x checkpoint
// size, MinCheckpointBytes) a background goroutine writes a new generation,
// which keeps the amortized bytes written per commit O(1) at any state size.
package manifestlog

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/segkv/segkv/internal/groupcommit"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// SegmentMeta describes one sealed segment as the manifest records it.
type SegmentMeta struct {
	ID            uint64           // file identity, unique, monotonic; names the data file
	FileKind      segment.FileKind // how the data file is named; an unknown kind is corruption
	Order         uint64           // shadowing order: larger = newer data (the store assigns it)
	DataLength    int64
	DataDigest    uint64 // xxhash64 of the data file
	IndexChecksum uint64 // checksum of the derived index file (the index is a cache; this is its trust anchor)
	Records       uint64
	Keys          uint64
	MinKey        []byte
	MaxKey        []byte
	AddedSeq      uint64 // set by Commit: the Seq of the edit that added it
	// Origin is the id the segment has in the store it was mirrored from
	// (a follower's copy of a leader's segment, see segstore.Follow); 0
	// for a segment of the store's own.
	Origin uint64
}

// Edit is one atomic change to the state. Every part is optional; an edit
// that adds one segment and removes several (a merge) is one record.
type Edit struct {
	Add       []SegmentMeta
	Remove    []uint64 // segment ids
	SetLive   bool
	LiveID    uint64 // the live (tail) data file, when SetLive
	NextID    uint64 // if > current, raises the id counter (never lowers)
	NextOrder uint64 // likewise for the order counter
	// SetFollowed records Followed as the seq of the store this one
	// mirrors (segstore.Follow), in the same commit as the segments.
	SetFollowed bool
	Followed    uint64
	// Adopt lists the digests of data files the edit adopts from a peer
	// (an import). The log remembers the newest AdoptedMemory of
	// them, after the segments themselves are gone, so that a re-run of
	// the same import can be recognised.
	Adopt []uint64
	// ForgetAdopted forgets every remembered adopted digest before Adopt
	// is applied (a ReplaceAll: the store's state starts over, and an
	// import of what it held before is not a re-run).
	ForgetAdopted bool
}

// State is the set of live segments and the counters.
type State struct {
	Seq       uint64 // sequence of the last applied edit (ManifestSeq)
	Segments  map[uint64]SegmentMeta
	LiveID    uint64
	NextID    uint64
	NextOrder uint64
	Followed  uint64   // the followed seq (Edit.Followed), 0 if never set
	Adopted   []uint64 // remembered adopted digests, oldest first
}

// Options tune a Log. The zero value is usable.
type Options struct {
	Logger *slog.Logger
	// CheckpointRatio: rotate when the bytes appended since the checkpoint
	// exceed this multiple of the checkpoint's size. Default 2.
	CheckpointRatio float64
	// MinCheckpointBytes: never rotate before this many bytes were appended
	// since the checkpoint. Default 64 KiB.
	MinCheckpointBytes int64
	// PreallocateBytes is the minimum chunk by which the file is extended
	// ahead of the appends (it grows with the file, up to 8 MiB). Default
	// 64 KiB; negative disables preallocation.
	PreallocateBytes int64
	// OnRotate, if set, is called after each successful rotation with the
	// new generation, the seq its checkpoint covers and the checkpoint's
	// size in bytes. It runs on the rotating goroutine (the background one,
	// or Checkpoint's caller) with no lock of the log's held but the one
	// that keeps rotations apart: it may call Commit, not Checkpoint.
	OnRotate func(gen, seq uint64, checkpointBytes int64)
	// HasData says that the directory holds files the log's user creates
	// only after the log exists (a store's data files). Generation 1 is
	// made complete and durable before any of them, so a never-completed
	// generation 1 beside them is damage (a manifest emptied or zeroed),
	// not a crash while creating the store: Open and OpenReadOnly then
	// refuse with a *corruption.Error instead of re-creating the empty
	// state, which would disown every data file. With HasData they also
	// refuse when no generation exists at all (never create a manifest
	// beside data files) and when a file whose name starts with MANIFEST-
	// is not a generation name (a renamed manifest: IsGenerationName).
	HasData bool
}

// AdoptedMemory is how many adopted digests (Edit.Adopt) the log remembers,
// the newest kept. Each costs 8 bytes of every checkpoint (128 KiB at the
// bound); replay applies the same bound, so the remembered list is a
// function of the history alone.
const AdoptedMemory = 16384

// Report lists what Open found and repaired.
type Report struct {
	Generation     uint64   // the generation in use
	Path           string   // its file
	Created        bool     // no log existed: a fresh one was created
	CheckpointSeq  uint64   // seq covered by the generation's checkpoint
	Replayed       int      // edits replayed after the checkpoint
	TruncatedPath  string   // torn tail: the file truncated ...
	TruncatedAt    int64    // ... at this offset ...
	TruncatedBytes int64    // ... dropping this many bytes (up to the last non-zero one)
	RestoredFrames []int64  // offsets of torn or damaged frames rewritten from their replica
	RemovedOld     []string // older generations removed
	RemovedBroken  []string // newer generations that were never activated, removed
	Actions        []string // every repair, in words (also logged at WARN)
}

// Stats are counters of a Log since Open.
type Stats struct {
	Generation           uint64
	BytesSinceCheckpoint int64 // bytes appended to the current generation after its checkpoint
	CheckpointBytes      int64 // size of the current generation's header + checkpoint
	Commits              uint64
	Syncs                uint64 // fdatasyncs of manifest files (commits, rotations, repairs)
	Rotations            uint64
	RotationFailures     uint64
	CopiedForward        uint64 // edits committed during a rotation and copied into the new generation
	// Rotating is true while a background rotation is scheduled or
	// running. Each rotation makes at most one directory sync (for its new
	// generation), so a caller that counts barriers can tell its own from
	// the log's: wait until Rotating is false, then subtract Rotations and
	// RotationFailures.
	Rotating bool
}

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("manifestlog: closed")

// ErrFailed is wrapped by every Commit after a failed append or sync: the log
// refuses further commits because a half-written record may sit at its end.
var ErrFailed = errors.New("manifestlog: failed")

// ErrInvalidEdit is wrapped by Commit for an edit it refuses (nothing is
// written).
var ErrInvalidEdit = errors.New("manifestlog: invalid edit")

// ErrUnsupportedVersion is wrapped when a manifest file carries a format
// version this package does not know.
var ErrUnsupportedVersion = errors.New("manifestlog: unsupported manifest version")

const filePrefix = "MANIFEST-"

// maxEditBytes bounds one edit record: its replica (the edit plus a few
// bytes) must fit in one frame, and an import of this size is better split
// anyway.
const maxEditBytes = wal.MaxPayload - 64

// pending is a queued commit: what the leader that writes it needs.
type pending struct {
	payload []byte
	edit    Edit // owned copy (keys cloned)
	seq     uint64
}

// pendInfo tracks ids touched by queued, not yet durable edits, so that
// validation of a new edit sees the effect of those queued before it.
type pendInfo struct {
	present bool // after the last queued edit touching it
	n       int  // queued edits touching it
}

type added struct{ seq, id uint64 }
type removed struct{ seq, id, addedSeq uint64 }

// Log is an open manifest log. Its methods are safe for concurrent use.
type Log struct {
	fsys  vfs.FS
	dir   string
	opts  Options
	log   *slog.Logger
	seq   atomic.Uint64 // durable, applied seq
	rotMu sync.Mutex    // one rotation at a time
	wg    sync.WaitGroup

	mu sync.Mutex
	// The current generation. f, end, synced and alloc change only while
	// the write token is held: by a group's leader or by whoever holds gc
	// exclusively (rotation, Close).
	f       vfs.File
	path    string
	gen     uint64
	maxGen  uint64 // highest generation number ever seen or reserved
	end     int64  // next append offset
	synced  int64  // durable watermark (= end after every successful sync)
	alloc   int64  // file size after preallocation
	ckptEnd int64  // offset where the checkpoint's frames end
	ckptSeq uint64 // seq the checkpoint covers

	// Durable state. While a rotation encodes its checkpoint from segs
	// (without mu), changes go to over (nil value = removed) instead.
	segs      map[uint64]SegmentMeta
	over      map[uint64]*SegmentMeta
	rotating  bool
	backlog   [][]byte // payloads committed after the rotation's snapshot
	liveID    uint64
	nextID    uint64
	nextOrder uint64
	followed  uint64
	adopted   []uint64 // oldest first, at most AdoptedMemory
	// firstAdded: for a present id restated since it was first added,
	// the seq of that first add (AddedSeq is the restatement's).
	firstAdded map[uint64]uint64
	adds       []added   // since the checkpoint, in seq order
	rems       []removed // since the checkpoint, in seq order

	// Queued (not yet durable) edits.
	tipSeq, tipNextID, tipNextOrder uint64
	pend                            map[uint64]*pendInfo

	// gc is the write token and the group commit of queued edits
	// (internal/groupcommit): its leaders run writeBatch. Edits are
	// enqueued under mu, so file order is sequence order; mu is never
	// held while waiting for gc (writeBatch takes it).
	gc *groupcommit.Queue[*pending]

	err       error // sticky failure
	closed    bool
	bgRunning bool  // a background rotation is scheduled or running
	rotRetry  int64 // after a failed rotation: bytesSince at which to retry
	stats     Stats
}

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CheckpointRatio <= 0 {
		o.CheckpointRatio = 2
	}
	if o.MinCheckpointBytes <= 0 {
		o.MinCheckpointBytes = 64 << 10
	}
	if o.PreallocateBytes == 0 {
		o.PreallocateBytes = 64 << 10
	}
}

// Seq returns the sequence number of the last durable commit.
func (l *Log) Seq() uint64 { return l.seq.Load() }

// State returns a copy of the durable state. The key slices inside the
// metadata are shared and must not be modified.
func (l *Log) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := State{
		Seq:       l.seq.Load(),
		Segments:  make(map[uint64]SegmentMeta, len(l.segs)+len(l.over)),
		LiveID:    l.liveID,
		NextID:    l.nextID,
		NextOrder: l.nextOrder,
		Followed:  l.followed,
		Adopted:   slices.Clone(l.adopted),
	}
	for id, m := range l.segs {
		st.Segments[id] = m
	}
	for id, m := range l.over {
		if m == nil {
			delete(st.Segments, id)
		} else {
			st.Segments[id] = *m
		}
	}
	return st
}

// lookup returns the durable metadata of id. mu held.
func (l *Log) lookup(id uint64) (SegmentMeta, bool) {
	if m, ok := l.over[id]; ok {
		if m == nil {
			return SegmentMeta{}, false
		}
		return *m, true
	}
	m, ok := l.segs[id]
	return m, ok
}

// Changes reports what changed after seq since: the segments added after it
// that are still present (oldest first) and the ids removed after it that
// existed at since. complete is false when that history is older than the
// current checkpoint (or since is ahead of this log): the caller then needs
// a full listing. It is O(1) when since == Seq() and O(changes) otherwise.
func (l *Log) Changes(since uint64) (add []SegmentMeta, remove []uint64, complete bool) {
	_, add, remove, complete = l.ChangesAt(since)
	return add, remove, complete
}

// ChangesAt is Changes, and also returns the seq the answer describes: the
// added metadata, the removals and that seq are read together, so they
// describe one state even while commits go on.
func (l *Log) ChangesAt(since uint64) (seq uint64, add []SegmentMeta, remove []uint64, complete bool) {
	if cur := l.seq.Load(); since == cur {
		return cur, nil, nil, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.seq.Load()
	if since == cur {
		return cur, nil, nil, true
	}
	if since > cur || since < l.ckptSeq {
		return cur, nil, nil, false
	}
	i, _ := slices.BinarySearchFunc(l.adds, since+1, func(a added, s uint64) int { return cmpU64(a.seq, s) })
	for _, a := range l.adds[i:] {
		if a.seq > cur {
			break
		}
		if m, ok := l.lookup(a.id); ok && m.AddedSeq == a.seq {
			add = append(add, m)
		}
	}
	j, _ := slices.BinarySearchFunc(l.rems, since+1, func(r removed, s uint64) int { return cmpU64(r.seq, s) })
	for _, r := range l.rems[j:] {
		if r.seq > cur {
			break
		}
		// An id added after since and removed again was never seen by the
		// caller: not a change for it.
		if r.addedSeq <= since {
			remove = append(remove, r.id)
		}
	}
	return cur, add, remove, true
}

// Followed returns the followed seq the durable state records (0 if none).
func (l *Log) Followed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.followed
}

// Adopted reports, for each of digests, whether the durable state
// remembers it as adopted (Edit.Adopt). It is O(AdoptedMemory).
func (l *Log) Adopted(digests map[uint64]bool) map[uint64]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[uint64]bool{}
	for _, d := range l.adopted {
		if digests[d] {
			out[d] = true
		}
	}
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Stats returns the counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Generation = l.gen
	s.BytesSinceCheckpoint = l.end - l.ckptEnd
	s.CheckpointBytes = l.ckptEnd
	s.Rotating = l.bgRunning
	return s
}

// Close waits for a running rotation and for queued commits, then closes the
// file. Commits after Close return ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.wg.Wait()
	l.rotMu.Lock()
	defer l.rotMu.Unlock()
	l.gc.Acquire()
	// Commits queued before Close set closed are written; the first error
	// stops that and has failed the rest (they return it).
	_ = l.gc.FlushQueued()
	l.mu.Lock()
	l.gc.FailQueued(ErrClosed)
	f := l.f
	l.f = nil
	l.mu.Unlock()
	// The token is never released: nothing writes after Close.
	if f == nil {
		return nil
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("manifestlog: close %s: %w", l.path, err)
	}
	return nil
}
