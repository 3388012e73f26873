package segstore

import (
	"context"
	"sync"
	"time"
)

// background runs the store's work that must stay off the write path: making
// the next live file ahead of need, sealing a full live file, writing sealed
// segments' index files, and the periodic sync of SyncInterval mode, on one
// goroutine; and merging, on another, so that a long merge step never
// delays a seal (the live file, whose index is in the heap, would grow past
// SegmentSize meanwhile). Both are woken by requests; neither sleeps on a
// writer's behalf.
type background struct {
	s     *Store
	seal  chan struct{}
	spare chan struct{}
	merge chan struct{}
	tidy  chan struct{}
	quit  chan struct{}

	tidyMu   sync.Mutex
	tidyJobs []sealTidy
	// tidyRun is held while jobs taken from tidyJobs run, so that a
	// runTidy returns only once every job queued before it is done, even
	// those another runTidy took first.
	tidyRun sync.Mutex
	wg      sync.WaitGroup
	// ctx ends at stop, so that a merge step in progress stops promptly.
	ctx    context.Context
	cancel context.CancelFunc
}

func startBackground(s *Store) *background {
	b := &background{
		s:     s,
		seal:  make(chan struct{}, 1),
		spare: make(chan struct{}, 1),
		merge: make(chan struct{}, 1),
		tidy:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.wg.Add(2)
	go b.run()
	go b.runMerges()
	b.requestSpare()
	// Merge work a Close interrupted (or the policy finds in the segments
	// Open loaded) resumes now rather than after the next seal.
	b.requestMerge()
	return b
}

func (b *background) requestSeal() {
	if b == nil {
		return
	}
	select {
	case b.seal <- struct{}{}:
	default:
	}
}

func (b *background) requestSpare() {
	if b == nil {
		return
	}
	select {
	case b.spare <- struct{}{}:
	default:
	}
}

func (b *background) requestMerge() {
	if b == nil || b.s.mergeOpts.Disable {
		return
	}
	select {
	case b.merge <- struct{}{}:
	default:
	}
}

// afterSeal queues a sealed segment's file work. Without a background (a
// seal during Open's recovery) it runs at once.
func (b *background) afterSeal(j sealTidy) {
	if b == nil {
		j.df.s.tidy(j)
		return
	}
	b.tidyMu.Lock()
	b.tidyJobs = append(b.tidyJobs, j)
	b.tidyMu.Unlock()
	select {
	case b.tidy <- struct{}{}:
	default:
	}
}

func (b *background) runTidy() {
	if b == nil {
		return
	}
	b.tidyRun.Lock()
	defer b.tidyRun.Unlock()
	b.tidyMu.Lock()
	jobs := b.tidyJobs
	b.tidyJobs = nil
	b.tidyMu.Unlock()
	for _, j := range jobs {
		b.s.tidy(j)
	}
}

// stop ends the background goroutines after the jobs they are running. Tidy
// jobs still queued stay queued: Close runs them (runTidy) after its own
// last seal, since index files left unwritten would be rebuilt by the next
// Open, and writing them now is cheaper.
func (b *background) stop() {
	if b == nil {
		return
	}
	close(b.quit)
	b.cancel()
	b.wg.Wait()
}

func (b *background) run() {
	defer b.wg.Done()
	var tick <-chan time.Time
	if b.s.opts.Sync == SyncInterval {
		t := time.NewTicker(b.s.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-b.quit:
			return
		case <-b.tidy:
			if b.s.hooks.beforeJob != nil {
				b.s.hooks.beforeJob("tidy")
			}
			b.runTidy()
		case <-b.spare:
			if b.s.hooks.beforeJob != nil {
				b.s.hooks.beforeJob("spare")
			}
			b.s.ensureSpare()
		case <-b.seal:
			if err := b.s.autoSeal(); err != nil {
				b.s.backgroundError("seal", err)
			}
		case <-tick:
			if b.s.failed() != nil {
				continue
			}
			if err := b.s.syncLive(); err != nil {
				b.s.backgroundError("sync", err)
			}
		}
	}
}

// runMerges takes merge steps while the policy finds work, one bounded step
// per request.
func (b *background) runMerges() {
	defer b.wg.Done()
	for {
		select {
		case <-b.quit:
			return
		case <-b.merge:
			if b.s.hooks.beforeJob != nil {
				b.s.hooks.beforeJob("merge")
			}
			// Ask again if there may be more, so that quit is served
			// between steps.
			did, err := b.s.mergeStep(b.ctx, false)
			switch {
			case err != nil && b.ctx.Err() != nil:
				// Stopped by Close: the step left nothing behind.
			case err != nil:
				b.s.backgroundError("merge", err)
			case did:
				b.requestMerge()
			}
		}
	}
}

// ensureSpare makes the next live file if none is ready.
func (s *Store) ensureSpare() {
	s.spare.Lock()
	have := s.spare.file != nil
	s.spare.Unlock()
	if have || s.closed.Load() || s.failed() != nil {
		return
	}
	sp, err := s.makeSpare()
	if err != nil {
		s.backgroundError("spare", err) // the next seal makes one on its path
		return
	}
	s.spare.Lock()
	if s.spare.file == nil && !s.closed.Load() {
		s.spare.file = sp
		sp = nil
		// Counted once a seal can take it, so that a poller of SparesMade
		// never sees a spare that is not there yet.
		s.stats.sparesMade.Add(1)
	}
	s.spare.Unlock()
	if sp != nil {
		s.discardSpare(sp)
	}
}

// autoSeal seals the live file if it is still over the size threshold (a
// request may have been satisfied by an explicit Seal meanwhile).
func (s *Store) autoSeal() error {
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if s.closed.Load() {
		return nil // Close seals a large live file itself
	}
	s.mu.RLock()
	t := s.mu.tail
	s.mu.RUnlock()
	if t.w.Offset() < s.opts.SegmentSize {
		return nil
	}
	_, err := s.sealLocked(nil, nil)
	return err
}
