package groupcommit

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a flush that records its groups and can hold the first one
// until released, so that tests can queue items behind a group in flight.
type recorder struct {
	mu      sync.Mutex
	groups  [][]int
	active  atomic.Int32
	overlap atomic.Bool
	hold    chan struct{} // if not nil, the first flush waits for it
	entered chan struct{} // closed when the first flush starts
	fail    func(call int) error
}

func newRecorder(hold bool) *recorder {
	r := &recorder{entered: make(chan struct{})}
	if hold {
		r.hold = make(chan struct{})
	}
	return r
}

func (r *recorder) flush(group []int) error {
	if r.active.Add(1) > 1 {
		r.overlap.Store(true)
	}
	defer r.active.Add(-1)
	r.mu.Lock()
	call := len(r.groups)
	r.groups = append(r.groups, append([]int(nil), group...))
	r.mu.Unlock()
	if call == 0 {
		close(r.entered)
		if r.hold != nil {
			<-r.hold
		}
	}
	if r.fail != nil {
		return r.fail(call)
	}
	return nil
}

func (r *recorder) calls() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.groups...)
}

// waitQueued waits (without a deadline: a condition, not a timing) until n
// items wait for a leader.
func waitQueued[T any](q *Queue[T], n int) {
	for q.Queued() != n {
		runtime.Gosched()
	}
}

// commitAsync runs Commit(item) on its own goroutine and returns its result
// channel.
func commitAsync(q *Queue[int], item int) chan error {
	done := make(chan error, 1)
	go func() { done <- q.Commit(item) }()
	return done
}

// TestQueuedItemsShareOneFlush: items queued while a group is in flight
// are flushed together by one leader, in arrival order.
func TestQueuedItemsShareOneFlush(t *testing.T) {
	r := newRecorder(true)
	q := New(r.flush, nil)
	first := commitAsync(q, 0)
	<-r.entered
	var rest []chan error
	for i := 1; i <= 7; i++ {
		rest = append(rest, commitAsync(q, i))
		waitQueued(q, i) // one at a time, so arrival order is i's order
	}
	close(r.hold)
	require.NoError(t, <-first)
	for _, c := range rest {
		require.NoError(t, <-c)
	}
	require.Equal(t, [][]int{{0}, {1, 2, 3, 4, 5, 6, 7}}, r.calls())
	require.False(t, q.Held())
}

// TestCutBoundsGroups: the cut function bounds each group, order is kept,
// and a cut of 0 still takes the head.
func TestCutBoundsGroups(t *testing.T) {
	for _, size := range []int{0, 1, 3} {
		r := newRecorder(true)
		q := New(r.flush, func(queued []int) int { return size })
		first := commitAsync(q, 0)
		<-r.entered
		var rest []chan error
		for i := 1; i <= 7; i++ {
			rest = append(rest, commitAsync(q, i))
			waitQueued(q, i)
		}
		close(r.hold)
		require.NoError(t, <-first)
		for _, c := range rest {
			require.NoError(t, <-c)
		}
		var flat []int
		for _, g := range r.calls() {
			require.LessOrEqual(t, len(g), max(size, 1), "cut %d", size)
			flat = append(flat, g...)
		}
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, flat)
	}
}

// TestFailedFlushFailsGroupQueueAndLater: a failed flush (a failed sync)
// fails every member of its group and everything queued behind it, which
// is never flushed, and every later call; the first error sticks.
func TestFailedFlushFailsGroupQueueAndLater(t *testing.T) {
	boom := errors.New("injected EIO")
	r := newRecorder(true)
	r.fail = func(call int) error {
		if call == 1 {
			return boom
		}
		return nil
	}
	q := New(r.flush, func(queued []int) int { return 2 })
	first := commitAsync(q, 0)
	<-r.entered
	var rest []chan error
	for i := 1; i <= 5; i++ {
		rest = append(rest, commitAsync(q, i))
		waitQueued(q, i)
	}
	close(r.hold)
	require.NoError(t, <-first, "the group before the failure succeeded")
	for i, c := range rest {
		require.ErrorIs(t, <-c, boom, "item %d", i+1)
	}
	require.Equal(t, [][]int{{0}, {1, 2}}, r.calls(), "nothing queued behind the failed group is flushed")
	require.ErrorIs(t, q.Commit(9), boom)
	_, err := q.Enqueue(9)
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, q.Err(), boom)
	q.Fail(errors.New("later"))
	require.ErrorIs(t, q.Err(), boom, "the first error sticks")
	require.Len(t, r.calls(), 2)
}

// TestAcquireServedBeforeQueuedGroups: an exclusive holder waiting while a
// group is in flight gets the queue before the groups queued meanwhile, no
// flush runs while it holds it, and Release lets them go.
func TestAcquireServedBeforeQueuedGroups(t *testing.T) {
	r := newRecorder(true)
	q := New(r.flush, nil)
	first := commitAsync(q, 0)
	<-r.entered
	second := commitAsync(q, 1)
	waitQueued(q, 1)
	acquired := make(chan struct{})
	go func() { q.Acquire(); close(acquired) }()
	for {
		q.mu.Lock()
		n := len(q.excl)
		q.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	close(r.hold)
	require.NoError(t, <-first)
	<-acquired
	require.Equal(t, [][]int{{0}}, r.calls(), "the queued group waits for the exclusive holder")
	require.Equal(t, 1, q.Queued())
	q.Release()
	require.NoError(t, <-second)
	require.Equal(t, [][]int{{0}, {1}}, r.calls())
}

// TestFlushQueuedAndFailQueued: Close's path. The holder flushes what is
// queued itself, and fails what arrives after without failing the queue.
func TestFlushQueuedAndFailQueued(t *testing.T) {
	r := newRecorder(false)
	q := New(r.flush, func(queued []int) int { return 1 })
	q.Acquire()
	a := commitAsync(q, 1)
	b := commitAsync(q, 2)
	waitQueued(q, 2)
	require.NoError(t, q.FlushQueued())
	require.NoError(t, <-a)
	require.NoError(t, <-b)
	require.Len(t, r.calls(), 2)
	closed := errors.New("closed")
	c := commitAsync(q, 3)
	waitQueued(q, 1)
	q.FailQueued(closed)
	require.ErrorIs(t, <-c, closed)
	require.NoError(t, q.Err(), "FailQueued does not fail the queue")
	require.Len(t, r.calls(), 2)
}

// TestConcurrentCommits (run with -race): every item is flushed exactly
// once, each committer's items in its order, and flushes never overlap.
func TestConcurrentCommits(t *testing.T) {
	r := newRecorder(false)
	q := New(r.flush, func(queued []int) int { return 5 })
	const writers, per = 16, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				if err := q.Commit(w*per + i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.False(t, r.overlap.Load(), "two flushes ran at once")
	last := make([]int, writers)
	for i := range last {
		last[i] = -1
	}
	seen := 0
	for _, g := range r.calls() {
		for _, it := range g {
			w, i := it/per, it%per
			require.Equal(t, last[w]+1, i, "writer %d's items out of order", w)
			last[w] = i
			seen++
		}
	}
	require.Equal(t, writers*per, seen)
	require.False(t, q.Held())
}

// Fail and FailQueued may find, at the head of the queue, a ticket that was
// just made the leader and has not come back to Wait yet: its token is still
// in its channel. They used to send it a second token under the queue's
// lock and block there for good (the ticket's Wait needs the lock to run);
// and the queue stayed held by a leader that would never lead, so that,
// after FailQueued, the next Commit waited forever.
func TestFailReachesALeaderNotYetAwake(t *testing.T) {
	for _, failQueue := range []bool{false, true} {
		r := newRecorder(false)
		q := New(r.flush, func([]int) int { return 1 })
		t1, err := q.Enqueue(1)
		require.NoError(t, err)
		t2, err := q.Enqueue(2) // queued behind t1's group
		require.NoError(t, err)
		require.NoError(t, q.Wait(t1)) // flushes [1], then makes t2 the leader
		require.True(t, q.Held(), "t2 leads the next group")

		cause := errors.New("refused")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if failQueue {
				q.Fail(cause)
			} else {
				q.FailQueued(cause)
			}
		}()
		<-done // before the fix: blocked for good, holding the queue's lock
		require.ErrorIs(t, q.Wait(t2), cause)
		if failQueue {
			require.ErrorIs(t, q.Commit(3), cause)
			continue
		}
		require.False(t, q.Held(), "nobody leads: the queue is free")
		require.NoError(t, q.Commit(3))
		require.Equal(t, [][]int{{1}, {3}}, r.calls())
	}
}
