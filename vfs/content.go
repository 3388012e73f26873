package vfs

import "slices"

// pageSize is the granularity at which Mem shares file content between the
// current state, the durable state and crash clones. Crash tests keep
// thousands of images of the same store; sharing unchanged pages is what
// keeps that affordable.
const pageSize = 4096

// page holds up to pageSize bytes of a file; bytes past len(b) (within the
// file size) read as zeros, so a sparse or preallocated region costs nothing.
// A page may be modified in place only by the content that owns it: every
// other content sharing it treats it as immutable and copies it first.
type page struct {
	b     []byte
	owner *owner
}

// owner identifies one mutable content. It has a field so that distinct
// owners never share an address (pointers to zero-size values may).
type owner struct{ _ byte }

// content is the data of one version of a file. A content with a nil own is
// immutable (a durable snapshot); the zero value is an immutable empty file.
type content struct {
	size  int64
	pages []*page // len(pages) == ceil(size / pageSize); nil means zeros
	own   *owner
}

// snapshot returns an immutable copy of c that shares its pages, and makes
// c stop writing those pages in place.
func (c *content) snapshot() content {
	s := content{size: c.size, pages: slices.Clone(c.pages)}
	c.own = &owner{}
	return s
}

// mutable returns a writable copy of the (typically immutable) c that shares
// its pages copy-on-write.
func (c content) mutable() content {
	return content{size: c.size, pages: slices.Clone(c.pages), own: &owner{}}
}

// writable returns page i ready to be modified in place, with len(b) >= n.
func (c *content) writable(i int, n int) []byte {
	p := c.pages[i]
	if p != nil && p.owner == c.own {
		if len(p.b) < n {
			// Bytes between len and cap are always zero: shrinking clears them.
			p.b = slices.Grow(p.b, n-len(p.b))[:n]
		}
		return p.b
	}
	l := n
	if p != nil && len(p.b) > l {
		l = len(p.b)
	}
	np := &page{b: make([]byte, l), owner: c.own}
	if p != nil {
		copy(np.b, p.b)
	}
	c.pages[i] = np
	return np.b
}

func pagesFor(size int64) int { return int((size + pageSize - 1) / pageSize) }

// resize sets the file size; growth reads as zeros, shrinking forgets the
// bytes past the new end so that a later growth reads zeros there too.
func (c *content) resize(size int64) {
	if size == c.size {
		return
	}
	n := pagesFor(size)
	if size < c.size {
		clear(c.pages[n:])
		c.pages = c.pages[:n]
		if rem := int(size % pageSize); rem != 0 {
			if p := c.pages[n-1]; p != nil && len(p.b) > rem {
				if p.owner == c.own {
					clear(p.b[rem:])
					p.b = p.b[:rem]
				} else {
					c.pages[n-1] = &page{b: slices.Clone(p.b[:rem]), owner: c.own}
				}
			}
		}
	} else {
		c.pages = append(c.pages, make([]*page, n-len(c.pages))...)
	}
	c.size = size
}

func (c *content) writeAt(b []byte, off int64) {
	if end := off + int64(len(b)); end > c.size {
		c.resize(end)
	}
	for len(b) > 0 {
		i, po := int(off/pageSize), int(off%pageSize)
		n := min(len(b), pageSize-po)
		dst := c.writable(i, po+n)
		copy(dst[po:], b[:n])
		b, off = b[n:], off+int64(n)
	}
}

// readAt reads from c into b, which the caller has bounded to c.size.
func (c *content) readAt(b []byte, off int64) {
	for len(b) > 0 {
		i, po := int(off/pageSize), int(off%pageSize)
		n := min(len(b), pageSize-po)
		var src []byte
		if p := c.pages[i]; p != nil && po < len(p.b) {
			src = p.b[po:]
		}
		m := copy(b[:n], src)
		clear(b[m:n])
		b, off = b[n:], off+int64(n)
	}
}

func (c *content) bytes() []byte {
	b := make([]byte, c.size)
	c.readAt(b, 0)
	return b
}

func contentOf(b []byte) content {
	c := content{own: &owner{}}
	c.writeAt(b, 0)
	return c
}
