// Package wal implements segkv's framed, append-only record format: the
// format of the live data file (and of sealed segments, which are live files
// that stopped growing) and of the manifest log. It provides the frame codec,
// a scanner that tells a torn tail from corruption, a strict stream reader
// for validating segments received from a peer, and a group-commit writer.
//
// # Frame format
//
// A file (or the part of it the caller scans) is a sequence of frames written
// back to back. Each frame is a 24-byte header followed by its payload:
//
//	offset  size  field
//	0       8     checksum   xxhash64 (github.com/cespare/xxhash/v2, seed 0) of
//	                         bytes [8, 24+n) of the frame: the rest of the
//	                         header and the payload
//	8       4     n          payload length, uint32 little endian,
//	                         1 <= n <= MaxPayload (1<<30)
//	12      4     reserved   must be 0
//	16      8     watermark  uint64 little endian: the file offset below which
//	                         the file was known to be durable (synced) when
//	                         this frame was written; <= the frame's own offset
//	24      n     payload    opaque to this package
//
// All integers are little endian. The checksum covers the length, reserved
// and watermark fields, so a damaged length cannot send the reader astray
// undetected. A frame is the unit of atomicity: a group of records written
// together shares one frame, and a torn frame is dropped whole, so a group is
// all-or-nothing across a crash. n is never 0, which makes an all-zero header
// (as found in preallocated space) invalid by construction and lets the
// scanner skip zero runs without missing a frame: the bytes [8,12) of every
// valid frame are not all zero.
//
// # Torn tails versus corruption
//
// A crash can only damage bytes that had not been synced yet: after power
// loss the file holds its synced prefix plus any subset of the later writes,
// possibly torn at sector or page granularity. Damage below the synced prefix
// is something else (a bit flip, a bug, a misdirected write) and must be
// reported, never silently dropped with everything after it.
//
// The watermark makes the difference observable. When Scan meets an invalid
// frame at offset Y (bad checksum, impossible length, non-zero reserved
// field, watermark above its own offset, header or payload running past the
// scan limit, or an all-zero header), it searches the rest of the range
// (Y, limit) for a later valid frame. If a later valid frame at Z carries a
// watermark > Y, then the bytes at Y were durable before that frame was even
// written, and no crash can explain their damage: Scan returns a
// *corruption.Error naming the file and offset Y. Otherwise (no later valid
// frame, or only frames with watermark <= Y, written while Y was still
// unsynced) the damage is a torn tail: the valid data ends at Y, and the
// caller truncates there. If everything from Y to the limit is zero (the
// preallocated, never-written rest of a file), that is simply the clean end,
// not a tear.
//
// The rule is conservative in one direction only: damage to synced bytes
// that no later, higher-watermark frame vouches for (for example the last
// synced frame of a file that was never appended to again) looks exactly like
// a torn tail and is treated as one. A sealed segment is therefore also
// protected by a whole-file digest kept elsewhere (the manifest).
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
)

const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 24
	// MaxPayload is the largest payload a frame may carry.
	MaxPayload = 1 << 30
)

// scanChunk is how much Scan reads per ReadAt. Frames are small compared to
// it, so a scan costs about one ReadAt per MiB rather than one per header.
const scanChunk = 1 << 20

// AppendFrame appends the encoding of one frame carrying payload to dst and
// returns the extended slice. watermark is the file offset below which the
// file is known durable; it must not exceed the offset at which the frame
// will be written. The payload must hold 1..MaxPayload bytes: an empty or
// oversized payload is a programming error and panics, because silently
// writing a frame that every reader rejects would lose data later.
func AppendFrame(dst, payload []byte, watermark uint64) []byte {
	if len(payload) == 0 || len(payload) > MaxPayload {
		panic(fmt.Sprintf("wal: AppendFrame: payload of %d bytes, want 1..%d", len(payload), MaxPayload))
	}
	start := len(dst)
	dst = binary.LittleEndian.AppendUint64(dst, 0) // checksum, filled in below
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = binary.LittleEndian.AppendUint64(dst, watermark)
	dst = append(dst, payload...)
	binary.LittleEndian.PutUint64(dst[start:], xxhash.Sum64(dst[start+8:]))
	return dst
}

// header is a decoded frame header.
type header struct {
	sum       uint64
	n         uint32
	reserved  uint32
	watermark uint64
}

func decodeHeader(b []byte) header {
	_ = b[HeaderSize-1]
	return header{
		sum:       binary.LittleEndian.Uint64(b[0:]),
		n:         binary.LittleEndian.Uint32(b[8:]),
		reserved:  binary.LittleEndian.Uint32(b[12:]),
		watermark: binary.LittleEndian.Uint64(b[16:]),
	}
}

// check validates a header found at file offset off against the bytes
// available up to limit, without looking at the checksum. It returns why the
// header is invalid, or "" if it is plausible.
func (h header) check(off, limit int64, maxPayload int) string {
	switch {
	case h.n == 0:
		if h.sum == 0 && h.reserved == 0 && h.watermark == 0 {
			return "all-zero frame header"
		}
		return "zero payload length"
	case int64(h.n) > int64(maxPayload):
		return fmt.Sprintf("payload length %d exceeds the limit %d", h.n, maxPayload)
	case h.reserved != 0:
		return fmt.Sprintf("reserved field is %#x, want 0", h.reserved)
	case h.watermark > uint64(off):
		return fmt.Sprintf("watermark %d is beyond the frame's own offset", h.watermark)
	case limit-off-HeaderSize < int64(h.n):
		return fmt.Sprintf("frame of %d payload bytes runs past the end (%d)", h.n, limit)
	}
	return ""
}

// ScanResult describes what Scan found.
type ScanResult struct {
	End       int64 // offset just past the last valid frame (== start if none)
	Frames    int   // valid frames seen
	Torn      bool  // non-zero bytes after End were dropped as a torn tail
	TornBytes int64 // how many bytes from End to the last non-zero byte (for reports)
}

// Frame is one valid frame found by ScanFrames or NextFrame.
type Frame struct {
	Off       int64  // file offset of the frame header
	Watermark uint64 // the header's watermark field
	Payload   []byte // the payload (see the function for how long it stays valid)
}

// Size is the frame's size on disk, header included.
func (f Frame) Size() int64 { return HeaderSize + int64(len(f.Payload)) }

// Scan reads frames from r in [start, limit), calling fn for each valid
// frame in order with the frame's offset and its payload (payload is valid
// only during the call). An error returned by fn stops the scan and is
// returned as is; End and Frames then cover the frames before the one whose
// callback failed. fn may be nil to only validate and measure. path is used
// in corruption errors only.
//
// Scan stops at the first invalid frame and classifies what follows (see the
// package documentation): a clean end and a torn tail return a nil error (the
// latter with Torn set), damage a crash cannot explain returns a
// *corruption.Error at the offset of the invalid frame, with End at that
// offset. If r ends before limit (a short read with io.EOF), the end of r is
// treated as the limit. Other read errors are returned wrapped.
func Scan(r io.ReaderAt, path string, start, limit int64, fn func(frameOff int64, payload []byte) error) (ScanResult, error) {
	var ffn func(Frame) error
	if fn != nil {
		ffn = func(f Frame) error { return fn(f.Off, f.Payload) }
	}
	return ScanFrames(r, path, start, limit, ffn)
}

// ScanFrames is Scan with a callback that also receives each frame's
// watermark. The payload is valid only during the call.
func ScanFrames(r io.ReaderAt, path string, start, limit int64, fn func(Frame) error) (ScanResult, error) {
	res := ScanResult{End: start}
	if start < 0 || limit < start {
		return res, fmt.Errorf("wal: scan %s: invalid range [%d, %d)", path, start, limit)
	}
	s := scanner{win: window{r: r, limit: limit}, path: path}
	off := start
	for off < s.win.limit {
		reason, err := s.frameAt(off)
		if err != nil {
			return res, err
		}
		if reason != "" {
			return s.classify(res, off, reason)
		}
		b, err := s.win.get(off, HeaderSize+int(s.n))
		if err != nil {
			return res, err
		}
		if fn != nil {
			fr := Frame{Off: off, Watermark: binary.LittleEndian.Uint64(b[16:]), Payload: b[HeaderSize:]}
			if err := fn(fr); err != nil {
				return res, err
			}
		}
		off += HeaderSize + int64(s.n)
		res.End = off
		res.Frames++
	}
	return res, nil
}

// NextFrame returns the first valid frame that starts at an offset in
// (after, limit) and fits below limit, whatever its watermark, or found =
// false if there is none. The payload is a copy the caller owns.
//
// It is meant for the short stretch after a torn frame (a user of the format
// that writes redundant copies looks there for one); it examines every
// offset that could start a frame, skipping zero runs, so its cost is linear
// in the bytes examined plus one checksum per plausible header.
func NextFrame(r io.ReaderAt, path string, after, limit int64) (fr Frame, found bool, err error) {
	if after < 0 || limit < after {
		return fr, false, fmt.Errorf("wal: next frame in %s: invalid range (%d, %d)", path, after, limit)
	}
	s := scanner{win: window{r: r, limit: limit}, path: path}
	le := binary.LittleEndian
	for z := after + 1; z < s.win.limit; {
		b, err := s.win.at(z, HeaderSize)
		if err != nil {
			return fr, false, err
		}
		if len(b) < HeaderSize {
			return fr, false, nil
		}
		i, stop := 0, len(b)-HeaderSize
		for i <= stop {
			if noFrameStartsIn8(b, i) {
				i += 8
				continue
			}
			off := z + int64(i)
			if n := le.Uint32(b[i+8:]); n != 0 && le.Uint32(b[i+12:]) == 0 && le.Uint64(b[i+16:]) <= uint64(off) {
				ok, err := s.validAt(off)
				if err != nil {
					return fr, false, err
				}
				if ok {
					fb, err := s.win.get(off, HeaderSize+int(n))
					if err != nil {
						return fr, false, err
					}
					return Frame{Off: off, Watermark: le.Uint64(fb[16:]), Payload: append([]byte(nil), fb[HeaderSize:]...)}, true, nil
				}
				// validAt may have moved the window: fetch b again.
				i++
				break
			}
			i++
		}
		z += int64(i)
	}
	return fr, false, nil
}

// scanner holds the state of one Scan.
type scanner struct {
	win  window
	path string
	n    uint32 // payload length of the frame frameAt last accepted
}

// frameAt validates the frame at off, including its checksum. It returns ""
// and sets s.n if the frame is valid, or the reason it is not.
func (s *scanner) frameAt(off int64) (string, error) {
	if s.win.limit-off < HeaderSize {
		// Also covers a limit that shrank because r ended early.
		b, err := s.win.get(off, int(s.win.limit-off))
		if err != nil {
			return "", err
		}
		if allZero(b) {
			return "all-zero frame header", nil
		}
		return fmt.Sprintf("%d-byte fragment is shorter than a frame header", len(b)), nil
	}
	b, err := s.win.get(off, HeaderSize)
	if err != nil {
		return "", err
	}
	if len(b) < HeaderSize { // r ended early; the window lowered the limit
		return s.frameAt(off)
	}
	h := decodeHeader(b)
	if reason := h.check(off, s.win.limit, MaxPayload); reason != "" {
		return reason, nil
	}
	size := HeaderSize + int(h.n)
	b, err = s.win.get(off, size)
	if err != nil {
		return "", err
	}
	if len(b) < size {
		return fmt.Sprintf("frame of %d payload bytes runs past the end (%d)", h.n, s.win.limit), nil
	}
	if xxhash.Sum64(b[8:size]) != h.sum {
		return "frame checksum mismatch", nil
	}
	s.n = h.n
	return "", nil
}

// classify decides what the invalid frame at y means: a clean end, a torn
// tail, or corruption. It makes one pass over [y, limit), visiting every
// offset that could start a frame and noting the last non-zero byte. Zero
// runs go 8 bytes per step: every valid frame has a non-zero byte in its
// length field [8, 12), so 20 zero bytes at i rule out frames at i..i+7.
// Cheap header checks (notably the watermark range) run before a checksum,
// so dense garbage costs a few loads per byte.
func (s *scanner) classify(res ScanResult, y int64, reason string) (ScanResult, error) {
	res.End = y
	lastNZ := int64(-1)
	le := binary.LittleEndian
	for z := y; z < s.win.limit; {
		b, err := s.win.at(z, HeaderSize)
		if err != nil {
			return res, err
		}
		if len(b) < HeaderSize {
			// Too few bytes left to hold a frame; they only count as torn.
			if i := lastNonZero(b); i >= 0 {
				lastNZ = z + int64(i)
			}
			break
		}
		i, stop := 0, len(b)-HeaderSize
		for i <= stop {
			if noFrameStartsIn8(b, i) {
				i += 8
				continue
			}
			off := z + int64(i)
			if b[i] != 0 {
				lastNZ = off
			}
			if off > y && le.Uint32(b[i+8:]) != 0 && le.Uint32(b[i+12:]) == 0 {
				if wm := le.Uint64(b[i+16:]); wm > uint64(y) && wm <= uint64(off) {
					ok, err := s.validAt(off)
					if err != nil {
						return res, err
					}
					if ok {
						return res, corruption.New(s.path, y,
							"invalid frame (%s) followed by a valid frame at offset %d written after offset %d was synced (watermark %d)",
							reason, off, y, wm)
					}
					// validAt may have moved the window: fetch b again.
					i++
					break
				}
			}
			i++
		}
		z += int64(i)
	}
	if lastNZ >= 0 {
		res.Torn = true
		res.TornBytes = lastNZ + 1 - y
	}
	return res, nil
}

// validAt reports whether a valid frame (header and checksum) starts at z.
func (s *scanner) validAt(z int64) (bool, error) {
	b, err := s.win.get(z, HeaderSize)
	if err != nil || len(b) < HeaderSize {
		return false, err
	}
	h := decodeHeader(b)
	if h.check(z, s.win.limit, MaxPayload) != "" {
		return false, nil
	}
	size := HeaderSize + int(h.n)
	b, err = s.win.get(z, size)
	if err != nil || len(b) < size {
		return false, err
	}
	return xxhash.Sum64(b[8:size]) == h.sum, nil
}

// noFrameStartsIn8 reports whether b[i:i+20] is all zero, which rules out
// a frame starting at any of b[i:i+8]: each would have its length field,
// which is never zero, inside those 20 bytes. b must hold i+20 bytes.
func noFrameStartsIn8(b []byte, i int) bool {
	le := binary.LittleEndian
	return le.Uint64(b[i:])|le.Uint64(b[i+8:])|uint64(le.Uint32(b[i+16:])) == 0
}

// lastNonZero returns the index of the last non-zero byte of b, or -1.
func lastNonZero(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// firstNonZero returns the index of the first non-zero byte of b, or -1.
// It tests eight bytes at a time: preallocated files are mostly zeros.
func firstNonZero(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if w := binary.LittleEndian.Uint64(b[i:]); w != 0 {
			return i + bits.TrailingZeros64(w)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

func allZero(b []byte) bool { return firstNonZero(b) < 0 }

// window is a read buffer over r: it holds the bytes [base, base+len(buf))
// and refills with one ReadAt of at least scanChunk bytes when asked for
// bytes it does not hold.
type window struct {
	r     io.ReaderAt
	limit int64 // the scan limit; lowered if r turns out to end before it
	base  int64
	buf   []byte
}

// at returns the buffered bytes from off on, at least min(n, limit-off) of
// them, refilling the window at off (one chunk) if it holds fewer.
func (w *window) at(off int64, n int) ([]byte, error) {
	if off >= w.base && w.base+int64(len(w.buf))-off >= min(int64(n), w.limit-off) {
		return w.buf[off-w.base:], nil
	}
	return w.get(off, int(min(w.limit-off, scanChunk)))
}

// get returns the bytes [off, off+n), fewer only if r ends first (the limit
// is then lowered to where r ended). The result is valid until the next call.
// Callers keep off+n <= limit.
func (w *window) get(off int64, n int) ([]byte, error) {
	if off >= w.base && off+int64(n) <= w.base+int64(len(w.buf)) {
		i := off - w.base
		return w.buf[i : i+int64(n)], nil
	}
	size := int(min(max(int64(n), scanChunk), w.limit-off))
	if size < 0 {
		size = 0
	}
	if cap(w.buf) < size {
		w.buf = make([]byte, size)
	}
	w.buf = w.buf[:size]
	m, err := w.r.ReadAt(w.buf, off)
	if m < size {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		if !errors.Is(err, io.EOF) {
			w.buf = w.buf[:0]
			return nil, fmt.Errorf("wal: read at offset %d: %w", off, err)
		}
		w.limit = off + int64(m) // r is shorter than the limit: its end is the end
	}
	w.base, w.buf = off, w.buf[:m]
	return w.buf[:min(n, m)], nil
}

// CheckFrame verifies that b holds exactly one whole frame, read from file
// offset off of the file at path, and returns its payload (aliasing b). It
// is the check a reader makes when an index sent it straight to a frame,
// without a scan: a frame that does not verify is a *corruption.Error.
func CheckFrame(b []byte, path string, off int64) ([]byte, error) {
	if len(b) < HeaderSize+1 {
		return nil, corruption.New(path, off, "frame of %d bytes is too short", len(b))
	}
	h := decodeHeader(b)
	if reason := h.check(off, off+int64(len(b)), MaxPayload); reason != "" {
		return nil, corruption.New(path, off, "%s", reason)
	}
	if int(h.n) != len(b)-HeaderSize {
		return nil, corruption.New(path, off, "frame holds %d payload bytes, %d expected", h.n, len(b)-HeaderSize)
	}
	if got := xxhash.Sum64(b[8:]); got != h.sum {
		return nil, corruption.New(path, off, "frame checksum %016x, want %016x", got, h.sum)
	}
	return b[HeaderSize:], nil
}
