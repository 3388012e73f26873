package segstore

import (
	"container/list"
	"errors"
	"fmt"
	"sync"

	"github.com/segkv/segkv/vfs"
)

// fileCache bounds the number of sealed segment files held open: many
// segments must not mean many file descriptors. Handles are reference
// counted, so an evicted file is closed only once its last reader is done.
type fileCache struct {
	fs    vfs.FS
	limit int

	mu    sync.Mutex
	open  map[uint64]*fileHandle
	lru   *list.List // of *fileHandle with refs == 0, least recently used at the front
	count int
}

type fileHandle struct {
	id      uint64
	f       vfs.File
	refs    int
	elem    *list.Element
	evicted bool
}

func newFileCache(fsys vfs.FS, limit int) *fileCache {
	return &fileCache{fs: fsys, limit: limit, open: map[uint64]*fileHandle{}, lru: list.New()}
}

// acquire returns an open handle on segment id's data file.
func (c *fileCache) acquire(id uint64, path string) (*fileHandle, error) {
	c.mu.Lock()
	if h := c.open[id]; h != nil {
		if h.elem != nil {
			c.lru.Remove(h.elem)
			h.elem = nil
		}
		h.refs++
		c.mu.Unlock()
		return h, nil
	}
	c.mu.Unlock()
	// Open outside the lock: a slow open must not stall reads of other files.
	f, err := c.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("segkv: open segment %s: %w", path, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.open[id]; h != nil {
		// Another reader opened it meanwhile; keep one.
		f.Close()
		if h.elem != nil {
			c.lru.Remove(h.elem)
			h.elem = nil
		}
		h.refs++
		return h, nil
	}
	h := &fileHandle{id: id, f: f, refs: 1}
	c.open[id] = h
	c.count++
	c.evictLocked()
	return h, nil
}

func (c *fileCache) release(h *fileHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	if h.evicted {
		h.f.Close()
		return
	}
	h.elem = c.lru.PushBack(h)
	c.evictLocked()
}

// evictLocked closes idle files beyond the limit. Files in use may push the
// count over the limit for as long as they are in use.
func (c *fileCache) evictLocked() {
	for c.count > c.limit && c.lru.Len() > 0 {
		h := c.lru.Remove(c.lru.Front()).(*fileHandle)
		h.elem = nil
		delete(c.open, h.id)
		c.count--
		h.f.Close()
	}
}

// forget drops segment id from the cache (its file is about to be removed).
func (c *fileCache) forget(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.open[id]
	if h == nil {
		return
	}
	delete(c.open, id)
	c.count--
	if h.elem != nil {
		c.lru.Remove(h.elem)
		h.elem = nil
	}
	if h.refs == 0 {
		h.f.Close()
	} else {
		h.evicted = true
	}
}

// openCount returns how many files are open.
func (c *fileCache) openCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

func (c *fileCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for id, h := range c.open {
		errs = append(errs, h.f.Close())
		delete(c.open, id)
	}
	c.lru.Init()
	c.count = 0
	return errors.Join(errs...)
}
