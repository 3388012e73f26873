package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/internal/groupcommit"
	"github.com/segkv/segkv/vfs"
)

// ErrFailed is returned (wrapped, together with the original cause) by every
// Commit and Sync after a write or sync of the writer failed. The writer
// never retries: after a failed fsync the kernel may already have dropped the
// dirty pages, so a retry that succeeds would report durability falsely.
var ErrFailed = errors.New("wal: writer failed")

// ErrPayloadTooLarge is returned by Commit for a payload above MaxPayload.
// It does not fail the writer.
var ErrPayloadTooLarge = errors.New("wal: payload too large")

// DefaultMaxGroupBytes is the group size limit when Options.MaxGroupBytes is 0.
const DefaultMaxGroupBytes = 4 << 20

// maxKeptBuf bounds the frame buffer a writer keeps between groups, so one
// huge request does not pin its size in memory for the writer's lifetime.
const maxKeptBuf = 2 * DefaultMaxGroupBytes

// Request is one unit of work for Writer.Commit.
type Request struct {
	Payload []byte // appended to the group's frame
	Sync    bool   // the caller needs the bytes durable before Commit returns
	Offset  int64  // set by the writer: absolute file offset of Payload[0]
	Data    any    // opaque, for the Publish callback
}

// Options configures a Writer.
type Options struct {
	// Publish, if set, is called by the group leader after each group's
	// frame is written (and synced, if any request of the group asked for
	// it), with the group's requests in file order. Calls are never
	// concurrent and happen in file order. It must not call back into the
	// Writer, and must not keep the slice after it returns.
	Publish func(reqs []*Request)
	// MaxGroupBytes is the payload size at which a group stops growing
	// (default DefaultMaxGroupBytes); a single larger request is a group
	// alone.
	MaxGroupBytes int
	// ZeroAhead, if > 0, makes a group that is synced also write zeros
	// after its frame, up to ZeroAhead bytes past the end of the data (and
	// never past ZeroLimit), whenever less than half of that stretch is
	// left from an earlier fill. Space reserved with fallocate is
	// "unwritten" to the file system: the first write into it changes
	// extent metadata, so its fdatasync commits the journal. Writing
	// zeros ahead moves that cost to one group in every ZeroAhead/2
	// bytes, and the fdatasyncs of the groups in between flush data only:
	// the cheaper barrier. Only synced groups fill, so writes that never
	// ask for durability (bulk loads) write nothing twice.
	ZeroAhead int64
	// ZeroLimit is the offset zero filling stops at: the end of the space
	// preallocated for the file.
	ZeroLimit int64
}

// Writer appends frames to a file with group commit (internal/groupcommit):
// concurrent Commits are queued, and one of the committers at a time (the
// leader) writes everything queued as ONE frame with ONE WriteAt, and syncs
// once for the whole group if any member needs it. Leadership then passes to
// a committer that queued meanwhile, so no caller works for others
// indefinitely and no background goroutine exists. A Writer is safe for
// concurrent use. It never closes f.
type Writer struct {
	f         vfs.File
	path      string
	publish   func([]*Request)
	maxGroup  int
	zeroAhead int64
	zeroLimit int64

	offset atomic.Int64 // end of written data; advanced by the leader only
	synced atomic.Int64 // end of synced data; advanced by the leader only

	// g queues Commit and Sync calls and runs the leaders; its error, once
	// set, wraps ErrFailed and the cause.
	g *groupcommit.Queue[item]

	// Used only by the current leader.
	buf    []byte
	reqs   []*Request
	zeroed int64 // every byte below it has been written (data or zeros)
}

// item is one queued Commit or Sync call.
type item struct {
	req    *Request // nil for a Sync call
	target int64    // Sync call: the offset that must become durable
}

func (it item) size() int {
	if it.req == nil {
		return 0
	}
	return len(it.req.Payload)
}

// NewWriter returns a writer that appends to f at offset. syncedOffset (<=
// offset) is the end of the part of f known durable; it becomes the
// watermark of the first frame. path names f in errors.
func NewWriter(f vfs.File, path string, offset, syncedOffset int64, opts Options) *Writer {
	w := &Writer{f: f, path: path, publish: opts.Publish, maxGroup: opts.MaxGroupBytes,
		zeroAhead: opts.ZeroAhead, zeroLimit: opts.ZeroLimit, zeroed: offset}
	if w.maxGroup <= 0 {
		w.maxGroup = DefaultMaxGroupBytes
	}
	w.maxGroup = min(w.maxGroup, MaxPayload)
	w.offset.Store(offset)
	w.synced.Store(min(syncedOffset, offset))
	w.g = groupcommit.New(w.flush, w.cut)
	return w
}

// Offset returns the end of the data written so far.
func (w *Writer) Offset() int64 { return w.offset.Load() }

// SyncedOffset returns the end of the data known durable.
func (w *Writer) SyncedOffset() int64 { return w.synced.Load() }

// Err returns the error that failed the writer, or nil.
func (w *Writer) Err() error { return w.g.Err() }

// Commit appends req.Payload to the file, as part of one frame shared with
// the requests committed concurrently, and sets req.Offset. When it returns
// nil the bytes are written, published, and durable if req.Sync was set. An
// empty payload takes no space (no frame is written for a group of empty
// payloads); with Sync set it waits until everything before it is durable.
// req must not be committed again before this call returns.
func (w *Writer) Commit(req *Request) error {
	if len(req.Payload) > MaxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(req.Payload), MaxPayload)
	}
	return w.g.Commit(item{req: req})
}

// Sync makes everything committed so far durable. If nothing new was
// written since the last sync it costs nothing; if a group is in flight it
// queues behind it and needs no fsync of its own when that group's sync
// already covered it.
func (w *Writer) Sync() error {
	if w.synced.Load() >= w.offset.Load() {
		// Races benignly: a Commit that raced with this call has not
		// returned yet, so it is not "committed so far".
		return w.g.Err()
	}
	return w.g.Commit(item{target: w.offset.Load()})
}

// cut says how many of the queued calls form the next group: up to
// maxGroup payload bytes, but always at least the head.
func (w *Writer) cut(queued []item) int {
	total := 0
	for i, it := range queued {
		n := it.size()
		if i > 0 && total+n > w.maxGroup {
			return i
		}
		total += n
	}
	return len(queued)
}

// flush writes one group as one frame, syncs it if any member needs that,
// and publishes it. It runs on the leader, one group at a time; an error
// fails the writer (groupcommit fails this group and everyone queued
// behind it, and every later call).
func (w *Writer) flush(group []item) error {
	total := 0
	for _, it := range group {
		total += it.size()
	}
	// Only the leader writes, so offset and synced cannot move under us.
	off := w.offset.Load()
	synced := w.synced.Load()
	pos, end := off, off // no frame for a group of empty payloads
	if total > 0 {
		pos = off + HeaderSize
		end = pos + int64(total)
	}
	needSync := false
	reqs := w.reqs[:0]
	for _, it := range group {
		if it.req == nil {
			needSync = needSync || it.target > synced
			continue
		}
		r := it.req
		r.Offset = pos
		pos += int64(len(r.Payload))
		// A request's own bytes end at pos; an empty one waits for all
		// before it, which is also pos.
		needSync = needSync || (r.Sync && pos > synced)
		reqs = append(reqs, r)
	}

	var err error
	if total > 0 {
		zeroTo := int64(0)
		if needSync && w.zeroAhead > 0 && end+w.zeroAhead/2 > w.zeroed {
			zeroTo = min(w.zeroLimit, end+w.zeroAhead)
		}
		err = w.writeFrame(reqs, off, total, synced, zeroTo)
	}
	if err == nil && needSync {
		if serr := w.f.Sync(); serr != nil {
			err = fmt.Errorf("%w: sync %s: %w", ErrFailed, w.path, serr)
		} else {
			w.synced.Store(end)
		}
	}
	if err == nil && w.publish != nil && len(reqs) > 0 {
		w.publish(reqs)
	}
	clear(reqs)
	w.reqs = reqs[:0]
	return err
}

// writeFrame encodes the group's payloads as one frame at off, watermarked
// with synced, followed by zeros up to zeroTo if that is past the frame's
// end (see Options.ZeroAhead), and writes it all with one WriteAt.
func (w *Writer) writeFrame(reqs []*Request, off int64, total int, synced, zeroTo int64) error {
	size := HeaderSize + total
	zeros := max(0, zeroTo-(off+int64(size)))
	if cap(w.buf) < size+int(zeros) {
		w.buf = make([]byte, 0, size+int(zeros))
	}
	b := w.buf[:HeaderSize]
	clear(b)
	for _, r := range reqs {
		b = append(b, r.Payload...)
	}
	putHeader(b, uint32(total), uint64(synced))
	if zeros > 0 {
		b = b[:size+int(zeros)]
		clear(b[size:])
	}
	_, err := w.f.WriteAt(b, off)
	if err == nil {
		w.zeroed = max(w.zeroed, off+int64(len(b)))
	}
	if cap(w.buf) > maxKeptBuf {
		w.buf = nil
	} else {
		w.buf = b[:0]
	}
	if err != nil {
		return fmt.Errorf("%w: write %d bytes to %s at offset %d: %w", ErrFailed, size, w.path, off, err)
	}
	w.offset.Store(off + int64(size))
	return nil
}

// putHeader fills in the header of frame, whose payload is in place.
func putHeader(frame []byte, n uint32, watermark uint64) {
	binary.LittleEndian.PutUint32(frame[8:], n)
	binary.LittleEndian.PutUint32(frame[12:], 0)
	binary.LittleEndian.PutUint64(frame[16:], watermark)
	binary.LittleEndian.PutUint64(frame[0:], xxhash.Sum64(frame[8:]))
}
