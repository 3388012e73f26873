package wal

import (
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/segkv/segkv/corruption"
)

// streamGrow bounds how far the stream reader extends its buffer past the
// bytes actually received (capacity still doubles as usual), so that a
// forged length field cannot make it allocate a gigabyte for a stream that
// then ends.
const streamGrow = 1 << 20

// StreamReader reads frames strictly from a stream, as needed to validate a
// segment received from a peer: there is no torn tail to forgive, so any
// invalid frame, and a stream that ends anywhere but at a frame boundary, is
// a *corruption.Error naming the stream and the offset of the frame.
type StreamReader struct {
	r          io.Reader
	name       string
	off        int64 // offset of the next frame
	maxPayload int
	buf        []byte
	err        error // sticky: once Next failed it keeps failing
}

// NewStreamReader returns a reader of the frames of r. startOffset is the
// file offset of r's first byte (it positions corruption reports and bounds
// watermarks); maxPayload limits the accepted payload length (<= 0 or above
// MaxPayload means MaxPayload). r is read exactly as far as the frames go,
// without read-ahead, so callers that read small frames from a slow source
// should pass a buffered reader.
func NewStreamReader(r io.Reader, name string, startOffset int64, maxPayload int) *StreamReader {
	if maxPayload <= 0 || maxPayload > MaxPayload {
		maxPayload = MaxPayload
	}
	return &StreamReader{r: r, name: name, off: startOffset, maxPayload: maxPayload}
}

// Offset returns the file offset of the next frame: just past the last frame
// Next returned.
func (s *StreamReader) Offset() int64 { return s.off }

// Next returns the next frame: its raw bytes, header included (to be copied
// verbatim), and its payload within them. Both are valid until the next call.
// It returns io.EOF when the stream ends cleanly at a frame boundary, a
// *corruption.Error for an invalid frame or a stream that ends mid-frame, and
// a wrapped error if reading r fails.
func (s *StreamReader) Next() (frame []byte, payload []byte, err error) {
	if s.err != nil {
		return nil, nil, s.err
	}
	frame, payload, err = s.next()
	if err != nil {
		s.err = err
	}
	return frame, payload, err
}

func (s *StreamReader) next() ([]byte, []byte, error) {
	if cap(s.buf) < HeaderSize {
		s.buf = make([]byte, HeaderSize, 4096)
	}
	s.buf = s.buf[:HeaderSize]
	m, err := io.ReadFull(s.r, s.buf)
	switch {
	case err == io.EOF:
		return nil, nil, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, nil, corruption.New(s.name, s.off, "stream ends inside a frame header (%d of %d bytes)", m, HeaderSize)
	case err != nil:
		return nil, nil, fmt.Errorf("wal: read %s at offset %d: %w", s.name, s.off, err)
	}
	h := decodeHeader(s.buf)
	// The limit is unknown in a stream: pass one that never binds, and let
	// the read below find a short stream.
	if reason := h.check(s.off, s.off+HeaderSize+int64(h.n), s.maxPayload); reason != "" {
		return nil, nil, corruption.New(s.name, s.off, "invalid frame: %s", reason)
	}
	size := HeaderSize + int(h.n)
	// Grow as the bytes arrive, never more than streamGrow ahead of them.
	for have := HeaderSize; have < size; {
		want := min(size, have+streamGrow)
		if cap(s.buf) < want {
			nb := make([]byte, want, max(want, min(size, 2*cap(s.buf))))
			copy(nb, s.buf[:have])
			s.buf = nb
		}
		s.buf = s.buf[:want]
		m, err := io.ReadFull(s.r, s.buf[have:want])
		have += m
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, corruption.New(s.name, s.off, "stream ends inside a frame (%d of %d bytes)", have, size)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("wal: read %s at offset %d: %w", s.name, s.off+int64(have), err)
		}
	}
	frame := s.buf[:size]
	if xxhash.Sum64(frame[8:]) != h.sum {
		return nil, nil, corruption.New(s.name, s.off, "invalid frame: frame checksum mismatch")
	}
	s.off += int64(size)
	return frame, frame[HeaderSize:], nil
}
