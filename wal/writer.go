package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

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

// Writer appends frames to a file with group commit: concurrent Commits are
// queued, and one of the committers at a time (the leader) writes everything
// queued as ONE frame with ONE WriteAt, and syncs once for the whole group if
// any member needs it. Leadership then passes to a committer that queued
// meanwhile, so no caller works for others indefinitely and no background
// goroutine exists. A Writer is safe for concurrent use. It never closes f.
type Writer struct {
	f         vfs.File
	path      string
	publish   func([]*Request)
	maxGroup  int
	zeroAhead int64
	zeroLimit int64

	offset atomic.Int64 // end of written data; advanced by the leader only
	synced atomic.Int64 // end of synced data; advanced by the leader only

	mu      sync.Mutex
	queue   []*waiter // requests not yet taken by a leader, in arrival order
	leading bool      // a leader is at work (or has been handed leadership)
	err     error     // non-nil once failed; wraps ErrFailed and the cause

	// Used only by the current leader, so not guarded by mu.
	buf    []byte
	group  []*waiter
	reqs   []*Request
	zeroed int64 // every byte below it has been written (data or zeros)

	waiters sync.Pool // of *waiter, to avoid a channel allocation per Commit
}

// waiter is one queued Commit or Sync call.
type waiter struct {
	req    *Request      // nil for a Sync call
	target int64         // Sync call: the offset that must become durable
	wake   chan struct{} // receives one token: done, or now the leader
	lead   bool          // set before the token: the waiter must lead
	err    error         // set before the token: the result
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
	w.waiters.New = func() any { return &waiter{wake: make(chan struct{}, 1)} }
	return w
}

// Offset returns the end of the data written so far.
func (w *Writer) Offset() int64 { return w.offset.Load() }

// SyncedOffset returns the end of the data known durable.
func (w *Writer) SyncedOffset() int64 { return w.synced.Load() }

// Err returns the error that failed the writer, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

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
	return w.wait(req, 0)
}

// Sync makes everything committed so far durable. If nothing new was
// written since the last sync it costs nothing; if a group is in flight it
// queues behind it and needs no fsync of its own when that group's sync
// already covered it.
func (w *Writer) Sync() error {
	if w.synced.Load() >= w.offset.Load() {
		// Races benignly: a Commit that raced with this call has not
		// returned yet, so it is not "committed so far".
		w.mu.Lock()
		err := w.err
		w.mu.Unlock()
		return err
	}
	return w.wait(nil, w.offset.Load())
}

// wait queues a Commit (req != nil) or a Sync (req == nil, target) and
// returns its result, leading groups when leadership falls to it.
func (w *Writer) wait(req *Request, target int64) error {
	wt := w.waiters.Get().(*waiter)
	wt.req, wt.target, wt.lead, wt.err = req, target, false, nil
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		w.release(wt)
		return err
	}
	w.queue = append(w.queue, wt)
	if w.leading {
		w.mu.Unlock()
		<-wt.wake
		if !wt.lead {
			err := wt.err
			w.release(wt)
			return err
		}
		w.mu.Lock()
	}
	w.leading = true
	// wt is at the head of the queue: either the queue was empty, or the
	// previous leader handed over to its head. So the group led here
	// contains wt, and wt.err holds its result afterwards.
	w.lead(wt)
	err := wt.err
	w.release(wt)
	return err
}

func (w *Writer) release(wt *waiter) {
	wt.req, wt.err = nil, nil
	w.waiters.Put(wt)
}

// lead writes one group, which contains self (the leader's own waiter). It
// is called with mu held and returns with it released, after handing
// leadership to the next queued waiter, if any.
func (w *Writer) lead(self *waiter) {
	// Take the group: everything queued, up to maxGroup payload bytes, but
	// always at least the head.
	group := w.group[:0]
	total := 0
	i := 0
	for ; i < len(w.queue); i++ {
		wt := w.queue[i]
		n := 0
		if wt.req != nil {
			n = len(wt.req.Payload)
		}
		if i > 0 && total+n > w.maxGroup {
			break
		}
		total += n
		group = append(group, wt)
	}
	rest := copy(w.queue, w.queue[i:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	w.mu.Unlock()

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
	for _, wt := range group {
		if wt.req == nil {
			needSync = needSync || wt.target > synced
			continue
		}
		r := wt.req
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

	// Wake everyone while still holding mu and leadership: the sends never
	// block (each waiter's channel has room for its one token), and the
	// scratch slices must not be touched once a new leader may exist.
	w.mu.Lock()
	if err != nil {
		// Fail-stop: this group and everyone queued behind it get the
		// error, and so does every later call.
		w.err = err
		for _, wt := range w.queue {
			wt.err = err
			wt.wake <- struct{}{}
		}
		clear(w.queue)
		w.queue = w.queue[:0]
	}
	for _, wt := range group {
		wt.err = err
		if wt != self { // the leader's caller reads self.err itself
			wt.wake <- struct{}{}
		}
	}
	clear(group)
	w.group = group[:0]
	if len(w.queue) > 0 {
		next := w.queue[0]
		next.lead = true // w.leading stays true: handed over
		next.wake <- struct{}{}
	} else {
		w.leading = false
	}
	w.mu.Unlock()
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
