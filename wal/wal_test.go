package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
)

// frameRec is one frame as Scan reports it.
type frameRec struct {
	Off     int64
	Payload string
}

// scanAll scans data[start:limit] and collects the frames.
func scanAll(t testing.TB, data []byte, start, limit int64) ([]frameRec, ScanResult, error) {
	t.Helper()
	var got []frameRec
	res, err := Scan(bytes.NewReader(data), "test.log", start, limit, func(off int64, p []byte) error {
		got = append(got, frameRec{off, string(p)})
		return nil
	})
	return got, res, err
}

// buildFile writes a prefix of prefixLen bytes of 0xEE (a file header the
// scan skips), then one frame per payload. wm(i, off) gives frame i's
// watermark. It returns the file and the frames.
func buildFile(prefixLen int, payloads [][]byte, wm func(i int, off int64) uint64) ([]byte, []frameRec) {
	buf := bytes.Repeat([]byte{0xEE}, prefixLen)
	var recs []frameRec
	for i, p := range payloads {
		off := int64(len(buf))
		buf = AppendFrame(buf, p, wm(i, off))
		recs = append(recs, frameRec{off, string(p)})
	}
	return buf, recs
}

// syncedBefore is the watermark of a writer that syncs after every frame.
func syncedBefore(_ int, off int64) uint64 { return uint64(off) }

// neverSynced is the watermark of a writer that never synced.
func neverSynced(int, int64) uint64 { return 0 }

func randPayloads(r *rand.Rand, n, maxLen int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := make([]byte, 1+r.IntN(maxLen))
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		out[i] = p
	}
	return out
}

func requireCorruptAt(t *testing.T, err error, off int64) {
	t.Helper()
	var ce *corruption.Error
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, corruption.ErrCorrupt)
	require.Equal(t, "test.log", ce.Path)
	require.Equal(t, off, ce.Offset, "corruption offset (%v)", err)
}

func TestAppendFrameLayout(t *testing.T) {
	f := AppendFrame([]byte("xy"), []byte("hello"), 7)
	require.Len(t, f, 2+HeaderSize+5)
	f = f[2:]
	require.Equal(t, uint32(5), binary.LittleEndian.Uint32(f[8:]))
	require.Equal(t, uint32(0), binary.LittleEndian.Uint32(f[12:]))
	require.Equal(t, uint64(7), binary.LittleEndian.Uint64(f[16:]))
	require.Equal(t, "hello", string(f[24:]))
	require.Panics(t, func() { AppendFrame(nil, nil, 0) })
}

func TestScanRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, prefix := range []int{0, 16} {
		payloads := randPayloads(r, 500, 3000)
		data, want := buildFile(prefix, payloads, syncedBefore)
		got, res, err := scanAll(t, data, int64(prefix), int64(len(data)))
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.Equal(t, ScanResult{End: int64(len(data)), Frames: len(want)}, res)
	}
	// An empty range.
	got, res, err := scanAll(t, nil, 0, 0)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Equal(t, ScanResult{}, res)
}

func TestScanLargeFrames(t *testing.T) {
	// Frames larger than the read chunk, between small ones.
	big := bytes.Repeat([]byte("0123456789abcdef"), scanChunk/16+1000)
	payloads := [][]byte{[]byte("a"), big, []byte("b"), big, []byte("c")}
	data, want := buildFile(0, payloads, syncedBefore)
	got, res, err := scanAll(t, data, 0, int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, len(payloads), res.Frames)

	// Damage the first big frame: the later big frame vouches for it.
	bad := bytes.Clone(data)
	bad[want[1].Off+HeaderSize+100] ^= 1
	_, res, err = scanAll(t, bad, 0, int64(len(bad)))
	requireCorruptAt(t, err, want[1].Off)
	require.Equal(t, want[1].Off, res.End)
}

func TestScanTornTailEveryOffset(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	payloads := randPayloads(r, 4, 200)
	data, recs := buildFile(8, payloads, syncedBefore)
	last := recs[len(recs)-1].Off
	for cut := last + 1; cut < int64(len(data)); cut++ {
		// 1. The file ends inside the last frame.
		got, res, err := scanAll(t, data[:cut], 8, cut)
		require.NoError(t, err, "cut %d", cut)
		require.Equal(t, recs[:len(recs)-1], got)
		require.Equal(t, last, res.End)
		require.Equal(t, len(recs)-1, res.Frames)
		require.Equal(t, !allZero(data[last:cut]), res.Torn)

		// 2. Preallocated file: the unwritten part of the frame is zeros,
		// followed by more zero space.
		pre := append(bytes.Clone(data[:cut]), make([]byte, 4096)...)
		_, res, err = scanAll(t, pre, 8, int64(len(pre)))
		require.NoError(t, err, "cut %d", cut)
		require.Equal(t, last, res.End)
		require.True(t, res.Torn)
		want := cut - last
		for want > 0 && data[last+want-1] == 0 {
			want--
		}
		require.Equal(t, want, res.TornBytes, "cut %d", cut)

		// 3. The tail of the frame is garbage (a torn sector of old data).
		garb := bytes.Clone(data)
		for i := cut; i < int64(len(garb)); i++ {
			garb[i] = byte(r.Uint32())
		}
		_, res, err = scanAll(t, garb, 8, int64(len(garb)))
		require.NoError(t, err, "cut %d", cut)
		require.Equal(t, last, res.End)
		require.True(t, res.Torn)
	}
}

func TestScanZeroTailIsCleanEnd(t *testing.T) {
	for _, zeros := range []int{1, 7, 23, 24, 25, 4096, 3*scanChunk + 13} {
		payloads := [][]byte{[]byte("one"), []byte("two")}
		data, recs := buildFile(0, payloads, syncedBefore)
		end := int64(len(data))
		data = append(data, make([]byte, zeros)...)
		got, res, err := scanAll(t, data, 0, int64(len(data)))
		require.NoError(t, err)
		require.Equal(t, recs, got)
		require.Equal(t, ScanResult{End: end, Frames: 2}, res, "zeros %d", zeros)
	}
	// A whole file of zeros.
	_, res, err := scanAll(t, make([]byte, 1000), 0, 1000)
	require.NoError(t, err)
	require.Equal(t, ScanResult{}, res)
}

func TestScanTornAfterZeros(t *testing.T) {
	// A torn write far out in preallocated space, past chunk boundaries:
	// still torn (nothing vouches for it), and TornBytes reaches it.
	data, _ := buildFile(0, [][]byte{[]byte("one")}, syncedBefore)
	end := int64(len(data))
	data = append(data, make([]byte, 2*scanChunk+100)...)
	data[len(data)-50] = 9
	_, res, err := scanAll(t, data, 0, int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, ScanResult{End: end, Frames: 1, Torn: true, TornBytes: int64(len(data)) - 50 + 1 - end}, res)
}

func TestScanCorruptionFollowedByLaterFrames(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	payloads := randPayloads(r, 6, 100)
	data, recs := buildFile(0, payloads, syncedBefore)
	// Flip every byte of frame 2 in turn; frames 3.. carry watermarks
	// above its offset, so each flip is corruption at frame 2's offset.
	victim := recs[2]
	end := recs[3].Off
	for i := victim.Off; i < end; i++ {
		bad := bytes.Clone(data)
		bad[i] ^= 0x40
		got, res, err := scanAll(t, bad, 0, int64(len(bad)))
		requireCorruptAt(t, err, victim.Off)
		require.Equal(t, recs[:2], got)
		require.Equal(t, victim.Off, res.End)
		require.Equal(t, 2, res.Frames)
	}
	// Zeroing a synced frame (a lost write below the watermark) too.
	bad := bytes.Clone(data)
	clear(bad[victim.Off:end])
	_, _, err := scanAll(t, bad, 0, int64(len(bad)))
	requireCorruptAt(t, err, victim.Off)
}

func TestScanBadFrameFollowedByLowWatermarksIsTorn(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	payloads := randPayloads(r, 6, 100)
	// Frames 0-1 synced; frame 2 onwards written while only frame 0-1 were
	// durable: their watermark is frame 2's offset, which does not vouch
	// for frame 2 itself.
	var data []byte
	var recs []frameRec
	var wm uint64
	for i, p := range payloads {
		off := int64(len(data))
		if i <= 2 {
			wm = uint64(off)
		}
		data = AppendFrame(data, p, wm)
		recs = append(recs, frameRec{off, string(p)})
	}
	bad := bytes.Clone(data)
	bad[recs[2].Off+HeaderSize] ^= 1
	got, res, err := scanAll(t, bad, 0, int64(len(bad)))
	require.NoError(t, err)
	require.Equal(t, recs[:2], got)
	require.Equal(t, ScanResult{End: recs[2].Off, Frames: 2, Torn: true, TornBytes: int64(len(data)) - recs[2].Off}, res)

	// A writer that never synced: damage anywhere is a torn tail.
	unsynced, urecs := buildFile(0, payloads, neverSynced)
	unsynced[urecs[0].Off+5] ^= 1
	_, res, err = scanAll(t, unsynced, 0, int64(len(unsynced)))
	require.NoError(t, err)
	require.Equal(t, ScanResult{Torn: true, TornBytes: int64(len(unsynced))}, res)

	// The same damage in frame 1 is vouched for by frame 2 onwards.
	bad = bytes.Clone(data)
	bad[recs[1].Off+3] ^= 1
	_, _, err = scanAll(t, bad, 0, int64(len(bad)))
	requireCorruptAt(t, err, recs[1].Off)
}

func TestScanInvalidHeaders(t *testing.T) {
	good := AppendFrame(nil, []byte("payload"), 0)
	cases := map[string]func(b []byte){
		"zero length":      func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 0) },
		"huge length":      func(b []byte) { binary.LittleEndian.PutUint32(b[8:], MaxPayload+1) },
		"past limit":       func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 1000) },
		"reserved":         func(b []byte) { b[13] = 1 },
		"future watermark": func(b []byte) { b[16] = 100 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			// Re-checksum so that only the header rule is violated.
			b := bytes.Clone(good)
			mutate(b)
			n := min(int(binary.LittleEndian.Uint32(b[8:])), len(b)-HeaderSize)
			binary.LittleEndian.PutUint64(b, xxhash.Sum64(b[8:HeaderSize+n]))
			data := append(AppendFrame(nil, []byte("first"), 0), b...)
			// A later frame whose watermark vouches for the bad one.
			data = AppendFrame(data, []byte("later"), uint64(len(data)))
			_, res, err := scanAll(t, data, 0, int64(len(data)))
			requireCorruptAt(t, err, HeaderSize+5)
			require.Equal(t, 1, res.Frames)
		})
	}
}

func TestScanShortReaderAndErrors(t *testing.T) {
	data, recs := buildFile(0, [][]byte{[]byte("a"), []byte("b")}, syncedBefore)
	// A limit beyond the end of the reader: the reader's end is the end.
	got, res, err := scanAll(t, data, 0, int64(len(data))+1000)
	require.NoError(t, err)
	require.Equal(t, recs, got)
	require.Equal(t, ScanResult{End: int64(len(data)), Frames: 2}, res)
	// Same, but ending inside the second frame.
	got, res, err = scanAll(t, data[:len(data)-1], 0, int64(len(data))+1000)
	require.NoError(t, err)
	require.Equal(t, recs[:1], got)
	require.True(t, res.Torn)

	// fn's error stops the scan and is returned.
	stop := errors.New("stop")
	res, err = Scan(bytes.NewReader(data), "x", 0, int64(len(data)), func(off int64, _ []byte) error {
		if off > 0 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, ScanResult{End: recs[1].Off, Frames: 1}, res)

	// A read error is returned wrapped, not as corruption.
	boom := errors.New("boom")
	_, err = Scan(errReaderAt{boom}, "x", 0, 100, func(int64, []byte) error { return nil })
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, corruption.ErrCorrupt)

	_, err = Scan(bytes.NewReader(data), "x", 10, 5, nil)
	require.Error(t, err)
}

type errReaderAt struct{ err error }

func (e errReaderAt) ReadAt([]byte, int64) (int, error) { return 0, e.err }

// countingReaderAt counts ReadAt calls.
type countingReaderAt struct {
	r     io.ReaderAt
	calls int
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.calls++
	return c.r.ReadAt(p, off)
}

func TestScanReadsInChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	data, _ := buildFile(0, randPayloads(r, 20000, 100), syncedBefore) // ~1.5 MiB
	data = append(data, make([]byte, 5*scanChunk)...)                  // preallocated tail
	c := &countingReaderAt{r: bytes.NewReader(data)}
	res, err := Scan(c, "x", 0, int64(len(data)), func(int64, []byte) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 20000, res.Frames)
	require.LessOrEqual(t, c.calls, len(data)/scanChunk+4, "ReadAt calls")
}

func TestStreamReader(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	payloads := randPayloads(r, 5, 300)
	const start = 16
	data, recs := buildFile(start, payloads, syncedBefore)
	data = data[start:]

	read := func(b []byte, maxPayload int) ([]frameRec, error) {
		sr := NewStreamReader(bytes.NewReader(b), "test.log", start, maxPayload)
		var got []frameRec
		for {
			off := sr.Offset()
			frame, payload, err := sr.Next()
			if err != nil {
				// Sticky.
				_, _, err2 := sr.Next()
				require.Equal(t, err, err2)
				return got, err
			}
			require.Equal(t, frame[HeaderSize:], payload)
			require.Equal(t, b[off-start:off-start+int64(len(frame))], frame)
			got = append(got, frameRec{off, string(payload)})
		}
	}
	got, err := read(data, 0)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, recs, got)

	// Every truncation that is not at a frame boundary is corruption at the
	// start of the cut frame.
	for cut := 0; cut < len(data); cut++ {
		got, err := read(data[:cut], 0)
		i := len(got)
		if i < len(recs) && recs[i].Off-start == int64(cut) {
			require.ErrorIs(t, err, io.EOF, "cut %d", cut)
			continue
		}
		requireCorruptAt(t, err, recs[i].Off)
	}
	// Every flipped byte is corruption at the frame holding it.
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		got, err := read(bad, 0)
		requireCorruptAt(t, err, recs[len(got)].Off)
	}
	// Zero padding is not a clean end in a stream.
	_, err = read(append(bytes.Clone(data), make([]byte, 100)...), 0)
	requireCorruptAt(t, err, int64(len(data))+start)
	// maxPayload is enforced.
	_, err = read(AppendFrame(nil, make([]byte, 100), 0), 99)
	requireCorruptAt(t, err, start)
	_, err = read(AppendFrame(nil, make([]byte, 100), 0), 100)
	require.ErrorIs(t, err, io.EOF)
	// A forged length on a short stream is corruption, not a huge allocation.
	forged := AppendFrame(nil, []byte("x"), 0)
	binary.LittleEndian.PutUint32(forged[8:], MaxPayload)
	_, err = read(forged, 0)
	requireCorruptAt(t, err, start)
	// A read error is wrapped and is not corruption.
	boom := errors.New("boom")
	_, _, err = NewStreamReader(io.MultiReader(bytes.NewReader(data[:30]), errReader{boom}), "x", start, 0).Next()
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, corruption.ErrCorrupt)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func ExampleScan() {
	var file []byte
	file = AppendFrame(file, []byte("first"), 0)
	file = AppendFrame(file, []byte("second"), uint64(len(file)))
	file = append(file, make([]byte, 64)...) // preallocated space
	res, err := Scan(bytes.NewReader(file), "example.log", 0, int64(len(file)), func(off int64, p []byte) error {
		fmt.Printf("frame at %d: %s\n", off, p)
		return nil
	})
	fmt.Println(res.End, res.Frames, res.Torn, err)
	// Output:
	// frame at 0: first
	// frame at 29: second
	// 59 2 false <nil>
}

// TestNextFrame: after a torn frame, NextFrame finds the next valid frame
// whatever its watermark, skipping zero runs and garbage, and ScanFrames
// reports each frame's watermark.
func TestNextFrame(t *testing.T) {
	a := AppendFrame(nil, []byte("first"), 0)
	torn := AppendFrame(nil, []byte("torn frame payload"), uint64(len(a)))
	torn[HeaderSize+2] ^= 1
	data := append(bytes.Clone(a), torn...)
	data = append(data, make([]byte, 40)...)
	data = append(data, 0xAB, 0xCD)
	off := int64(len(data))
	data = AppendFrame(data, []byte("replica"), uint64(len(a)))

	var wms []uint64
	res, err := ScanFrames(bytes.NewReader(data), "test.log", 0, int64(len(data)), func(f Frame) error {
		wms = append(wms, f.Watermark)
		require.Equal(t, HeaderSize+int64(len(f.Payload)), f.Size())
		return nil
	})
	require.NoError(t, err)
	require.True(t, res.Torn, "the later frame's watermark does not vouch for the torn one")
	require.Equal(t, int64(len(a)), res.End)
	require.Equal(t, []uint64{0}, wms)

	fr, ok, err := NextFrame(bytes.NewReader(data), "test.log", res.End, int64(len(data)))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Frame{Off: off, Watermark: uint64(len(a)), Payload: []byte("replica")}, fr)

	_, ok, err = NextFrame(bytes.NewReader(data), "test.log", off, int64(len(data)))
	require.NoError(t, err)
	require.False(t, ok, "nothing after the last frame")
	_, ok, err = NextFrame(bytes.NewReader(data), "test.log", res.End, off+HeaderSize)
	require.NoError(t, err)
	require.False(t, ok, "a frame running past the limit does not count")
	_, _, err = NextFrame(bytes.NewReader(data), "test.log", 10, 5)
	require.Error(t, err)
}
