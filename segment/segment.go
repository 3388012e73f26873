// Package segment owns the data file format: the file header, the records
// that frames carry, and the operations on a whole data file that more than
// one package needs (replaying it, reading one record back, validating a
// stream). A data file is both the live file the store appends to and, once
// sealed, an immutable segment: sealing does not rewrite or rename it.
//
// # Data file
//
//	offset  size  field
//	0       8     magic "segkvdat"
//	8       4     format version, little endian: 2 for files the write
//	              path appends to, 3 for merge outputs (block.go)
//	12      4     reserved, zero
//
// Version 2 (written since range tombstones) differs from version 1 only in
// allowing kind 4 records; both are read. Version 3 (BlockVersion) groups
// the records of each frame into one compressed block (see block.go).
//
//	16      ...   wal frames (see package wal), back to back
//
// The header carries no store-specific identity on purpose: an exported
// segment is the data file verbatim, so the same content has the same digest
// in every store that holds it.
//
// # Records
//
// A frame's payload is one or more records, concatenated. All records of one
// frame (one group commit, possibly several batches) become durable or are
// lost together, which is what makes a batch atomic across crashes.
//
//	size      field
//	1         kind: 1 put, 2 delete, 3 link, 4 range delete
//	uvarint   key length
//	uvarint   value length
//	...       key
//	...       value
//	4         checksum: low 32 bits of xxhash64 of the record's bytes before it
//
// The per-record checksum lets a point read verify the one record it fetched
// without reading the whole frame. A delete has an empty value. A range
// delete's key is the range's start and its value the range's end
// (exclusive), start < end; it deletes the keys in the range from all older
// data, including the records before it in its own file. A link record
// (empty key, 16-byte value: previous data file id u64, previous file's data
// length u64) is the first record of a live file that continues another: it
// lets recovery tell whether the previous file lost a torn tail, in which
// case everything after it is not part of a prefix of history and is dropped.
package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// Version is the data file format version this package writes. It reads
// this one and MinVersion.
//
// Version 2 added range tombstone records (kind 4). A version-1 reader would
// take one for a damaged record and cut the live file there, losing the
// writes after it; the version bump makes it refuse the file instead.
const Version = 2

// MinVersion is the oldest data file version this package reads: version 1
// files differ only in never holding a range tombstone.
const MinVersion = 1

// HeaderSize is the size of the data file header; frames start here.
const HeaderSize = 16

// Magic opens every data file.
const Magic = "segkvdat"

// RecordKind is the first byte of every record: what the record does. It is
// a type of its own so that a file kind (FileKind) cannot be passed where a
// record kind belongs.
type RecordKind uint8

// Record kinds.
const (
	KindPut    RecordKind = 1
	KindDelete RecordKind = 2
	KindLink   RecordKind = 3
	// KindRangeDelete deletes every key k with Key <= k < Value from all
	// older data and from the records before it in its own file.
	KindRangeDelete RecordKind = 4
)

// Known reports whether k is one of the record kinds above: a decoder that
// reads any other byte is looking at damage.
func (k RecordKind) Known() bool {
	return k == KindPut || k == KindDelete || k == KindLink || k == KindRangeDelete
}

// String names the kind for error messages and tools; an unknown kind is
// "record kind N" so that the byte on disk stays visible.
func (k RecordKind) String() string {
	switch k {
	case KindPut:
		return "put"
	case KindDelete:
		return "delete"
	case KindLink:
		return "link"
	case KindRangeDelete:
		return "range-delete"
	}
	return fmt.Sprintf("record kind %d", uint8(k))
}

// linkValueSize is the size of a link record's value.
const linkValueSize = 16

// recordTrailer is the size of the per-record checksum.
const recordTrailer = 4

// Header returns the bytes of a data file header.
func Header() []byte {
	h := make([]byte, HeaderSize)
	copy(h, Magic)
	binary.LittleEndian.PutUint32(h[8:], Version)
	return h
}

// CheckHeader verifies a data file header. An unknown version is refused
// rather than misread.
func CheckHeader(path string, h []byte) error {
	if len(h) < HeaderSize {
		return corruption.New(path, 0, "data file header truncated (%d bytes)", len(h))
	}
	if string(h[:8]) != Magic {
		return corruption.New(path, 0, "bad magic %q", h[:8])
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v < MinVersion || v > BlockVersion {
		return corruption.New(path, 8, "unknown data file version %d (this build reads %d to %d)", v, MinVersion, BlockVersion)
	}
	if binary.LittleEndian.Uint32(h[12:]) != 0 {
		return corruption.New(path, 12, "reserved header field is not zero")
	}
	return nil
}

// HeaderVersion returns the format version of a header CheckHeader accepted.
func HeaderVersion(h []byte) uint32 { return binary.LittleEndian.Uint32(h[8:]) }

// CheckKind refuses a record kind its file's version cannot hold: a range
// delete in a version-1 file (which no writer of that version made, and
// which a version-1 reader would misread).
func CheckKind(path string, version uint32, off int64, kind RecordKind) error {
	if kind == KindRangeDelete && version < 2 {
		return corruption.New(path, off, "range delete record in a version %d data file", version)
	}
	return nil
}

// UpgradeHeader makes the header of the live file f, which will receive new
// records, say the current version, and syncs it: a version-1 live file
// left by an older build must not receive a range delete under a header
// that promises it holds none. The version field changes in one byte (1 to
// 2), so a crash leaves either header, both valid for the records already
// in the file. It reports whether it changed anything.
func UpgradeHeader(f vfs.File, path string) (bool, error) {
	h := make([]byte, HeaderSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		return false, fmt.Errorf("segment: read header of %s: %w", path, err)
	}
	if err := CheckHeader(path, h); err != nil {
		return false, err
	}
	switch HeaderVersion(h) {
	case Version:
		return false, nil
	case BlockVersion:
		// Only a merge writes block files, and never appends to one.
		return false, corruption.New(path, 8, "a block data file (version %d) cannot receive appends", BlockVersion)
	}
	if _, err := f.WriteAt([]byte{Version}, 8); err != nil {
		return false, fmt.Errorf("segment: upgrade header of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("segment: sync upgraded header of %s: %w", path, err)
	}
	return true, nil
}

// Record is one decoded record. Key and Value alias the buffer they were
// decoded from.
type Record struct {
	Kind  RecordKind
	Key   []byte
	Value []byte
}

// EncodedLen returns the encoded size of a record.
func EncodedLen(keyLen, valueLen int) int {
	return 1 + uvarintLen(uint64(keyLen)) + uvarintLen(uint64(valueLen)) + keyLen + valueLen + recordTrailer
}

// AppendRecord appends one encoded record to dst.
func AppendRecord(dst []byte, kind RecordKind, key, value []byte) []byte {
	start := len(dst)
	dst = append(dst, byte(kind))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, key...)
	dst = append(dst, value...)
	sum := uint32(xxhash.Sum64(dst[start:]))
	return binary.LittleEndian.AppendUint32(dst, sum)
}

// AppendLink appends a link record naming the previous data file and its
// data length at the moment writers left it.
func AppendLink(dst []byte, prevID uint64, prevLength int64) []byte {
	var v [linkValueSize]byte
	binary.LittleEndian.PutUint64(v[:8], prevID)
	binary.LittleEndian.PutUint64(v[8:], uint64(prevLength))
	return AppendRecord(dst, KindLink, nil, v[:])
}

// ParseLink decodes a link record's value.
func ParseLink(r Record) (prevID uint64, prevLength int64, ok bool) {
	if r.Kind != KindLink || len(r.Key) != 0 || len(r.Value) != linkValueSize {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(r.Value[:8]), int64(binary.LittleEndian.Uint64(r.Value[8:])), true
}

// errBadRecord is the cause DecodeRecord reports; callers turn it into a
// corruption error with the file and offset they know.
var errBadRecord = errors.New("malformed record")

// DecodeRecord decodes the record at the start of b and returns it with its
// encoded length. It verifies the record checksum.
func DecodeRecord(b []byte) (Record, int, error) {
	kind, k, v, n, err := decodeRecord(b)
	if err != nil {
		return Record{}, 0, err
	}
	return Record{Kind: kind, Key: b[k:v.start], Value: b[v.start:v.end]}, n, nil
}

// span is [start, end) of a record's bytes.
type span struct{ start, end int }

// decodeRecord is DecodeRecord returning positions in b (the key starts at
// k and ends where the value starts): no slice headers to return, which
// keeps the results in registers on a value read's path.
func decodeRecord(b []byte) (kind RecordKind, k int, v span, n int, err error) {
	if len(b) < 1+1+1+recordTrailer {
		return 0, 0, span{}, 0, fmt.Errorf("%w: %d bytes is too short", errBadRecord, len(b))
	}
	kind = RecordKind(b[0])
	if !kind.Known() {
		return 0, 0, span{}, 0, fmt.Errorf("%w: unknown kind %d", errBadRecord, b[0])
	}
	pos := 1
	klen, m := binary.Uvarint(b[pos:])
	if m <= 0 {
		return 0, 0, span{}, 0, fmt.Errorf("%w: bad key length", errBadRecord)
	}
	pos += m
	vlen, m := binary.Uvarint(b[pos:])
	if m <= 0 {
		return 0, 0, span{}, 0, fmt.Errorf("%w: bad value length", errBadRecord)
	}
	pos += m
	rest := uint64(len(b) - pos)
	if klen > rest || vlen > rest-klen || rest-klen-vlen < recordTrailer {
		return 0, 0, span{}, 0, fmt.Errorf("%w: lengths %d+%d exceed the %d bytes left", errBadRecord, klen, vlen, rest)
	}
	k = pos
	v.start = k + int(klen)
	v.end = v.start + int(vlen)
	pos = v.end
	want := binary.LittleEndian.Uint32(b[pos:])
	if got := uint32(xxhash.Sum64(b[:pos])); got != want {
		return 0, 0, span{}, 0, fmt.Errorf("%w: checksum %08x, want %08x", errBadRecord, got, want)
	}
	pos += recordTrailer
	if kind == KindDelete && vlen != 0 {
		return 0, 0, span{}, 0, fmt.Errorf("%w: delete with a value", errBadRecord)
	}
	if kind == KindRangeDelete && bytes.Compare(b[k:v.start], b[v.start:v.end]) >= 0 {
		return 0, 0, span{}, 0, fmt.Errorf("%w: range tombstone with start %q not below end %q", errBadRecord, b[k:v.start], b[v.start:v.end])
	}
	return kind, k, v, pos, nil
}

// ForEachRecord decodes every record of one frame payload. frameOff is the
// frame's file offset, used to report each record's absolute offset and in
// corruption errors. A payload that does not decode completely is corruption:
// the frame checksum already proved the bytes are what was written.
func ForEachRecord(path string, frameOff int64, payload []byte, fn func(r Record, off int64, length int) error) error {
	base := frameOff + wal.HeaderSize
	for pos := 0; pos < len(payload); {
		r, n, err := DecodeRecord(payload[pos:])
		if err != nil {
			return corruption.New(path, base+int64(pos), "%v", err)
		}
		if err := fn(r, base+int64(pos), n); err != nil {
			return err
		}
		pos += n
	}
	return nil
}

// ReadRecord reads and verifies the record at [off, off+length) of r and
// checks that it holds key, so that a stale or damaged index can never make a
// read return another key's value. The record aliases a buffer allocated for
// this call alone, so the caller may keep its value.
func ReadRecord(r io.ReaderAt, path string, off int64, length int, key []byte) (Record, error) {
	rec, _, err := ReadRecordInto(r, nil, path, off, length, key)
	return rec, err
}

// ReadRecordInto is ReadRecord reading into buf, grown if its capacity is
// below length: the record aliases the returned buffer, which the caller may
// pass to the next call to read without allocating.
func ReadRecordInto(r io.ReaderAt, buf []byte, path string, off int64, length int, key []byte) (Record, []byte, error) {
	if cap(buf) < length {
		buf = make([]byte, length)
	}
	buf = buf[:length]
	rec, err := readRecord(r, buf, path, off, key)
	return rec, buf, err
}

func readRecord(r io.ReaderAt, buf []byte, path string, off int64, key []byte) (Record, error) {
	length := len(buf)
	if _, err := r.ReadAt(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			return Record{}, corruption.New(path, off, "record of %d bytes runs past the end of the file", length)
		}
		return Record{}, fmt.Errorf("segment: read %s at %d: %w", path, off, err)
	}
	return CheckRecord(buf, path, off, key)
}

// CheckRecord decodes and verifies the record that buf holds whole, read
// from off in the data file at path, and checks that it holds key: what
// ReadRecord does once the bytes are read, for a caller that copied them
// itself (from a mapping of the file). The record aliases buf.
func CheckRecord(buf []byte, path string, off int64, key []byte) (Record, error) {
	kind, k, v, n, err := decodeRecord(buf)
	if err != nil || n != len(buf) || string(buf[k:v.start]) != string(key) {
		return Record{}, recordError(path, off, len(buf), n, err)
	}
	return Record{Kind: kind, Key: buf[k:v.start], Value: buf[v.start:v.end]}, nil
}

// CheckValue is CheckRecord returning the record's kind and value (which
// aliases buf) alone: the cheapest verified read of a value.
func CheckValue(buf []byte, path string, off int64, key []byte) (RecordKind, []byte, error) {
	kind, k, v, n, err := decodeRecord(buf)
	if err != nil || n != len(buf) || string(buf[k:v.start]) != string(key) {
		return 0, nil, recordError(path, off, len(buf), n, err)
	}
	return kind, buf[v.start:v.end], nil
}

// recordError is CheckRecord's corruption error, out of line: building it
// costs the common path nothing.
//
//go:noinline
func recordError(path string, off int64, length, n int, err error) error {
	switch {
	case err != nil:
		return corruption.New(path, off, "%v", err)
	case n != length:
		return corruption.New(path, off, "record is %d bytes, index says %d", n, length)
	}
	return corruption.New(path, off, "record holds another key than the index says")
}

// ReplayResult summarises a replay of a data file.
type ReplayResult struct {
	Scan     wal.ScanResult
	Version  uint32 // the data file format version its header names
	Records  int
	HasLink  bool
	LinkID   uint64
	LinkLen  int64
	FileSize int64
}

// Replay reads the data file at path from its header to limit (or to its
// size when limit < 0), verifying every frame and record, and calls fn for each
// put, delete or range delete record in file order, with its location (in a
// block file, the location of its block: see block.go). A torn tail is reported in the result,
// not as an error; damage a crash cannot produce is a *corruption.Error.
func Replay(fsys vfs.FS, path string, limit int64, fn func(r Record, off int64, length int) error) (ReplayResult, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("segment: open %s: %w", path, err)
	}
	defer f.Close()
	return ReplayFile(f, path, limit, fn)
}

// ReplayFile is Replay on an already open file.
func ReplayFile(f vfs.File, path string, limit int64, fn func(r Record, off int64, length int) error) (ReplayResult, error) {
	size, err := f.Size()
	if err != nil {
		return ReplayResult{}, fmt.Errorf("segment: size of %s: %w", path, err)
	}
	res := ReplayResult{FileSize: size}
	if limit < 0 || limit > size {
		if limit > size {
			return res, corruption.New(path, size, "file is %d bytes, %d expected", size, limit)
		}
		limit = size
	}
	h := make([]byte, HeaderSize)
	if size < HeaderSize {
		// Every data file has its header written and synced before any
		// manifest or link can name it.
		return res, corruption.New(path, 0, "file of %d bytes has no room for its %d-byte header", size, HeaderSize)
	}
	if _, err := f.ReadAt(h, 0); err != nil {
		// The file is long enough: a failed read is an I/O error, not damage.
		return res, fmt.Errorf("segment: read header of %s: %w", path, err)
	}
	if err := CheckHeader(path, h); err != nil {
		return res, err
	}
	first := true
	version := HeaderVersion(h)
	res.Version = version
	var walk FrameWalk
	res.Scan, err = wal.Scan(f, path, HeaderSize, limit, func(frameOff int64, payload []byte) error {
		return ForEachFrameRecord(path, version, frameOff, payload, MaxBlockRecords, &walk, func(r Record, off int64, length int) error {
			if r.Kind == KindLink {
				id, plen, ok := ParseLink(r)
				if !ok || !first {
					return corruption.New(path, off, "misplaced or malformed link record")
				}
				res.HasLink, res.LinkID, res.LinkLen = true, id, plen
				first = false
				return nil
			}
			first = false
			res.Records++
			return fn(r, off, length)
		})
	})
	return res, err
}

// Digest hashes the first length bytes of a data file: the content digest the
// manifest records and peers compare.
func Digest(r io.ReaderAt, length int64) (uint64, error) {
	h := xxhash.New()
	n, err := io.Copy(h, io.NewSectionReader(r, 0, length))
	if err != nil {
		return 0, fmt.Errorf("segment: digest: %w", err)
	}
	if n != length {
		// The file ended early: a digest of fewer bytes would be recorded
		// as the segment's and fail every later check.
		return 0, fmt.Errorf("segment: digest: read %d of %d bytes: %w", n, length, io.ErrUnexpectedEOF)
	}
	return h.Sum64(), nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
