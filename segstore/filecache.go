package segstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/segkv/segkv/vfs"
)

// fileCache bounds the number of data files held open for reads: many
// segments must not mean many file descriptors. Handles are reference
// counted, so a file is closed only once its last reader is done.
//
// The read path takes only the shared lock and two atomics: a hit marks the
// handle used, and eviction (under the exclusive lock, when more than limit
// files are open) gives used handles a second chance before closing idle
// ones (the clock algorithm). A handle can only be acquired under the shared
// lock, so eviction, which holds the exclusive one, sees every reference.
type fileCache struct {
	fs    vfs.FS
	limit int

	mu     sync.RWMutex
	closed bool // no more acquires: the store closed
	open   map[uint64]*fileHandle
	ring   []*fileHandle // clock order
	hand   int
}

type fileHandle struct {
	id       uint64
	f        vfs.File
	refs     atomic.Int64
	used     atomic.Bool
	detached atomic.Bool // no longer in the cache: the last release closes it
}

func newFileCache(fsys vfs.FS, limit int) *fileCache {
	return &fileCache{fs: fsys, limit: limit, open: map[uint64]*fileHandle{}}
}

// acquire returns an open handle on data file id at path.
func (c *fileCache) acquire(id uint64, path string) (*fileHandle, error) {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return nil, ErrClosed
	}
	if h := c.open[id]; h != nil {
		h.refs.Add(1)
		h.used.Store(true)
		c.mu.RUnlock()
		return h, nil
	}
	c.mu.RUnlock()
	// Open outside the lock: a slow open must not stall reads of other files.
	f, err := c.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("segkv: open data file %s: %w", path, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		f.Close()
		return nil, ErrClosed
	}
	if h := c.open[id]; h != nil {
		// Another reader opened it meanwhile; keep one.
		f.Close()
		h.refs.Add(1)
		h.used.Store(true)
		return h, nil
	}
	h := &fileHandle{id: id, f: f}
	h.refs.Store(1)
	c.open[id] = h
	c.ring = append(c.ring, h)
	c.evictLocked()
	return h, nil
}

func (c *fileCache) release(h *fileHandle) {
	if h.refs.Add(-1) == 0 && h.detached.Load() {
		// Detached handles cannot be acquired again, so nothing races this.
		if h.detached.CompareAndSwap(true, false) {
			h.f.Close()
		}
	}
}

// evictLocked closes idle files beyond the limit. Files in use may keep the
// count over the limit for as long as they are in use.
func (c *fileCache) evictLocked() {
	for scanned := 0; len(c.ring) > c.limit && scanned < 2*len(c.ring); scanned++ {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		h := c.ring[c.hand]
		if h.refs.Load() > 0 || h.used.Swap(false) {
			c.hand++
			continue
		}
		c.removeAtLocked(c.hand)
		h.f.Close()
	}
}

func (c *fileCache) removeAtLocked(i int) {
	h := c.ring[i]
	delete(c.open, h.id)
	last := len(c.ring) - 1
	c.ring[i] = c.ring[last]
	c.ring[last] = nil
	c.ring = c.ring[:last]
}

// forget drops data file id from the cache (its file is about to be
// removed); a handle still in use is closed by its last release.
func (c *fileCache) forget(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.open[id]
	if h == nil {
		return
	}
	for i, r := range c.ring {
		if r == h {
			c.removeAtLocked(i)
			break
		}
	}
	h.detach()
}

// detach closes h now if no reader holds it, or else marks it so that its
// last release closes it. h is no longer in the cache, so it cannot be
// acquired again.
func (h *fileHandle) detach() error {
	if h.refs.Load() == 0 {
		return h.f.Close()
	}
	h.detached.Store(true)
	// The last reader may have released between the load and the store.
	if h.refs.Load() == 0 && h.detached.CompareAndSwap(true, false) {
		return h.f.Close()
	}
	return nil
}

// openCount returns how many files are open through the cache.
func (c *fileCache) openCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.ring)
}

// close closes every idle file and refuses later acquires; a file still in
// use (a snapshot's read racing the store's Close) is closed by its last
// release.
func (c *fileCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for _, h := range c.ring {
		errs = append(errs, h.detach())
	}
	clear(c.open)
	c.ring = nil
	return errors.Join(errs...)
}
