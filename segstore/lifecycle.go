package segstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// opGate admits the store's public operations other than writes and reads
// (Seal, Import, Compact, Export, Sync, Check, Verify) until Close, and lets
// Close wait for every operation it admitted. Writes are gated by writeMu
// and reads by mu instead, which they hold anyway: a gate of their own would
// put one more shared lock on the hot paths.
type opGate struct {
	mu     sync.Mutex
	closed bool
	active sync.WaitGroup
	// cancels holds the cancel func of every operation context not yet
	// done (context), so that close cancels them before it returns: an
	// operation's next check after Close began sees ErrClosed, which a
	// context.AfterFunc, run on a goroutine of its own, did not promise.
	cancels map[uint64]context.CancelCauseFunc
	nextID  uint64
}

// enter admits one operation, or returns ErrClosed once Close has begun.
// An admitted operation calls leave when it is done.
func (g *opGate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.active.Add(1)
	return nil
}

func (g *opGate) leave() { g.active.Done() }

// close admits nothing more and cancels, with cause ErrClosed, every
// operation context still open. (Add happens under mu before closed is
// set, so a later wait sees every Add.)
func (g *opGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, cancel := range g.cancels {
		cancel(ErrClosed)
	}
}

// context returns ctx, also cancelled (with cause ErrClosed) by close, at
// once if close has already run; done releases it.
func (g *opGate) context(ctx context.Context) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		cancel(ErrClosed)
		return ctx, func() {}
	}
	if g.cancels == nil {
		g.cancels = map[uint64]context.CancelCauseFunc{}
	}
	id := g.nextID
	g.nextID++
	g.cancels[id] = cancel
	return ctx, func() {
		g.mu.Lock()
		delete(g.cancels, id)
		g.mu.Unlock()
		cancel(nil)
	}
}

// wait returns once every admitted operation has left; call it after close.
func (g *opGate) wait() { g.active.Wait() }

// enter admits a public operation: ErrClosed once Close has begun, ErrFailed
// (with its cause) when the store failed and the operation writes.
func (s *Store) enter(writes bool) error {
	if err := s.ops.enter(); err != nil {
		return err
	}
	if writes && s.opts.ReadOnly {
		s.ops.leave()
		return ErrReadOnly
	}
	if writes {
		if err := s.failed(); err != nil {
			s.ops.leave()
			return err
		}
	}
	return nil
}

// opContext returns ctx, also cancelled (with cause ErrClosed) when Close
// begins, so that a long operation does not hold Close hostage.
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.ops.context(ctx)
}

// ctxErr is ctx's error, or ErrClosed if Close cancelled it.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return ctx.Err()
}

// Close stops the store and releases its files. Later calls return
// ErrClosed, as does every call made after Close began: a second Close
// does nothing and returns ErrClosed, as for Snapshot and Iterator. Close
// the store's snapshots and iterators first; one left open after Close
// answers ErrClosed, and its own Close still releases what it pinned.
//
// Close first stops admitting work, then waits for what it admitted: every
// write already inside Apply finishes (acknowledged or failed), every Seal,
// Import, Compact, Export, Sync, Check or Verify finishes (long ones are
// cancelled and return ErrClosed), and the background stops. Only then does
// it seal a large live file, release the live file's preallocation, sync and
// close. So every write acknowledged before or during Close is durable when
// Close returns nil (a store that failed returns its ErrFailed instead), and
// a store closed cleanly always opens again. An Import or Export blocked
// inside the caller's own io.Reader or io.Writer cannot be interrupted:
// Close waits for that call to return (the operation then returns
// ErrClosed). A caller whose peer may stall should give the stream a
// deadline of its own.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	// Admit no operation from now on and cancel those admitted; the wait
	// for them comes after the writers' and the background's.
	s.ops.close()
	// Writers re-check closed under writeMu: once this exclusive section is
	// reached, every commit admitted before it has returned, and none can
	// start after it.
	s.writeMu.Lock()
	//lint:ignore SA2001 an empty critical section: waiting out the holders is the point
	s.writeMu.Unlock()
	s.bg.stop()
	s.ops.wait()

	var errs []error
	if s.failed() == nil && !s.opts.ReadOnly {
		errs = append(errs, s.closeLive())
	}
	// A failed store did not make everything durable that Close promises
	// (unsynced writes under SyncManual or SyncInterval, a seal it could
	// not finish): say so, rather than return nil.
	errs = append(errs, s.failed())
	errs = append(errs, s.closeResources())
	err := errors.Join(errs...)
	s.log.Info("segkv: closed store", slog.String("dir", s.dir), slog.Any("err", err))
	return err
}

// closeLive is Close's last work on the live file, with nothing else
// running: a large live file is sealed, so that the next Open loads its
// index instead of replaying it (a small one is cheaper to replay than to
// seal); the seal's index is written; the live file's unused preallocation is
// released and its data synced.
func (s *Store) closeLive() error {
	s.mu.RLock()
	live := s.mu.tail.w.Offset()
	s.mu.RUnlock()
	if live >= closeSealBytes {
		s.sealMu.Lock()
		_, err := s.sealLocked(nil, nil)
		s.sealMu.Unlock()
		if err != nil {
			s.log.Warn("segkv: seal on close failed; the next open replays the live file", slog.Any("err", err))
		}
	}
	s.bg.runTidy()
	if s.failed() != nil {
		return nil // the seal failed the store: Close reports the failure
	}
	t := s.mu.tail
	// Release the live file's unused preallocation: the next Open scans
	// the file to its end (it cannot tell zeros from lost data without
	// looking), and Open preallocates again. No barrier of its own: if a
	// crash undoes it, the next Open is slower, not wrong.
	if err := t.file.Truncate(t.w.Offset()); err != nil {
		s.log.Warn("segkv: releasing the live file's preallocation on close failed", slog.String("path", t.path), slog.Any("err", err))
	}
	if err := t.w.Sync(); err != nil {
		s.fail(err)
		return fmt.Errorf("segkv: sync on close: %w", err)
	}
	// Ids handed out since the last commit (the spare removed below, a
	// refused import) are recorded, so the next session never reuses one.
	if err := s.mlog.RecordIDs(); err != nil {
		s.fail(err)
		return fmt.Errorf("segkv: record file ids on close: %w", err)
	}
	return nil
}

func (s *Store) closeResources() error {
	var errs []error
	s.mu.Lock()
	for _, t := range [2]*tail{s.mu.tail, s.mu.frozen} {
		if t != nil && t.file != nil {
			errs = append(errs, t.file.Close())
		}
		// The store's own pin on the live file (and a frozen one, which a
		// failed seal left out of the segments): its shared mapping goes
		// now, or with the last snapshot reading it.
		if t != nil && t.df != nil {
			t.df.unpin()
		}
	}
	// Drop the store's pin on every sealed file: a mapping goes now, or
	// when the last snapshot or iterator still reading it is closed.
	for _, sg := range s.mu.segs {
		sg.df.unpin()
	}
	s.mu.Unlock()
	s.spare.Lock()
	if sp := s.spare.file; sp != nil {
		// An unused spare is only preallocated space: give it back now
		// rather than leave it for the next Open to find and remove.
		errs = append(errs, s.discardSpare(sp))
		s.spare.file = nil
	}
	s.spare.Unlock()
	if s.files != nil {
		errs = append(errs, s.files.close())
	}
	if s.mlog != nil {
		errs = append(errs, s.mlog.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}
