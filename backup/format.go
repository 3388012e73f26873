package backup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Object names under a backup prefix (docs/FORMAT.md, "Backup objects").
const (
	segmentsDir    = "segments/"
	editsDir       = "edits/"
	checkpointsDir = "checkpoints/"
)

// Magic numbers and the version of the edit and checkpoint encodings.
var (
	editMagic       = [4]byte{'S', 'K', 'B', 'E'}
	checkpointMagic = [4]byte{'S', 'K', 'B', 'C'}
)

const formatVersion = 1

// ErrCorruptObject reports an edit, checkpoint or segment object that
// fails its checksum, its digest, or its decoding.
var ErrCorruptObject = errors.New("backup: corrupt object")

// SegmentKey names a segment by content: its digest (xxhash64 of the data
// file) and size. It is the identity of a segment in a backup, whatever
// local id any store gave it.
type SegmentKey struct {
	Digest uint64
	Size   int64
}

func (k SegmentKey) String() string { return fmt.Sprintf("%016x-%016x", k.Digest, uint64(k.Size)) }

// Segment is what the backup records of one segment: enough to fetch it,
// verify it, and put it in its place among the others.
type Segment struct {
	SegmentKey
	Order   uint64 // the source store's shadowing order: higher is newer
	Records uint64
	Keys    uint64
	MinKey  []byte
	MaxKey  []byte
}

// Edit is one recorded manifest state, as the change from the previous one.
type Edit struct {
	Seq      uint64       // the source store's ManifestSeq of this state
	Prev     uint64       // the Seq of the state it changes (0: the empty state)
	UnixNano int64        // when it was recorded
	Writer   [16]byte     // random id of the loop that wrote it
	Removed  []SegmentKey // applied first
	Added    []Segment    // then these
}

// Checkpoint is a whole recorded state.
type Checkpoint struct {
	Seq      uint64
	UnixNano int64
	Segments []Segment // ascending Order
}

func segmentObject(k SegmentKey) string { return segmentsDir + k.String() }
func editObject(prev uint64) string     { return editsDir + fmt.Sprintf("%016x", prev) }
func checkpointObject(seq uint64) string {
	return checkpointsDir + fmt.Sprintf("%016x", seq)
}

// parseSeqName returns the sequence a edits/ or checkpoints/ key names.
func parseSeqName(key, dir string) (uint64, bool) {
	name, ok := strings.CutPrefix(key, dir)
	if !ok || len(name) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(name, 16, 64)
	return v, err == nil
}

// parseSegmentName returns the key a segments/ object name encodes.
func parseSegmentName(key string) (SegmentKey, bool) {
	name, ok := strings.CutPrefix(key, segmentsDir)
	if !ok || len(name) != 33 || name[16] != '-' {
		return SegmentKey{}, false
	}
	d, err1 := strconv.ParseUint(name[:16], 16, 64)
	s, err2 := strconv.ParseUint(name[17:], 16, 64)
	if err1 != nil || err2 != nil || s > 1<<62 {
		return SegmentKey{}, false
	}
	return SegmentKey{Digest: d, Size: int64(s)}, true
}

func appendSegment(b []byte, s *Segment) []byte {
	b = binary.LittleEndian.AppendUint64(b, s.Digest)
	b = binary.AppendUvarint(b, uint64(s.Size))
	b = binary.AppendUvarint(b, s.Order)
	b = binary.AppendUvarint(b, s.Records)
	b = binary.AppendUvarint(b, s.Keys)
	b = binary.AppendUvarint(b, uint64(len(s.MinKey)))
	b = append(b, s.MinKey...)
	b = binary.AppendUvarint(b, uint64(len(s.MaxKey)))
	return append(b, s.MaxKey...)
}

// segmentSize is the encoded size of s, for the checkpoint rule.
func segmentSize(s *Segment) int {
	return len(appendSegment(nil, s))
}

func seal(b []byte) []byte { return binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b)) }

// EncodeEdit returns the object bytes of e.
func EncodeEdit(e *Edit) []byte {
	b := append(editMagic[:0:0], editMagic[:]...)
	b = append(b, formatVersion)
	b = binary.LittleEndian.AppendUint64(b, e.Seq)
	b = binary.LittleEndian.AppendUint64(b, e.Prev)
	b = binary.LittleEndian.AppendUint64(b, uint64(e.UnixNano))
	b = append(b, e.Writer[:]...)
	b = binary.AppendUvarint(b, uint64(len(e.Removed)))
	for _, k := range e.Removed {
		b = binary.LittleEndian.AppendUint64(b, k.Digest)
		b = binary.AppendUvarint(b, uint64(k.Size))
	}
	b = binary.AppendUvarint(b, uint64(len(e.Added)))
	for i := range e.Added {
		b = appendSegment(b, &e.Added[i])
	}
	return seal(b)
}

// EncodeCheckpoint returns the object bytes of c.
func EncodeCheckpoint(c *Checkpoint) []byte {
	b := append(checkpointMagic[:0:0], checkpointMagic[:]...)
	b = append(b, formatVersion)
	b = binary.LittleEndian.AppendUint64(b, c.Seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.UnixNano))
	b = binary.AppendUvarint(b, uint64(len(c.Segments)))
	for i := range c.Segments {
		b = appendSegment(b, &c.Segments[i])
	}
	return seal(b)
}

// decoder reads an object's body; the first error sticks.
type decoder struct {
	name string
	b    []byte
	off  int
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d: %s", ErrCorruptObject, d.name, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b)-d.off < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

// size reads a length or count of items at least minItem bytes each that
// must fit in what is left (so a corrupt count cannot make us allocate).
func (d *decoder) count(minItem int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)-d.off)/uint64(minItem) {
		d.fail("count %d exceeds the object", v)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.count(1)
	if d.err != nil {
		return nil
	}
	v := append([]byte(nil), d.b[d.off:d.off+n]...)
	d.off += n
	return v
}

func (d *decoder) segSize() int64 {
	v := d.uvarint()
	if v > 1<<62 {
		d.fail("segment size %d", v)
	}
	return int64(v)
}

func (d *decoder) segment() Segment {
	var s Segment
	s.Digest = d.u64()
	s.Size = d.segSize()
	s.Order = d.uvarint()
	s.Records = d.uvarint()
	s.Keys = d.uvarint()
	s.MinKey = d.bytes()
	s.MaxKey = d.bytes()
	return s
}

// open checks the trailer and the header and returns a decoder positioned
// after the version byte.
func open(name string, data []byte, magic [4]byte) *decoder {
	d := &decoder{name: name}
	if len(data) < len(magic)+1+8 {
		d.fail("object of %d bytes is too short", len(data))
		return d
	}
	body := data[:len(data)-8]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(data[len(data)-8:]); got != want {
		d.fail("checksum %016x, the object records %016x", got, want)
		return d
	}
	if [4]byte(body[:4]) != magic {
		d.fail("bad magic %q", body[:4])
		return d
	}
	if v := body[4]; v != formatVersion {
		d.fail("format version %d, this build reads %d", v, formatVersion)
		return d
	}
	d.b, d.off = body, 5
	return d
}

func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	return d.err
}

// DecodeEdit parses an edit object; name is for errors.
func DecodeEdit(name string, data []byte) (*Edit, error) {
	d := open(name, data, editMagic)
	e := &Edit{}
	e.Seq = d.u64()
	e.Prev = d.u64()
	e.UnixNano = int64(d.u64())
	if d.err == nil {
		if len(d.b)-d.off < 16 {
			d.fail("truncated")
		} else {
			copy(e.Writer[:], d.b[d.off:])
			d.off += 16
		}
	}
	n := d.count(9)
	for range n {
		k := SegmentKey{Digest: d.u64(), Size: d.segSize()}
		e.Removed = append(e.Removed, k)
	}
	n = d.count(14)
	for range n {
		e.Added = append(e.Added, d.segment())
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	if e.Seq <= e.Prev {
		return nil, fmt.Errorf("%w: %s: seq %d does not follow %d", ErrCorruptObject, name, e.Seq, e.Prev)
	}
	return e, nil
}

// DecodeCheckpoint parses a checkpoint object; name is for errors.
func DecodeCheckpoint(name string, data []byte) (*Checkpoint, error) {
	d := open(name, data, checkpointMagic)
	c := &Checkpoint{}
	c.Seq = d.u64()
	c.UnixNano = int64(d.u64())
	n := d.count(14)
	for range n {
		c.Segments = append(c.Segments, d.segment())
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return c, nil
}
