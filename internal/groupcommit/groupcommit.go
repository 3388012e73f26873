// Package groupcommit is the leader/follower protocol that the wal writer
// and the manifest log share: callers queue items, one of them at a time
// (the leader) takes a group of queued items and writes them with one flush
// (one write and at most one sync, as the flush function decides), and
// then hands leadership to the first caller that queued meanwhile. No
// background goroutine exists and no caller works for others indefinitely.
//
// The queue is fail-stop: once a flush fails, every item of that group and
// every item queued behind it gets the error, and so does every later
// Enqueue. A failed sync must never be retried: the kernel may already have
// dropped the dirty pages, and a retry that succeeded would report
// durability falsely.
//
// Besides the leaders, a caller can hold the queue exclusively (Acquire):
// the manifest log's rotation and Close do, to swap or drain the file with
// no group in flight. A waiting exclusive holder is served before the next
// group.
package groupcommit

import "sync"

// Queue groups items of type T. The zero value is not usable; use New.
type Queue[T any] struct {
	flush func(group []T) error
	cut   func(queued []T) int

	mu    sync.Mutex
	queue []*Ticket[T] // not yet taken by a leader, in arrival order
	held  bool         // a leader or an exclusive holder is at work
	excl  []chan struct{}
	err   error // sticky: the flush error that failed the queue

	// Scratch of the holder, reused across groups. Touched only by the
	// holder, and only with mu held or before it hands over.
	items []T
	group []*Ticket[T]

	tickets sync.Pool // of *Ticket[T]: no channel allocation per item
}

// Ticket is one queued item, returned by Enqueue and consumed by Wait.
type Ticket[T any] struct {
	item T
	wake chan struct{} // one token: done, or now the leader
	lead bool
	done bool
	err  error
}

// New returns a queue whose leaders call flush with each group, in queue
// order, holding no lock of the queue. flush's error fails the group and
// the queue (see the package doc). cut, if not nil, says how many of the
// queued items (at least 1, at most len(queued)) form the next group; nil
// takes them all.
func New[T any](flush func(group []T) error, cut func(queued []T) int) *Queue[T] {
	q := &Queue[T]{flush: flush, cut: cut}
	q.tickets.New = func() any { return &Ticket[T]{wake: make(chan struct{}, 1)} }
	return q
}

// Commit queues item and waits for the flush of its group: Enqueue then
// Wait.
func (q *Queue[T]) Commit(item T) error {
	t, err := q.Enqueue(item)
	if err != nil {
		return err
	}
	return q.Wait(t)
}

// Enqueue queues item without blocking and returns its ticket, which must
// be passed to Wait exactly once. Items are flushed in the order of their
// Enqueue calls, so a caller that numbers its items can enqueue under its
// own lock to keep the numbers in file order (the lock must not be one
// that flush takes, or must be released before Wait). It returns the
// queue's error if the queue has failed.
func (q *Queue[T]) Enqueue(item T) (*Ticket[T], error) {
	t := q.tickets.Get().(*Ticket[T])
	t.item = item
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		q.put(t)
		return nil, q.err
	}
	q.queue = append(q.queue, t)
	if !q.held {
		// Nobody holds the queue, so it was empty (a holder always hands
		// over to the head or fails the queue): t leads.
		q.held = true
		t.lead = true
	}
	return t, nil
}

// Wait waits until t's group is flushed, leading groups when leadership
// falls to it, and returns the group's error.
func (q *Queue[T]) Wait(t *Ticket[T]) error {
	q.mu.Lock()
	for {
		// Every token is sent under mu together with the state it
		// announces: drop one already sent, the state below is current.
		select {
		case <-t.wake:
		default:
		}
		if t.done {
			err := t.err
			q.put(t)
			q.mu.Unlock()
			return err
		}
		if t.lead {
			t.lead = false
			// t is at the head of the queue, so the group led here
			// contains it and marks it done.
			q.flushGroup(t)
			q.handOff()
			continue
		}
		q.mu.Unlock()
		<-t.wake
		q.mu.Lock()
	}
}

// put returns t to the pool. mu held or t not shared.
func (q *Queue[T]) put(t *Ticket[T]) {
	var zero T
	t.item, t.err, t.lead, t.done = zero, nil, false, false
	q.tickets.Put(t)
}

// flushGroup takes the next group from the head of the queue, flushes it
// with mu released, and marks its tickets done, waking all but self. mu held
// on entry and exit; the caller holds the queue.
func (q *Queue[T]) flushGroup(self *Ticket[T]) error {
	items := q.items[:0]
	for _, t := range q.queue {
		items = append(items, t.item)
	}
	n := len(items)
	if q.cut != nil && n > 1 {
		n = min(max(q.cut(items), 1), n)
	}
	group := append(q.group[:0], q.queue[:n]...)
	rest := copy(q.queue, q.queue[n:])
	clear(q.queue[rest:])
	q.queue = q.queue[:rest]
	q.mu.Unlock()

	err := q.flush(items[:n])
	clear(items)
	q.items = items[:0]

	q.mu.Lock()
	if err != nil {
		q.fail(err)
	}
	for _, t := range group {
		t.done, t.err = true, err
		if t != self { // self's caller reads its result itself
			t.wake <- struct{}{}
		}
	}
	clear(group)
	q.group = group[:0]
	return err
}

// fail makes err the queue's error and fails every queued ticket. mu held.
func (q *Queue[T]) fail(err error) {
	if q.err == nil {
		q.err = err
	}
	q.failQueued(q.err)
}

func (q *Queue[T]) failQueued(err error) {
	for _, t := range q.queue {
		if t.lead {
			// handOff made t the leader and its token is still unread
			// (its caller has not come back to Wait yet). It will not
			// lead now: nobody holds the queue, and its token already
			// wakes it to find itself done.
			t.lead = false
			q.held = false
		}
		t.done, t.err = true, err
		// A token already pending wakes the waiter just as well; a
		// blocking send here, under mu, would wait for a Wait that needs
		// mu.
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	clear(q.queue)
	q.queue = q.queue[:0]
}

// handOff passes the queue on: to a waiting exclusive holder first, else to
// the head of the queue, which leads the next group. mu held; the caller
// holds the queue and gives it up.
func (q *Queue[T]) handOff() {
	if len(q.excl) > 0 {
		ch := q.excl[0]
		q.excl = q.excl[1:]
		close(ch)
		return
	}
	if len(q.queue) > 0 {
		head := q.queue[0]
		head.lead = true
		head.wake <- struct{}{}
		return
	}
	q.held = false
}

// Acquire waits until the caller holds the queue exclusively: no group is
// in flight and none starts until Release. It is served before groups
// queued meanwhile.
func (q *Queue[T]) Acquire() {
	q.mu.Lock()
	if !q.held {
		q.held = true
		q.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	q.excl = append(q.excl, ch)
	q.mu.Unlock()
	<-ch
}

// Release gives up the exclusive hold Acquire gave.
func (q *Queue[T]) Release() {
	q.mu.Lock()
	q.handOff()
	q.mu.Unlock()
}

// FlushQueued flushes every queued group while the caller holds the queue
// exclusively (a Close draining what was committed before it), stopping at
// the first error, which it returns.
func (q *Queue[T]) FlushQueued() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) > 0 {
		if err := q.flushGroup(nil); err != nil {
			return err
		}
	}
	return q.err
}

// Fail fails the queue with err as a flush error would (the caller found
// the file unusable outside a flush): every queued item and every later
// Enqueue gets it. The first error sticks.
func (q *Queue[T]) Fail(err error) {
	q.mu.Lock()
	q.fail(err)
	q.mu.Unlock()
}

// FailQueued fails the items queued now with err without failing the
// queue (a Close refusing what arrived after its drain).
func (q *Queue[T]) FailQueued(err error) {
	q.mu.Lock()
	q.failQueued(err)
	q.mu.Unlock()
}

// Err returns the error that failed the queue, or nil.
func (q *Queue[T]) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Queued returns the number of items waiting for a leader (for tests).
func (q *Queue[T]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Held reports whether a leader or an exclusive holder is at work (for
// tests).
func (q *Queue[T]) Held() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}
