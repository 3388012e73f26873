package metamorphic

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/segkv/segkv/vfs"
)

// Kind is the kind of one operation of a trace.
type Kind int

// The operations. Ops that name a slot (a snapshot or an iterator) or a
// peer segment that does not exist when they run do nothing: a shrunk trace
// may have lost the op that made it.
const (
	OpPut         Kind = iota // Put(Key, Val)
	OpDelete                  // Delete(Key)
	OpDeleteRange             // DeleteRange(Key, End)
	OpApply                   // Apply of a batch of Batch
	OpGet                     // Get(Key), compared with the model
	OpSnapOpen                // NewSnapshot (or NewSealedSnapshot when Sealed) into Slot
	OpSnapGet                 // Get(Key) on the snapshot in Slot
	OpSnapClose               // Close the snapshot in Slot (and the iterators reading it)
	OpIterOpen                // NewIterator(bounds) into Slot, on the store (Snap < 0) or a snapshot
	OpIterMove                // Move on the iterator in Slot
	OpIterClose               // Close the iterator in Slot
	OpScan                    // Range(Key, End) over the store (nil bounds open), compared in full
	OpSeal                    // Seal
	OpSync                    // Sync
	OpCompact                 // Compact
	OpReopen                  // Close and Open again
	OpCrash                   // power loss now (Mode), reopen on the image
	OpCrashArm                // power loss at the K-th barrier event from now (Mode)
	OpPeerSegment             // apply Batch to the peer store and seal it: a new peer segment
	OpImport                  // export the peer segments Peer and Import them in one call
	OpExport                  // Export a sealed segment of the store and check size and digest
	OpCheck                   // Store.Check
	OpFollow                  // the follower syncs with the store under test (Sealed: seal first); Follow says how
	OpReplace                 // Apply Batch to the peer unsealed, then ReplaceAll the store with a sealed snapshot of the peer
	numKinds
)

var kindNames = [...]string{
	OpPut: "put", OpDelete: "delete", OpDeleteRange: "delrange", OpApply: "apply",
	OpGet: "get", OpSnapOpen: "snap-open", OpSnapGet: "snap-get", OpSnapClose: "snap-close",
	OpIterOpen: "iter-open", OpIterMove: "iter-move", OpIterClose: "iter-close", OpScan: "scan",
	OpSeal: "seal", OpSync: "sync", OpCompact: "compact", OpReopen: "reopen",
	OpCrash: "crash", OpCrashArm: "crash-arm", OpPeerSegment: "peer-segment",
	OpImport: "import", OpExport: "export", OpCheck: "check",
	OpFollow: "follow", OpReplace: "replace-all",
}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Move is an iterator movement.
type Move int

// The iterator movements.
const (
	MoveFirst Move = iota
	MoveLast
	MoveSeek   // Seek(Key): first key >= Key
	MoveSeekLT // SeekLT(Key): last key < Key (nil Key: Last)
	MoveNext
	MovePrev
	numMoves
)

var moveNames = [...]string{"First", "Last", "Seek", "SeekLT", "Next", "Prev"}

func (m Move) String() string {
	if m >= 0 && int(m) < len(moveNames) {
		return moveNames[m]
	}
	return "move(" + strconv.Itoa(int(m)) + ")"
}

// FollowKind is the variant of an OpFollow.
type FollowKind int

// The variants of OpFollow. Each ends, unless the store under test lost
// power during it, in a Follow of ChangesSince(FollowedSeq()).
const (
	FollowPlain   FollowKind = iota // Follow, retried on ErrNoSegment
	FollowCrash                     // the follower loses power (Mode) at its K-th barrier event during the Follow, or after it
	FollowDiverge                   // a Put (and, K odd, a Seal) on the follower: Follow must answer ErrDiverged; then ReplaceAll(nil) and Follow from scratch
	FollowSkip                      // take ChangesSince and keep it, unapplied, for a later FollowStale
	FollowStale                     // apply the Changes a FollowSkip kept (ErrFollowGap unless it starts at FollowedSeq), then Follow
	numFollowKinds
)

var followNames = [...]string{"plain", "crash", "diverge", "skip", "stale"}

func (f FollowKind) String() string {
	if f >= 0 && int(f) < len(followNames) {
		return followNames[f]
	}
	return "follow(" + strconv.Itoa(int(f)) + ")"
}

// BatchOp is one operation of a batch (OpApply, OpPeerSegment).
type BatchOp struct {
	Kind Kind   `json:"k"` // OpPut, OpDelete or OpDeleteRange
	Key  []byte `json:"key"`
	Val  []byte `json:"val"`
	End  []byte `json:"end"`
}

// Op is one operation of a trace. Which fields count depends on Kind.
type Op struct {
	Kind   Kind      `json:"k"`
	Key    []byte    `json:"key"`
	Val    []byte    `json:"val"`
	End    []byte    `json:"end"`
	Batch  []BatchOp `json:"batch,omitempty"`
	Slot   int       `json:"slot,omitempty"`
	Snap   int       `json:"snap,omitempty"` // OpIterOpen: snapshot slot, or -1 for the store
	Sealed bool      `json:"sealed,omitempty"`
	Lower  []byte    `json:"lower"`
	Upper  []byte    `json:"upper"`
	Prefix []byte    `json:"prefix"`
	Move   Move      `json:"move,omitempty"`
	// NilKey marks a nil Key where nil and empty differ (SeekLT, Scan bounds).
	NilKey bool          `json:"nilkey,omitempty"`
	NilEnd bool          `json:"nilend,omitempty"`
	Mode   vfs.CrashMode `json:"mode,omitempty"`
	K      int           `json:"kth,omitempty"` // OpCrashArm: barrier event count; OpExport: segment pick
	Rand   uint64        `json:"rand,omitempty"`
	Peer   []int         `json:"peer,omitempty"`
	// OpReopen: ReadOnly opens read-only (and compares) before the
	// writable open; Leave leaves snapshots and iterators open across
	// Close, which must then answer ErrClosed. OpCrash and OpCrashArm:
	// ReadOnly opens the image read-only first, which must show the
	// state the writable open then shows.
	ReadOnly bool `json:"ro,omitempty"`
	Leave    bool `json:"leave,omitempty"`
	// Follow is the variant of an OpFollow (Mode, K and Rand serve
	// FollowCrash, Key and Val FollowDiverge; Rand also draws the bounds
	// of the iterators that check the follower).
	Follow FollowKind `json:"follow,omitempty"`
}

func q(b []byte) string {
	if b == nil {
		return "nil"
	}
	return strconv.Quote(string(b))
}

func qv(b []byte) string {
	if len(b) > 24 {
		return fmt.Sprintf("%q..(%d bytes)", b[:16], len(b))
	}
	return strconv.Quote(string(b))
}

func (b BatchOp) String() string {
	switch b.Kind {
	case OpPut:
		return "Put(" + q(b.Key) + ", " + qv(b.Val) + ")"
	case OpDelete:
		return "Delete(" + q(b.Key) + ")"
	case OpDeleteRange:
		return "DeleteRange(" + q(b.Key) + ", " + q(b.End) + ")"
	}
	return b.Kind.String()
}

func batchString(ops []BatchOp) string {
	parts := make([]string, len(ops))
	for i, b := range ops {
		parts[i] = b.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (o Op) key() []byte {
	if o.NilKey {
		return nil
	}
	return o.Key
}

func (o Op) end() []byte {
	if o.NilEnd {
		return nil
	}
	return o.End
}

// String renders the op as one line of a trace.
func (o Op) String() string {
	switch o.Kind {
	case OpPut, OpDelete, OpDeleteRange:
		return BatchOp{Kind: o.Kind, Key: o.Key, Val: o.Val, End: o.End}.String()
	case OpApply:
		return "Apply" + batchString(o.Batch)
	case OpGet:
		return "Get(" + q(o.Key) + ")"
	case OpSnapOpen:
		if o.Sealed {
			return fmt.Sprintf("snap%d = NewSealedSnapshot()", o.Slot)
		}
		return fmt.Sprintf("snap%d = NewSnapshot()", o.Slot)
	case OpSnapGet:
		return fmt.Sprintf("snap%d.Get(%s)", o.Slot, q(o.Key))
	case OpSnapClose:
		return fmt.Sprintf("snap%d.Close()", o.Slot)
	case OpIterOpen:
		src := "store"
		if o.Snap >= 0 {
			src = fmt.Sprintf("snap%d", o.Snap)
		}
		return fmt.Sprintf("iter%d = %s.NewIterator(lower=%s upper=%s prefix=%s)", o.Slot, src, q(o.Lower), q(o.Upper), q(o.Prefix))
	case OpIterMove:
		switch o.Move {
		case MoveSeek, MoveSeekLT:
			return fmt.Sprintf("iter%d.%s(%s)", o.Slot, o.Move, q(o.key()))
		}
		return fmt.Sprintf("iter%d.%s()", o.Slot, o.Move)
	case OpIterClose:
		return fmt.Sprintf("iter%d.Close()", o.Slot)
	case OpScan:
		return fmt.Sprintf("Range(%s, %s)", q(o.key()), q(o.end()))
	case OpSeal:
		return "Seal()"
	case OpSync:
		return "Sync()"
	case OpCompact:
		return "Compact()"
	case OpReopen:
		s := "Close(); "
		if o.Leave {
			s = "Close() with readers open; "
		}
		if o.ReadOnly {
			s += "Open(ReadOnly); Close(); "
		}
		return s + "Open()"
	case OpCrash:
		return fmt.Sprintf("crash(%v, rand=%d); %sOpen()", o.Mode, o.Rand, roString(o.ReadOnly))
	case OpCrashArm:
		return fmt.Sprintf("crash-arm(%v at barrier event %d, rand=%d); %sOpen()", o.Mode, o.K, o.Rand, roString(o.ReadOnly))
	case OpPeerSegment:
		return fmt.Sprintf("peer segment %d: Apply%s; Seal()", o.Slot, batchString(o.Batch))
	case OpImport:
		return fmt.Sprintf("Import(peer segments %v)", o.Peer)
	case OpExport:
		return fmt.Sprintf("Export(segment pick %d)", o.K)
	case OpCheck:
		return "Check()"
	case OpFollow:
		seal := ""
		if o.Sealed {
			seal = "Seal(); "
		}
		switch o.Follow {
		case FollowCrash:
			return fmt.Sprintf("%sfollower.Follow(ChangesSince) with a follower power loss (%v at barrier event %d, rand=%d); Open(); Follow again", seal, o.Mode, o.K, o.Rand)
		case FollowDiverge:
			s := fmt.Sprintf("follower.Put(%s, %s)", q(o.Key), qv(o.Val))
			if o.K%2 == 1 {
				s += "; follower.Seal()"
			}
			return fmt.Sprintf("%s%s; follower.Follow = ErrDiverged; follower.ReplaceAll(nil); follower.Follow(ChangesSince(0))", seal, s)
		case FollowSkip:
			return seal + "kept = ChangesSince(follower.FollowedSeq()), not applied"
		case FollowStale:
			return seal + "follower.Follow(kept); follower.Follow(ChangesSince)"
		}
		return fmt.Sprintf("%sfollower.Follow(ChangesSince(follower.FollowedSeq())) (rand=%d)", seal, o.Rand)
	case OpReplace:
		return fmt.Sprintf("peer.Apply%s; sn = peer.NewSealedSnapshot(); ReplaceAll(sn.Export of sn.Segments())", batchString(o.Batch))
	}
	return o.Kind.String()
}

func roString(ro bool) string {
	if ro {
		return "Open(ReadOnly); Close(); "
	}
	return ""
}
