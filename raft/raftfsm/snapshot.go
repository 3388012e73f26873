package raftfsm

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/raft"

	"github.com/segkv/segkv/segstore"
)

// The snapshot container (docs/FORMAT.md, "Raft FSM snapshot"), version 1,
// integers little endian:
//
//	magic        8 bytes  "segkvfsm"
//	version      uint32   1
//	applied      uint64   the applied index the state is at
//	count        uint32   number of segments
//	table        count x (digest uint64, size uint64), oldest segment first
//	headerSum    uint64   xxhash64 of every byte above
//	data         each segment's export (its data file), in table order
//	trailer      uint64   xxhash64 of every byte before it
//
// The table comes first so that the store can tell, before any data, which
// segments it already holds. Each segment it copies is verified against its
// digest as it is imported; the trailer, checked after the copies and before
// the commit (ReplaceAllChecked), catches a container cut short or damaged
// in a part the store skips.
const (
	containerMagic   = "segkvfsm"
	containerVersion = 1
	containerFixed   = 8 + 4 + 8 + 4
	// maxContainerSegments bounds the table a container may announce, so
	// that a damaged count cannot size an allocation. A store holds far
	// fewer sealed segments.
	maxContainerSegments = 1 << 20
)

// ErrBadSnapshot matches every error Restore returns for a container that
// is not a valid snapshot: wrong magic or version, a checksum mismatch, a
// truncation, trailing bytes, a segment whose bytes are damaged or not
// the ones its table entry claims (that error also matches
// segstore.ErrCorrupt).
var ErrBadSnapshot = errors.New("raftfsm: invalid snapshot")

type snapshot struct {
	sn      *segstore.Snapshot
	segs    []segstore.SegmentInfo
	applied uint64
}

// Persist streams the container to sink; on an error it cancels the sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeContainer(sink, s.sn, s.segs, s.applied); err != nil {
		sink.Cancel()
		return fmt.Errorf("raftfsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release unpins the segments.
func (s *snapshot) Release() { s.sn.Close() }

func writeContainer(w io.Writer, sn *segstore.Snapshot, segs []segstore.SegmentInfo, applied uint64) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	sum := xxhash.New()
	out := io.MultiWriter(bw, sum)
	hdr := make([]byte, 0, containerFixed+16*len(segs)+8)
	hdr = append(hdr, containerMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, containerVersion)
	hdr = binary.LittleEndian.AppendUint64(hdr, applied)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(segs)))
	for _, sg := range segs {
		hdr = binary.LittleEndian.AppendUint64(hdr, sg.Digest)
		hdr = binary.LittleEndian.AppendUint64(hdr, uint64(sg.Size))
	}
	hdr = binary.LittleEndian.AppendUint64(hdr, xxhash.Sum64(hdr))
	if _, err := out.Write(hdr); err != nil {
		return err
	}
	for _, sg := range segs {
		n, err := sn.Export(context.Background(), sg.ID, out)
		if err != nil {
			return err
		}
		if n != sg.Size {
			return fmt.Errorf("segment %d: exported %d bytes, listed %d", sg.ID, n, sg.Size)
		}
	}
	if _, err := bw.Write(binary.LittleEndian.AppendUint64(nil, sum.Sum64())); err != nil {
		return err
	}
	return bw.Flush()
}

// restore reads a container from r and installs it with ReplaceAll; it
// returns the store's applied index afterwards.
//
// committed reports whether the store's state was replaced (then applied
// is the store's applied index, even when err is not nil).
func restore(st *segstore.Store, r io.Reader) (applied uint64, committed bool, _ error) {
	c := &containerReader{r: bufio.NewReaderSize(r, 1<<20), sum: xxhash.New()}
	fixed := make([]byte, containerFixed)
	if err := c.read(fixed); err != nil {
		return 0, false, err
	}
	if string(fixed[:8]) != containerMagic {
		return 0, false, fmt.Errorf("%w: not a segkv FSM snapshot (magic %q)", ErrBadSnapshot, fixed[:8])
	}
	if v := binary.LittleEndian.Uint32(fixed[8:]); v != containerVersion {
		return 0, false, fmt.Errorf("%w: container version %d (this build reads %d)", ErrBadSnapshot, v, containerVersion)
	}
	applied = binary.LittleEndian.Uint64(fixed[12:])
	count := binary.LittleEndian.Uint32(fixed[20:])
	if count > maxContainerSegments {
		return 0, false, fmt.Errorf("%w: %d segments", ErrBadSnapshot, count)
	}
	table := make([]byte, 16*int(count)+8)
	if err := c.read(table); err != nil {
		return 0, false, err
	}
	hdrSum := xxhash.New()
	hdrSum.Write(fixed)
	hdrSum.Write(table[:len(table)-8])
	if got := binary.LittleEndian.Uint64(table[len(table)-8:]); got != hdrSum.Sum64() {
		return 0, false, fmt.Errorf("%w: header checksum %016x, computed %016x", ErrBadSnapshot, got, hdrSum.Sum64())
	}

	if count == 0 && applied != 0 {
		// An empty state holds no applied index.
		return 0, false, fmt.Errorf("%w: no segments, applied index %d", ErrBadSnapshot, applied)
	}
	c.sizes = make([]int64, count)
	segs := make([]segstore.ReplaceSegment, count)
	for i := range segs {
		digest := binary.LittleEndian.Uint64(table[16*i:])
		size := binary.LittleEndian.Uint64(table[16*i+8:])
		if size > 1<<62 {
			return 0, false, fmt.Errorf("%w: segment %d of %d bytes", ErrBadSnapshot, i, size)
		}
		c.sizes[i] = int64(size)
		segs[i] = segstore.ReplaceSegment{Digest: digest, Size: int64(size), Data: &segmentReader{c: c, i: i}}
	}
	// Which segments the store copies (and so reads) is decided inside
	// ReplaceAll, under the lock that keeps merges out; the rest of the
	// container is verified there too, after the last copy and before the
	// commit.
	if _, err := st.ReplaceAllChecked(context.Background(), segs, c.finish); err != nil {
		return 0, false, badStream(err)
	}
	got, err := readApplied(st)
	if err != nil {
		return 0, true, err
	}
	if got != applied {
		return got, true, fmt.Errorf("%w: the container says applied index %d, its segments hold %d", ErrBadSnapshot, applied, got)
	}
	return got, true, nil
}

// badStream makes an error of ReplaceAllChecked that blames one of the
// container's segments match ErrBadSnapshot too: ReplaceAll refuses a
// stream whose bytes are damaged, of the wrong digest or length with an
// *ImportError matching segstore.ErrCorrupt, and that is a container that
// is not a valid snapshot. The error keeps matching ErrCorrupt. Errors of
// the store's own (a failed write, a cancelled context) are left as they
// are: the container may be fine.
func badStream(err error) error {
	var ie *segstore.ImportError
	if !errors.As(err, &ie) || errors.Is(err, ErrBadSnapshot) || !errors.Is(ie.Err, segstore.ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: segment %d of the container: %w", ErrBadSnapshot, ie.Stream, err)
}

// containerReader reads a container front to back, hashing every byte
// before the trailer. Segments are handed out as segmentReaders that must be
// read in order; a segment nobody reads (one the store reuses) is skipped
// over when a later one is read, or by finish.
type containerReader struct {
	r       *bufio.Reader
	sum     *xxhash.Digest
	sizes   []int64
	cur     int   // the segment being read
	left    int64 // its bytes not yet read
	started bool
}

func (c *containerReader) read(p []byte) error {
	if _, err := io.ReadFull(c.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: cut short", ErrBadSnapshot)
		}
		return err
	}
	c.sum.Write(p)
	return nil
}

// seek moves to the start of segment i, skipping what lies before it.
func (c *containerReader) seek(i int) error {
	if !c.started {
		c.started, c.cur, c.left = true, 0, c.sizes[0]
	}
	if i < c.cur {
		return fmt.Errorf("raftfsm: segment %d read after segment %d", i, c.cur)
	}
	for c.cur < i {
		if err := c.skip(c.left); err != nil {
			return err
		}
		c.cur++
		c.left = c.sizes[c.cur]
	}
	return nil
}

func (c *containerReader) skip(n int64) error {
	m, err := io.CopyN(c.sum, c.r, n)
	if err != nil && m < n {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: cut short", ErrBadSnapshot)
		}
		return err
	}
	return nil
}

// finish skips the segments not read, checks the trailer and that nothing
// follows it.
func (c *containerReader) finish() error {
	if len(c.sizes) > 0 {
		if err := c.seek(len(c.sizes) - 1); err != nil {
			return err
		}
		if err := c.skip(c.left); err != nil {
			return err
		}
		c.left = 0
	}
	want := c.sum.Sum64()
	var tr [8]byte
	if _, err := io.ReadFull(c.r, tr[:]); err != nil {
		return fmt.Errorf("%w: trailer missing", ErrBadSnapshot)
	}
	if got := binary.LittleEndian.Uint64(tr[:]); got != want {
		return fmt.Errorf("%w: trailer checksum %016x, computed %016x", ErrBadSnapshot, got, want)
	}
	if n, _ := io.CopyN(io.Discard, c.r, 1); n != 0 {
		return fmt.Errorf("%w: bytes after the trailer", ErrBadSnapshot)
	}
	return nil
}

type segmentReader struct {
	c *containerReader
	i int
}

// Read reads segment i's bytes, skipping the segments before it that the
// store did not read.
func (s *segmentReader) Read(p []byte) (int, error) {
	c := s.c
	if err := c.seek(s.i); err != nil {
		return 0, err
	}
	if c.cur != s.i || c.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.sum.Write(p[:n])
	c.left -= int64(n)
	if errors.Is(err, io.EOF) && c.left > 0 {
		return n, fmt.Errorf("%w: cut short in segment %d", ErrBadSnapshot, s.i)
	}
	return n, err
}
