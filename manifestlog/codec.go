package manifestlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/segkv/segkv/segment"
)

// Record kinds: the first byte of every frame payload. A reader that meets a
// kind it does not know refuses the file (it is corruption under version 2;
// a future kind comes with a new version).
type recordKind byte

const (
	kindHeader     recordKind = 1 // magic, version, generation
	kindCheckpoint recordKind = 2 // checkpoint counters and the number of segments that follow
	kindSegments   recordKind = 3 // a chunk of checkpoint segments
	kindEdit       recordKind = 4 // one committed edit
	kindActivate   recordKind = 5 // the generation is complete and authoritative
	kindReplica    recordKind = 6 // a copy of the group of frames just before it
)

// String names the kind as Inspect (and segctl manifest) shows it; an
// unknown kind is "kind N".
func (k recordKind) String() string {
	switch k {
	case kindHeader:
		return "header"
	case kindCheckpoint:
		return "checkpoint"
	case kindSegments:
		return "segments"
	case kindEdit:
		return "edit"
	case kindActivate:
		return "activate"
	case kindReplica:
		return "replica"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

// Version is the manifest format version this package writes. Version 2
// added replica records; a version 1 reader would refuse them as an unknown
// kind, and a version 1 file lacks them, which this reader would take for
// damage, so neither reads the other. Version 3 added a segment's origin
// (the id it has in the store it was mirrored from), the followed seq and
// the adopted digests (checkpoint fields and edit flags 2 and 4): a version
// 2 reader would misalign on the longer segment encoding, so the version
// changed. This package reads versions 2 and 3 and writes only 3: Open
// rewrites a version 2 generation as a version 3 one before it appends.
const Version uint32 = 3

// minVersion is the oldest format version this package reads.
const minVersion uint32 = 2

// knownVersion reports whether this package reads format version v.
func knownVersion(v uint32) bool { return v >= minVersion && v <= Version }

// magic opens every header record.
const magic = "segkvMNF"

// Flag bits of an edit record. Version 2 knows only flagSetLive.
const (
	flagSetLive     byte = 1 // the edit names the live file
	flagSetFollowed byte = 2 // the edit records the followed seq (version 3)
	flagAdopt       byte = 4 // the edit lists adopted digests (version 3)
	// flagForget: the edit forgets every adopted digest before adopting
	// its own (version 3): a ReplaceAll starts a new history.
	flagForget byte = 8
)

// editFlags are the flag bits of version v.
func editFlags(v uint32) byte {
	if v < 3 {
		return flagSetLive
	}
	return flagSetLive | flagSetFollowed | flagAdopt | flagForget
}

// minSegmentSize is the smallest possible encoding of one segment; decoders
// use it to bound counts read from the input before allocating anything.
const minSegmentSize = 1 + 1 + 1 + 1 + 8 + 8 + 1 + 1 + 1 + 1 + 1

// errShort and friends are the reasons a record fails to decode. They are
// wrapped into a *corruption.Error with the file and offset by the loader.
var (
	errShort    = errors.New("record truncated")
	errOverflow = errors.New("varint overflows 64 bits")
)

// record is one decoded frame payload. Only the fields of its kind are set.
type record struct {
	kind recordKind

	// kindHeader
	version uint32
	gen     uint64

	// kindCheckpoint, kindEdit, kindActivate: seq. kindCheckpoint and
	// kindEdit: the counters (results, not deltas).
	seq     uint64
	setLive bool // kindEdit only; a checkpoint always carries liveID
	liveID  uint64
	// setFollowed: kindEdit only; a checkpoint always carries followed.
	setFollowed bool
	followed    uint64
	adopt       []uint64 // kindCheckpoint: the adopted digests; kindEdit: those the edit adds
	forget      bool     // kindEdit: forget the adopted digests first
	nextID      uint64
	nextOrder   uint64
	count       uint64 // kindCheckpoint: segments that follow in kindSegments records

	segs   []SegmentMeta // kindSegments, kindEdit (adds)
	remove []uint64      // kindEdit

	// kindReplica: the offset of the first frame of the group it copies,
	// and the payloads of the group's frames, in order.
	groupStart uint64
	payloads   [][]byte
}

// --- encoding ---

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func appendBytes(b, p []byte) []byte {
	b = appendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// appendSegment encodes one segment (same form in checkpoints and edits).
func appendSegment(b []byte, m *SegmentMeta) []byte {
	b = appendUvarint(b, m.ID)
	b = append(b, byte(m.FileKind))
	b = appendUvarint(b, m.Order)
	b = appendUvarint(b, uint64(m.DataLength))
	b = appendU64(b, m.DataDigest)
	b = appendU64(b, m.IndexChecksum)
	b = appendUvarint(b, m.Records)
	b = appendUvarint(b, m.Keys)
	b = appendBytes(b, m.MinKey)
	b = appendBytes(b, m.MaxKey)
	b = appendUvarint(b, m.AddedSeq)
	return appendUvarint(b, m.Origin)
}

// segmentSize is an upper bound of appendSegment's output, for sizing buffers.
func segmentSize(m *SegmentMeta) int {
	return 10*8 + 1 + 16 + len(m.MinKey) + len(m.MaxKey)
}

func appendHeader(b []byte, gen uint64) []byte {
	b = append(b, byte(kindHeader))
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint32(b, Version)
	return appendU64(b, gen)
}

func appendCheckpoint(b []byte, s *snapshot, count uint64) []byte {
	b = append(b, byte(kindCheckpoint))
	b = appendUvarint(b, s.seq)
	b = appendUvarint(b, s.liveID)
	b = appendUvarint(b, s.nextID)
	b = appendUvarint(b, s.nextOrder)
	b = appendUvarint(b, count)
	b = appendUvarint(b, s.followed)
	return appendDigests(b, s.adopted)
}

func appendDigests(b []byte, ds []uint64) []byte {
	b = appendUvarint(b, uint64(len(ds)))
	for _, d := range ds {
		b = appendU64(b, d)
	}
	return b
}

func appendSegments(b []byte, segs []*SegmentMeta) []byte {
	b = append(b, byte(kindSegments))
	b = appendUvarint(b, uint64(len(segs)))
	for _, m := range segs {
		b = appendSegment(b, m)
	}
	return b
}

// appendEdit encodes an edit record. adds must already carry AddedSeq == seq;
// nextID and nextOrder are the counters after the edit (results).
func appendEdit(b []byte, seq uint64, e *Edit, nextID, nextOrder uint64) []byte {
	b = append(b, byte(kindEdit))
	b = appendUvarint(b, seq)
	var flags byte
	if e.SetLive {
		flags |= flagSetLive
	}
	if e.SetFollowed {
		flags |= flagSetFollowed
	}
	if len(e.Adopt) > 0 {
		flags |= flagAdopt
	}
	if e.ForgetAdopted {
		flags |= flagForget
	}
	b = append(b, flags)
	if e.SetLive {
		b = appendUvarint(b, e.LiveID)
	}
	if e.SetFollowed {
		b = appendUvarint(b, e.Followed)
	}
	b = appendUvarint(b, nextID)
	b = appendUvarint(b, nextOrder)
	b = appendUvarint(b, uint64(len(e.Add)))
	for i := range e.Add {
		b = appendSegment(b, &e.Add[i])
	}
	b = appendUvarint(b, uint64(len(e.Remove)))
	for _, id := range e.Remove {
		b = appendUvarint(b, id)
	}
	if len(e.Adopt) > 0 {
		b = appendDigests(b, e.Adopt)
	}
	return b
}

func appendActivate(b []byte, seq uint64) []byte {
	b = append(b, byte(kindActivate))
	return appendUvarint(b, seq)
}

// appendReplica encodes a replica of the group of frames starting at file
// offset start with these payloads.
func appendReplica(b []byte, start int64, payloads [][]byte) []byte {
	b = append(b, byte(kindReplica))
	b = appendUvarint(b, uint64(start))
	b = appendUvarint(b, uint64(len(payloads)))
	for _, p := range payloads {
		b = appendBytes(b, p)
	}
	return b
}

// replicaSize is an upper bound of appendReplica's output.
func replicaSize(payloads [][]byte) int {
	n := 1 + 2*binary.MaxVarintLen64
	for _, p := range payloads {
		n += binary.MaxVarintLen64 + len(p)
	}
	return n
}

// --- decoding ---

// decoder reads a payload front to back; the first error sticks, so callers
// check it once at the end.
type decoder struct {
	b       []byte
	err     error
	version uint32 // the format version of the file being read
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) u8() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail(errShort)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u32() uint32 {
	if d.err != nil || len(d.b) < 4 {
		d.fail(errShort)
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail(errShort)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.fail(errShort)
		return 0
	case n < 0:
		d.fail(errOverflow)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns a copy, so that decoded metadata never aliases the (reused)
// scan buffer.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return nil
	}
	if n == 0 {
		return nil
	}
	p := make([]byte, n)
	copy(p, d.b[:n])
	d.b = d.b[n:]
	return p
}

// count reads an element count and refuses one that cannot fit in what is
// left of the payload, so a forged count never drives a huge allocation.
func (d *decoder) count(minElem int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/minElem) {
		d.fail(fmt.Errorf("count %d exceeds the %d bytes left", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) segment() SegmentMeta {
	var m SegmentMeta
	m.ID = d.uvarint()
	m.FileKind = segment.FileKind(d.u8())
	if !m.FileKind.Known() {
		d.fail(fmt.Errorf("segment %d has unknown %v", m.ID, m.FileKind))
	}
	m.Order = d.uvarint()
	dl := d.uvarint()
	if dl > math.MaxInt64 {
		d.fail(fmt.Errorf("data length %d out of range", dl))
	}
	m.DataLength = int64(dl)
	m.DataDigest = d.u64()
	m.IndexChecksum = d.u64()
	m.Records = d.uvarint()
	m.Keys = d.uvarint()
	m.MinKey = d.bytes()
	m.MaxKey = d.bytes()
	m.AddedSeq = d.uvarint()
	if d.version >= 3 {
		m.Origin = d.uvarint()
	}
	return m
}

// digests reads a digest list (a count, then that many u64 LE).
func (d *decoder) digests() []uint64 {
	n := d.count(8)
	if n == 0 {
		return nil
	}
	out := make([]uint64, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.u64())
	}
	return out
}

// decodeRecord decodes one frame payload of a file of format version
// (which its header gave). It never panics on any input; a malformed payload
// yields an error (the caller adds file and offset). A header record with a
// version this package does not read decodes successfully so that the
// caller can refuse it with a version error rather than call it damage.
func decodeRecord(p []byte, version uint32) (record, error) {
	d := decoder{b: p, version: version}
	r := record{kind: recordKind(d.u8())}
	switch r.kind {
	case kindHeader:
		if len(d.b) < len(magic) || string(d.b[:len(magic)]) != magic {
			return r, errors.New("bad magic: not a segkv manifest")
		}
		d.b = d.b[len(magic):]
		r.version = d.u32()
		if d.err == nil && !knownVersion(r.version) {
			// Do not interpret anything past the version.
			return r, nil
		}
		r.gen = d.u64()
	case kindCheckpoint:
		r.seq = d.uvarint()
		r.liveID = d.uvarint()
		r.nextID = d.uvarint()
		r.nextOrder = d.uvarint()
		r.count = d.uvarint()
		if version >= 3 {
			r.followed = d.uvarint()
			r.adopt = d.digests()
		}
	case kindSegments:
		n := d.count(minSegmentSize)
		if n == 0 && d.err == nil {
			return r, errors.New("empty segments record")
		}
		r.segs = make([]SegmentMeta, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			r.segs = append(r.segs, d.segment())
		}
	case kindEdit:
		r.seq = d.uvarint()
		flags := d.u8()
		if flags&^editFlags(version) != 0 {
			d.fail(fmt.Errorf("unknown edit flags %#x", flags))
		}
		if flags&flagSetLive != 0 {
			r.setLive = true
			r.liveID = d.uvarint()
		}
		if flags&flagSetFollowed != 0 {
			r.setFollowed = true
			r.followed = d.uvarint()
		}
		r.forget = flags&flagForget != 0
		r.nextID = d.uvarint()
		r.nextOrder = d.uvarint()
		n := d.count(minSegmentSize)
		if n > 0 {
			r.segs = make([]SegmentMeta, 0, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			r.segs = append(r.segs, d.segment())
		}
		n = d.count(1)
		if n > 0 {
			r.remove = make([]uint64, 0, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			r.remove = append(r.remove, d.uvarint())
		}
		if flags&flagAdopt != 0 {
			if r.adopt = d.digests(); len(r.adopt) == 0 && d.err == nil {
				d.fail(errors.New("adopt flag with an empty digest list"))
			}
		}
	case kindActivate:
		r.seq = d.uvarint()
	case kindReplica:
		r.groupStart = d.uvarint()
		if r.groupStart > math.MaxInt64 {
			d.fail(fmt.Errorf("group offset %d out of range", r.groupStart))
		}
		n := d.count(2) // each payload: a length and at least one byte
		if n == 0 && d.err == nil {
			return r, errors.New("replica of an empty group")
		}
		r.payloads = make([][]byte, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			p := d.bytes()
			if len(p) == 0 && d.err == nil {
				d.fail(errors.New("empty payload in a replica"))
			}
			r.payloads = append(r.payloads, p)
		}
	default:
		return r, fmt.Errorf("unknown record kind %d", r.kind)
	}
	if d.err != nil {
		return r, d.err
	}
	if len(d.b) != 0 {
		return r, fmt.Errorf("%d trailing bytes in record kind %d", len(d.b), r.kind)
	}
	return r, nil
}

// frameHeaderSize is the size of a wal frame header (checksum u64, length
// u32, reserved u32, watermark u64).
const frameHeaderSize = 24
