package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The value of a log entry's key is the entry in this codec (docs/FORMAT.md,
// "Raft log entry"). Version 1:
//
//	version     1 byte  (1)
//	index       uvarint
//	term        uvarint
//	type        1 byte  (raft.LogType)
//	flags       1 byte  (bit 0: AppendedAt is set; the other bits are zero)
//	appendedAt  varint  Unix nanoseconds, present when flag bit 0 is set
//	data        uvarint length, then the bytes
//	extensions  uvarint length, then the bytes
//
// No checksum: the store checksums every record it holds. The index is
// repeated in the value so that a value read under the wrong key (a bug, not
// damage) is caught rather than handed to raft.
const (
	codecVersion    = 1
	flagAppendedAt  = 1 << 0
	knownFlags      = flagAppendedAt
	maxEntryHeader  = 1 + 2*binary.MaxVarintLen64 + 2 + binary.MaxVarintLen64 + 2*binary.MaxVarintLen64
	logKeyPrefix    = 'L'
	logKeyLen       = 9
	stableKeyPrefix = 'S'
)

// ErrCorruptEntry matches errors for a stored log entry that cannot be
// decoded: an unknown codec version or flag, a truncated field, trailing
// bytes, or an index that differs from its key's.
var ErrCorruptEntry = errors.New("raftstore: corrupt log entry")

// logKey returns the store key of log index i: a prefix byte and the index
// big-endian, so that key order is index order.
func logKey(dst []byte, i uint64) []byte {
	dst = append(dst[:0], logKeyPrefix)
	return binary.BigEndian.AppendUint64(dst, i)
}

// logKeyIndex returns the index a log key names; false for any other key.
func logKeyIndex(k []byte) (uint64, bool) {
	if len(k) != logKeyLen || k[0] != logKeyPrefix {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

// appendEntry appends the encoding of l to dst.
func appendEntry(dst []byte, l *raft.Log) []byte {
	dst = append(dst, codecVersion)
	dst = binary.AppendUvarint(dst, l.Index)
	dst = binary.AppendUvarint(dst, l.Term)
	dst = append(dst, byte(l.Type))
	if l.AppendedAt.IsZero() {
		dst = append(dst, 0)
	} else {
		dst = append(dst, flagAppendedAt)
		dst = binary.AppendVarint(dst, l.AppendedAt.UnixNano())
	}
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	return append(dst, l.Extensions...)
}

// decodeEntry decodes b into l. Data and Extensions alias b (nil when
// empty): the caller hands over a buffer it owns, as the copy Get returns.
func decodeEntry(b []byte, l *raft.Log) error {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != codecVersion {
		return fmt.Errorf("%w: codec version %d (this build reads %d)", ErrCorruptEntry, v, codecVersion)
	}
	var out raft.Log
	out.Index = d.uvarint()
	out.Term = d.uvarint()
	out.Type = raft.LogType(d.byte())
	flags := d.byte()
	if d.err == nil && flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrCorruptEntry, flags)
	}
	if flags&flagAppendedAt != 0 {
		out.AppendedAt = time.Unix(0, d.varint())
	}
	out.Data = d.bytes()
	out.Extensions = d.bytes()
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorruptEntry, len(d.b))
	}
	*l = out
	return nil
}

// decoder reads fields from the front of b; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or malformed %s", ErrCorruptEntry, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("header")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length")
		return nil
	}
	var v []byte
	if n > 0 {
		v = d.b[:n:n]
	}
	d.b = d.b[n:]
	return v
}
