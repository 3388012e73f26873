package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A command is a batch of writes, encoded into a raft log entry's Data
// (docs/FORMAT.md, "Raft FSM command"). Version 1:
//
//	version  1 byte (1)
//	count    uvarint: the number of operations
//	then per operation:
//	  kind   1 byte: 1 put, 2 delete, 3 delete range
//	  key    uvarint length, then the bytes (the range's start)
//	  value  uvarint length, then the bytes (put: the value; delete range:
//	         the end, exclusive; delete: absent)
//
// No checksum: the raft log store checksums what it holds.
const commandVersion = 1

const (
	opPut         = 1
	opDelete      = 2
	opDeleteRange = 3
)

// ErrBadCommand matches the error Apply returns (as the entry's response)
// for a log entry whose data is not a command this package encoded. Such an
// entry changes nothing but the applied index, on every replica alike.
var ErrBadCommand = errors.New("raftfsm: malformed command")

// Command is a batch of writes to submit through raft.Apply: build it,
// then pass Bytes() as the log entry's data. The FSM applies it atomically,
// in log order, on every replica. The zero value is an empty command.
type Command struct {
	n   int
	buf []byte
}

// Put adds a put of key to value.
func (c *Command) Put(key, value []byte) {
	c.add(opPut, key, value, true)
}

// Delete adds a deletion of key.
func (c *Command) Delete(key []byte) {
	c.add(opDelete, key, nil, false)
}

// DeleteRange adds a deletion of every key k with start <= k < end. A range
// the store refuses (start after end) makes the whole command fail when
// applied, on every replica, and change nothing.
func (c *Command) DeleteRange(start, end []byte) {
	c.add(opDeleteRange, start, end, true)
}

// Len returns the number of operations.
func (c *Command) Len() int { return c.n }

func (c *Command) add(kind byte, key, value []byte, hasValue bool) {
	c.buf = append(c.buf, kind)
	c.buf = binary.AppendUvarint(c.buf, uint64(len(key)))
	c.buf = append(c.buf, key...)
	if hasValue {
		c.buf = binary.AppendUvarint(c.buf, uint64(len(value)))
		c.buf = append(c.buf, value...)
	}
	c.n++
}

// Bytes returns the encoded command: a new slice, which Raft.Apply may keep.
func (c *Command) Bytes() []byte {
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(c.buf))
	out = append(out, commandVersion)
	out = binary.AppendUvarint(out, uint64(c.n))
	return append(out, c.buf...)
}

// op is one decoded operation; key and value alias the command's bytes.
type op struct {
	kind       byte
	key, value []byte
}

// parseCommand decodes a whole command; on any error it returns no
// operation, so a malformed command applies nothing.
func parseCommand(b []byte) ([]op, error) {
	if len(b) == 0 || b[0] != commandVersion {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: empty", ErrBadCommand)
		}
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrBadCommand, b[0], commandVersion)
	}
	b = b[1:]
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: bad operation count", ErrBadCommand)
	}
	b = b[n:]
	// Each operation takes at least two bytes: a count past that is a lie,
	// and must not size an allocation.
	if count > uint64(len(b))/2 {
		return nil, fmt.Errorf("%w: %d operations in %d bytes", ErrBadCommand, count, len(b))
	}
	ops := make([]op, 0, count)
	field := func() ([]byte, bool) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, false
		}
		v := b[n : n+int(l) : n+int(l)]
		b = b[n+int(l):]
		return v, true
	}
	for i := uint64(0); i < count; i++ {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: operation %d missing", ErrBadCommand, i)
		}
		o := op{kind: b[0]}
		b = b[1:]
		var ok bool
		if o.key, ok = field(); !ok {
			return nil, fmt.Errorf("%w: operation %d: bad key", ErrBadCommand, i)
		}
		switch o.kind {
		case opPut, opDeleteRange:
			if o.value, ok = field(); !ok {
				return nil, fmt.Errorf("%w: operation %d: bad value", ErrBadCommand, i)
			}
		case opDelete:
		default:
			return nil, fmt.Errorf("%w: operation %d: kind %d", ErrBadCommand, i, o.kind)
		}
		ops = append(ops, o)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadCommand, len(b))
	}
	return ops, nil
}
