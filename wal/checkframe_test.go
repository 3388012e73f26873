package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
)

// requireFrameCorrupt checks that err is a *corruption.Error naming path
// and off.
func requireFrameCorrupt(t *testing.T, err error, path string, off int64, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, corruption.ErrCorrupt, msgAndArgs...)
	var ce *corruption.Error
	require.True(t, errors.As(err, &ce), msgAndArgs...)
	require.Equal(t, path, ce.Path, msgAndArgs...)
	require.Equal(t, off, ce.Offset, msgAndArgs...)
}

// resum recomputes the checksum of a frame whose header was edited, so that
// only the edited field is wrong.
func resum(b []byte) []byte {
	binary.LittleEndian.PutUint64(b, xxhash.Sum64(b[8:]))
	return b
}

func TestCheckFrameAccepts(t *testing.T) {
	cases := []struct {
		name      string
		payload   []byte
		watermark uint64
		off       int64
	}{
		{"one byte at 0", []byte{0}, 0, 0},
		{"small, watermark at its offset", []byte("hello"), 16, 16},
		{"small, old watermark", []byte("hello"), 16, 1 << 40},
		{"large", bytes.Repeat([]byte("0123456789"), 7000), 4096, 8192},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := AppendFrame(nil, c.payload, c.watermark)
			p, err := CheckFrame(b, "f.log", c.off)
			require.NoError(t, err)
			require.Equal(t, c.payload, p)
			require.Same(t, &b[HeaderSize], &p[0], "payload aliases b")

			// A frame appended after other bytes checks the same once sliced out.
			buf := AppendFrame([]byte("prefix"), c.payload, c.watermark)
			p, err = CheckFrame(buf[6:], "f.log", c.off)
			require.NoError(t, err)
			require.Equal(t, c.payload, p)
		})
	}
}

func TestCheckFrameShort(t *testing.T) {
	b := AppendFrame(nil, []byte("payload"), 0)
	for n := 0; n <= HeaderSize; n++ {
		p, err := CheckFrame(b[:n], "f.log", 32)
		requireFrameCorrupt(t, err, "f.log", 32, "%d bytes", n)
		require.Nil(t, p)
	}
	p, err := CheckFrame(nil, "f.log", 0)
	requireFrameCorrupt(t, err, "f.log", 0)
	require.Nil(t, p)
}

// TestCheckFrameBitFlips: no single flipped bit, anywhere in the frame,
// goes unnoticed.
func TestCheckFrameBitFlips(t *testing.T) {
	const off = 1 << 20
	for _, wm := range []uint64{0, off / 2, off} {
		frame := AppendFrame(nil, []byte("some payload bytes"), wm)
		for i := range frame {
			for bit := range 8 {
				b := bytes.Clone(frame)
				b[i] ^= 1 << bit
				p, err := CheckFrame(b, "f.log", off)
				requireFrameCorrupt(t, err, "f.log", off, "watermark %d, byte %d bit %d", wm, i, bit)
				require.Nil(t, p)
			}
		}
	}
}

func TestCheckFrameRefuses(t *testing.T) {
	const off = 100
	payload := []byte("0123456789")
	good := func() []byte { return AppendFrame(nil, payload, off) }
	setLen := func(n uint32) []byte {
		b := good()
		binary.LittleEndian.PutUint32(b[8:], n)
		return resum(b)
	}
	cases := map[string][]byte{
		"trailing byte":                 append(good(), 0),
		"trailing frame":                AppendFrame(good(), payload, off),
		"one byte short":                good()[:HeaderSize+len(payload)-1],
		"length one less, resummed":     setLen(uint32(len(payload) - 1)),
		"length one more, resummed":     setLen(uint32(len(payload) + 1)),
		"length zero, resummed":         setLen(0),
		"length above max, resummed":    setLen(MaxPayload + 1),
		"length all ones, resummed":     setLen(^uint32(0)),
		"watermark above off":           AppendFrame(nil, payload, off+1),
		"watermark far above off":       AppendFrame(nil, payload, ^uint64(0)),
		"checksum zero":                 append(make([]byte, 8), good()[8:]...),
		"all-zero header and a payload": append(make([]byte, HeaderSize), payload...),
	}
	b := good()
	binary.LittleEndian.PutUint32(b[12:], 1)
	cases["reserved non-zero, resummed"] = resum(b)

	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := CheckFrame(b, "f.log", off)
			requireFrameCorrupt(t, err, "f.log", off)
			require.Nil(t, p)
		})
	}

	// The same frame checks at any offset at or above its watermark.
	b = AppendFrame(nil, payload, off)
	for _, o := range []int64{off, off + 1, 1 << 50} {
		_, err := CheckFrame(b, "f.log", o)
		require.NoError(t, err, "off %d", o)
	}
	for _, o := range []int64{0, off - 1} {
		_, err := CheckFrame(b, "f.log", o)
		requireFrameCorrupt(t, err, "f.log", o)
	}
}

// TestCheckFrameAgreesWithScan: a frame CheckFrame accepts at off is the
// frame Scan finds there, and the other way round.
func TestCheckFrameAgreesWithScan(t *testing.T) {
	file := bytes.Repeat([]byte{0xEE}, 16)
	var offs []int64
	for i, p := range [][]byte{[]byte("a"), bytes.Repeat([]byte("b"), 300), []byte("ccc")} {
		offs = append(offs, int64(len(file)))
		file = AppendFrame(file, p, uint64(i*16))
	}
	offs = append(offs, int64(len(file)))
	var n int
	_, err := Scan(bytes.NewReader(file), "f.log", 16, int64(len(file)), func(off int64, payload []byte) error {
		require.Equal(t, offs[n], off)
		p, err := CheckFrame(file[off:offs[n+1]], "f.log", off)
		require.NoError(t, err)
		require.Equal(t, payload, p)
		n++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, n)
}
