package manifestlog

import (
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// GenerationInfo is what Inspect read from one generation file.
type GenerationInfo struct {
	Generation uint64
	Path       string
	Size       int64
	// Activated: the generation is complete. Open uses the newest
	// activated generation and removes every other one.
	Activated     bool
	State         State // the state its records replay to
	CheckpointSeq uint64
	Edits         int   // edits replayed after the checkpoint
	Frames        int   // valid frames, including any a replica would restore
	End           int64 // end of the valid frames: where the next commit would go
	// TornBytes is how far past End non-zero bytes reach: a torn tail that
	// Open would truncate (0: the frames end cleanly).
	TornBytes int64
	// RestorableFrames are offsets of torn or damaged frames that Open
	// would rebuild from their group's replica.
	RestorableFrames []int64
	Records          []RecordInfo
	// Err is why the file cannot be read: a *corruption.Error naming the
	// offset (Open refuses the store while this generation is the newest),
	// or ErrUnsupportedVersion. Records then holds the records read before
	// the damage, and the other fields but Generation and Path are zero.
	Err error
}

// RecordInfo describes one record of a generation file.
type RecordInfo struct {
	Off       int64  // offset of its frame
	Kind      string // header, checkpoint, segments, edit, activate, replica
	Seq       uint64 `json:",omitempty"` // checkpoint, edit, activate
	SetsLive  bool   `json:",omitempty"` // edit: it names a new live file
	LiveID    uint64 `json:",omitempty"` // checkpoint; edit if SetsLive
	NextID    uint64 `json:",omitempty"` // checkpoint, edit
	NextOrder uint64 `json:",omitempty"` // checkpoint, edit
	// Segments: ids added by an edit, or listed by a segments record.
	Segments []uint64 `json:",omitempty"`
	Removed  []uint64 `json:",omitempty"` // edit
	// GroupStart and GroupFrames: the group of frames a replica copies.
	GroupStart  int64 `json:",omitempty"`
	GroupFrames int   `json:",omitempty"`
}

// Inspect reads every manifest generation in dir, oldest first, the way
// Open would, and reports what it finds. It only reads: it takes no lock,
// truncates nothing and restores nothing, so it can look at a store in use
// (a commit racing with it may show as a torn tail) or one that Open
// refuses.
func Inspect(fsys vfs.FS, dir string) ([]GenerationInfo, error) {
	gens, err := listGenerations(fsys, dir)
	if err != nil {
		return nil, err
	}
	infos := make([]GenerationInfo, 0, len(gens))
	for _, g := range gens {
		info := GenerationInfo{Generation: g.gen, Path: g.path}
		observe := func(fr wal.Frame, rec *record) {
			info.Records = append(info.Records, describe(fr, rec))
		}
		ld, err := loadGeneration(fsys, g.path, g.gen, observe)
		if err != nil {
			info.Err = err
			infos = append(infos, info)
			continue
		}
		info.Size = ld.size
		info.Activated = ld.activated
		info.State = ld.l.State()
		info.CheckpointSeq = ld.l.ckptSeq
		info.Edits = ld.replayed
		info.Frames = ld.scan.Frames
		info.End = ld.scan.End
		if ld.scan.Torn {
			info.TornBytes = ld.scan.TornBytes
		}
		for _, r := range ld.restores {
			info.RestorableFrames = append(info.RestorableFrames, r.off)
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func describe(fr wal.Frame, rec *record) RecordInfo {
	ri := RecordInfo{Off: fr.Off, Kind: rec.kind.String()}
	switch rec.kind {
	case kindCheckpoint:
		ri.Seq, ri.LiveID, ri.NextID, ri.NextOrder = rec.seq, rec.liveID, rec.nextID, rec.nextOrder
	case kindEdit:
		ri.Seq, ri.SetsLive, ri.NextID, ri.NextOrder = rec.seq, rec.setLive, rec.nextID, rec.nextOrder
		if rec.setLive {
			ri.LiveID = rec.liveID
		}
		ri.Removed = rec.remove
	case kindActivate:
		ri.Seq = rec.seq
	case kindReplica:
		ri.GroupStart, ri.GroupFrames = int64(rec.groupStart), len(rec.payloads)
	}
	if rec.kind == kindEdit || rec.kind == kindSegments {
		for _, m := range rec.segs {
			ri.Segments = append(ri.Segments, m.ID)
		}
	}
	return ri
}
