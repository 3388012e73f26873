package manifestlog

import (
	"bytes"
	"fmt"
	"slices"
)

// Commit makes e durable and returns its sequence number. When it returns
// without error the edit survives any crash. Concurrent commits are grouped:
// one of them (the leader) writes every queued edit as consecutive frames in
// one WriteAt and syncs once for all of them.
//
// An edit that adds an id twice, adds and removes the same id, uses id 0, has
// a negative DataLength or an unknown FileKind, or removes an id that is not present (counting the
// edits queued before it) is refused with ErrInvalidEdit and nothing is
// written. Adding an id that is present replaces its metadata (last wins).
// NextID is raised past every added id and the live id, so that ids stay
// monotonic even if a caller forgets.
func (l *Log) Commit(e Edit) (uint64, error) {
	c, err := l.CommitEdit(e)
	return c.Seq, err
}

// Committed is what CommitEdit made durable.
type Committed struct {
	Seq uint64        // the edit's sequence number
	Add []SegmentMeta // the added segments as recorded: Order and AddedSeq filled in
}

// CommitEdit is Commit, and also returns the added segments as the log
// recorded them. The log owns the order counter: an added segment with Order
// 0 is given the next order, in sequence order, so that a segment committed
// later always shadows one committed earlier; a non-zero Order (a merge
// output keeps the order of its newest input) is recorded as given.
func (l *Log) CommitEdit(e Edit) (Committed, error) {
	if err := validateStatic(&e); err != nil {
		return Committed{}, err
	}
	own := Edit{
		Add:         make([]SegmentMeta, len(e.Add)),
		Remove:      append([]uint64(nil), e.Remove...),
		SetLive:     e.SetLive,
		LiveID:      e.LiveID,
		NextID:      e.NextID,
		NextOrder:   e.NextOrder,
		SetFollowed: e.SetFollowed,
		Followed:    e.Followed,
		Adopt:       slices.Clone(e.Adopt),

		ForgetAdopted: e.ForgetAdopted,
	}
	for i, m := range e.Add {
		// Own the keys: the caller may reuse its buffers.
		m.MinKey = bytes.Clone(m.MinKey)
		m.MaxKey = bytes.Clone(m.MaxKey)
		own.Add[i] = m
	}

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Committed{}, ErrClosed
	}
	if l.err != nil {
		l.mu.Unlock()
		return Committed{}, l.err
	}
	for _, id := range own.Remove {
		if !l.pendingPresent(id) {
			l.mu.Unlock()
			return Committed{}, fmt.Errorf("%w: remove of segment %d, which is not present", ErrInvalidEdit, id)
		}
	}
	seq := l.tipSeq + 1
	nextID := max(l.tipNextID, own.NextID)
	nextOrder := max(l.tipNextOrder, own.NextOrder)
	for i := range own.Add {
		own.Add[i].AddedSeq = seq
		nextID = max(nextID, own.Add[i].ID+1)
		if own.Add[i].Order == 0 {
			nextOrder = max(nextOrder, 1) // order 0 means "unassigned"
			own.Add[i].Order = nextOrder
			nextOrder++
		}
	}
	if own.SetLive && own.LiveID != 0 {
		nextID = max(nextID, own.LiveID+1)
	}
	own.NextID, own.NextOrder = nextID, nextOrder
	payload := appendEdit(make([]byte, 0, editSize(&own)), seq, &own, nextID, nextOrder)
	if len(payload) > maxEditBytes {
		l.mu.Unlock()
		return Committed{}, fmt.Errorf("%w: edit encodes to %d bytes (max %d)", ErrInvalidEdit, len(payload), maxEditBytes)
	}
	l.tipSeq, l.tipNextID, l.tipNextOrder = seq, nextID, nextOrder
	for _, id := range own.Remove {
		l.touch(id, false)
	}
	for i := range own.Add {
		l.touch(own.Add[i].ID, true)
	}

	// Enqueued under mu, with the sequence number just assigned, so the
	// queue (and the file) is in sequence order.
	p := &pending{payload: payload, edit: own, seq: seq}
	t, err := l.gc.Enqueue(p)
	l.mu.Unlock()
	if err == nil {
		err = l.gc.Wait(t)
	}
	if err != nil {
		return Committed{}, err
	}
	return Committed{Seq: p.seq, Add: slices.Clone(own.Add)}, nil
}

// NewID reserves a fresh file id. The log owns the id counter: ids are
// handed out in increasing order, and the next commit records the counter
// past every id reserved so far. Ids reserved after the last commit are
// recorded by RecordIDs (a store calls it at Close); until then a crash can
// hand them out again after a restart, which is harmless only because
// ReserveIDsBelow covers every file left on disk.
func (l *Log) NewID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := max(l.tipNextID, 1)
	l.tipNextID = id + 1
	return id
}

// RecordIDs commits an empty edit if ids were reserved since the last
// commit, so that the counter on disk is past every id handed out: ids stay
// monotonic across a clean restart even when the files that used them are
// gone (a spare removed at Close, an import refused).
func (l *Log) RecordIDs() error {
	l.mu.Lock()
	pending := l.tipNextID > l.nextID
	l.mu.Unlock()
	if !pending {
		return nil
	}
	_, err := l.Commit(Edit{})
	return err
}

// ReserveIDsBelow raises the id counter to at least n (it never lowers it):
// Open calls it with one past the highest id found on disk, so that a file
// left by a crash before any commit recorded its id is never named again.
func (l *Log) ReserveIDsBelow(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tipNextID = max(l.tipNextID, n)
}

func editSize(e *Edit) int {
	n := 64 + 10*len(e.Remove) + 10 + 8*len(e.Adopt)
	for i := range e.Add {
		n += segmentSize(&e.Add[i])
	}
	return n
}

// validateStatic checks what needs no state.
func validateStatic(e *Edit) error {
	n := len(e.Add) + len(e.Remove)
	ids := make([]uint64, 0, n)
	for i := range e.Add {
		m := &e.Add[i]
		if m.ID == 0 {
			return fmt.Errorf("%w: segment id 0", ErrInvalidEdit)
		}
		if m.DataLength < 0 {
			return fmt.Errorf("%w: segment %d has negative length %d", ErrInvalidEdit, m.ID, m.DataLength)
		}
		if !m.FileKind.Known() {
			// Replay refuses an unknown file kind, so the log never writes one.
			return fmt.Errorf("%w: segment %d has unknown %v", ErrInvalidEdit, m.ID, m.FileKind)
		}
		ids = append(ids, m.ID)
	}
	for _, id := range e.Remove {
		if id == 0 {
			return fmt.Errorf("%w: segment id 0", ErrInvalidEdit)
		}
		ids = append(ids, id)
	}
	if n > 1 {
		// Sorting finds duplicates in O(n log n) without a map per commit.
		slices.Sort(ids)
		for i := 1; i < n; i++ {
			if ids[i] == ids[i-1] {
				return fmt.Errorf("%w: segment %d appears twice (added twice, removed twice, or both)", ErrInvalidEdit, ids[i])
			}
		}
	}
	return nil
}

// pendingPresent reports whether id will be present once every queued edit
// is applied. mu held.
func (l *Log) pendingPresent(id uint64) bool {
	if pi, ok := l.pend[id]; ok {
		return pi.present
	}
	_, ok := l.lookup(id)
	return ok
}

func (l *Log) touch(id uint64, present bool) {
	pi := l.pend[id]
	if pi == nil {
		pi = &pendInfo{}
		l.pend[id] = pi
	}
	pi.present = present
	pi.n++
}

func (l *Log) untouch(id uint64) {
	if pi := l.pend[id]; pi != nil {
		if pi.n--; pi.n <= 0 {
			delete(l.pend, id)
		}
	}
}

// writeBatch writes a group of queued edits as consecutive frames,
// followed by their replica (replica.go), in one WriteAt, syncs once, then
// applies them. It is the flush of gc: it runs on the group's leader (or
// Close), which holds the write token, and takes mu itself except during
// the I/O. Its error fails the log: gc fails the group, everything queued
// behind it and every later enqueue with it.
func (l *Log) writeBatch(batch []*pending) error {
	l.mu.Lock()
	f, off, wm := l.f, l.end, l.synced
	l.mu.Unlock()

	payloads := make([][]byte, len(batch))
	for i, p := range batch {
		payloads[i] = p.payload
	}
	buf := appendGroups(make([]byte, 0, groupsSize(payloads)), off, payloads, uint64(wm))
	l.ensureAlloc(f, &l.alloc, off+int64(len(buf)))
	_, err := f.WriteAt(buf, off)
	if err == nil {
		err = f.Sync()
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.Syncs++
	if err != nil {
		// A half-written frame may now sit at the end of the file; a later
		// frame appended after it would make the scanner call it corruption
		// (or worse). Refuse everything from now on.
		l.err = fmt.Errorf("%w: append to %s at offset %d: %w", ErrFailed, l.path, off, err)
		l.log.Error("manifestlog: append failed; refusing further commits", "path", l.path, "offset", off, "err", err)
		return l.err
	}
	l.end = off + int64(len(buf))
	l.synced = l.end
	for _, p := range batch {
		l.apply(&p.edit, p.seq)
		for _, id := range p.edit.Remove {
			l.untouch(id)
		}
		for i := range p.edit.Add {
			l.untouch(p.edit.Add[i].ID)
		}
		if l.rotating {
			l.backlog = append(l.backlog, p.payload)
		}
		l.seq.Store(p.seq)
		l.stats.Commits++
	}
	l.maybeRotate()
	return nil
}

// apply applies an edit to the durable state and the change lists. mu held
// (or exclusive ownership during Open).
func (l *Log) apply(e *Edit, seq uint64) {
	for _, id := range e.Remove {
		old, _ := l.lookup(id)
		first := old.AddedSeq
		if f, ok := l.firstAdded[id]; ok {
			first = f
			delete(l.firstAdded, id)
		}
		l.rems = append(l.rems, removed{seq: seq, id: id, addedSeq: first})
		if l.rotating {
			l.over[id] = nil
		} else {
			delete(l.segs, id)
		}
	}
	for i := range e.Add {
		m := e.Add[i]
		if prev, ok := l.lookup(m.ID); ok {
			// A restatement (new metadata for a present id): the id has
			// existed since its first add, which Changes needs to tell a
			// removal a peer saw from one it never saw.
			if _, ok := l.firstAdded[m.ID]; !ok {
				if l.firstAdded == nil {
					l.firstAdded = map[uint64]uint64{}
				}
				l.firstAdded[m.ID] = prev.AddedSeq
			}
		}
		m.AddedSeq = seq
		l.adds = append(l.adds, added{seq: seq, id: m.ID})
		if l.rotating {
			l.over[m.ID] = &m
		} else {
			l.segs[m.ID] = m
		}
	}
	if e.SetLive {
		l.liveID = e.LiveID
	}
	if e.SetFollowed {
		l.followed = e.Followed
	}
	if e.ForgetAdopted {
		l.adopted = nil
	}
	l.adopt(e.Adopt)
	l.nextID = max(l.nextID, e.NextID)
	l.nextOrder = max(l.nextOrder, e.NextOrder)
}

// ensureAlloc preallocates f so that it covers need bytes, in chunks that
// grow with the file, so that most appends overwrite allocated space and
// their fdatasync need not commit a size change. The caller holds the write
// token (alloc is the token holder's).
func (l *Log) ensureAlloc(f allocFile, alloc *int64, need int64) {
	if l.opts.PreallocateBytes < 0 || need <= *alloc {
		return
	}
	chunk := max(l.opts.PreallocateBytes, min(need/8, 8<<20))
	target := need + chunk
	if err := f.Preallocate(*alloc, target-*alloc); err != nil {
		// Preallocation only makes the barrier cheaper: go on without it
		// (the write then extends the file, and fails itself if the disk
		// is really full). Nothing was written, so nothing is at risk.
		l.log.Warn("manifestlog: preallocation failed; appending without it", "err", err)
		return
	}
	*alloc = target
}

type allocFile interface {
	Preallocate(off, length int64) error
}

// adopt remembers digests as adopted, keeping the newest
// AdoptedMemory. mu held (or exclusive ownership during Open).
func (l *Log) adopt(digests []uint64) {
	if len(digests) == 0 {
		return
	}
	l.adopted = append(l.adopted, digests...)
	if len(l.adopted) > AdoptedMemory {
		// Copy rather than reslice, so the dropped head is freed.
		l.adopted = slices.Clone(l.adopted[len(l.adopted)-AdoptedMemory:])
	}
}
