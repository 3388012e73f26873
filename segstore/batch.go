package segstore

import (
	"bytes"
	"fmt"

	"github.com/segkv/segkv/segment"
)

// Batch collects puts and deletes that Apply writes atomically: after any
// crash either all of them are visible or none. A Batch is not safe for
// concurrent use; build it in one goroutine and Apply it once.
type Batch struct {
	store   *Store
	buf     []byte // the encoded records, exactly as they go into the frame
	entries []batchEntry
	n       int   // operations added since NewBatch or Reset
	err     error // first validation error; Apply returns it
	applied bool
}

// batchBuffers are the two growing slices of a Batch. A successful Apply
// hands them to the store's pool and NewBatch takes them from it, so a
// loop that builds and applies batch after batch (a bulk load) does not
// regrow and re-clear a fresh buffer per batch.
type batchBuffers struct {
	buf     []byte
	entries []batchEntry
}

// maxPooledBatchBytes bounds the buffers kept for reuse: one huge batch
// must not pin its memory for the life of the store.
const maxPooledBatchBytes = 4 << 20

// batchEntry locates one record inside Batch.buf so that the group commit can
// publish it to the key directory without decoding the batch again.
type batchEntry struct {
	keyOff, keyLen int
	valLen         int // the value follows the key
	recOff, recLen int
	kind           segment.RecordKind
}

// NewBatch returns an empty batch for this store.
func (s *Store) NewBatch() *Batch {
	b := &Batch{store: s}
	if bb, ok := s.batchPool.Get().(*batchBuffers); ok {
		b.buf, b.entries = bb.buf[:0], bb.entries[:0]
	}
	return b
}

// recycle gives b's buffers to the pool once Apply no longer needs them;
// b keeps working (Reset, Len) without them.
func (b *Batch) recycle() {
	if cap(b.buf) <= maxPooledBatchBytes {
		b.store.batchPool.Put(&batchBuffers{buf: b.buf, entries: b.entries})
	}
	b.buf, b.entries = nil, nil
}

// Put adds a put of key to value. The batch keeps its own copy of both. An
// invalid key or value is reported here and again by Apply, which then writes
// nothing.
func (b *Batch) Put(key, value []byte) error {
	return b.add(segment.KindPut, key, value)
}

// Delete adds a deletion of key.
func (b *Batch) Delete(key []byte) error {
	return b.add(segment.KindDelete, key, nil)
}

// DeleteRange adds a deletion of every key k with start <= k < end (end
// exclusive, as in Pebble): one record, applied atomically with the rest of
// the batch. Keys put later, in this batch or after it, are not affected. An
// empty start means from the first key; start == end deletes nothing and
// adds nothing; start > end is ErrInvalidRange.
func (b *Batch) DeleteRange(start, end []byte) error {
	if b == nil || b.store == nil {
		return fmt.Errorf("%w: a Batch must come from Store.NewBatch", ErrInvalidBatch)
	}
	if b.err != nil {
		return b.err
	}
	if err := b.store.validateRange(start, end); err != nil {
		b.err = err
		return err
	}
	if bytes.Equal(start, end) {
		return nil
	}
	return b.add(segment.KindRangeDelete, start, end)
}

// Len returns the number of operations in the batch.
func (b *Batch) Len() int {
	if b == nil {
		return 0
	}
	return b.n
}

// Reset empties the batch so that it can be reused after Apply.
func (b *Batch) Reset() {
	if b == nil {
		return
	}
	b.buf = b.buf[:0]
	b.entries = b.entries[:0]
	b.n = 0
	b.err = nil
	b.applied = false
}

func (b *Batch) add(kind segment.RecordKind, key, value []byte) error {
	if b == nil || b.store == nil {
		return fmt.Errorf("%w: a Batch must come from Store.NewBatch", ErrInvalidBatch)
	}
	if b.err != nil {
		return b.err
	}
	if kind != segment.KindRangeDelete {
		if err := b.store.validate(key, value); err != nil {
			b.err = err
			return err
		}
	}
	if len(b.buf)+segment.EncodedLen(len(key), len(value)) > maxBatchPayload {
		b.err = fmt.Errorf("%w: more than %d bytes", ErrBatchTooLarge, maxBatchPayload)
		return b.err
	}
	start := len(b.buf)
	b.buf = segment.AppendRecord(b.buf, kind, key, value)
	// The key follows the kind byte and the two length varints.
	keyOff := start + 1 + uvarintLen(len(key)) + uvarintLen(len(value))
	b.entries = append(b.entries, batchEntry{
		keyOff: keyOff, keyLen: len(key), valLen: len(value),
		recOff: start, recLen: len(b.buf) - start,
		kind: kind,
	})
	b.n++
	return nil
}

func (b *Batch) key(e batchEntry) []byte { return b.buf[e.keyOff : e.keyOff+e.keyLen] }

func (b *Batch) value(e batchEntry) []byte {
	return b.buf[e.keyOff+e.keyLen : e.keyOff+e.keyLen+e.valLen]
}

func uvarintLen(v int) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
