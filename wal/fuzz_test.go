package wal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
)

// The fuzz targets compare the real implementations against naive reference
// versions written straight from the format description: O(n^2), no
// buffering, no zero skipping.

// refFrame checks for a valid frame at z in data (everything before
// len(data) is available), with payload length at most maxPayload.
func refFrame(data []byte, z int64, maxPayload int) (n int64, wm uint64, ok bool) {
	if z < 0 || int64(len(data))-z < HeaderSize {
		return 0, 0, false
	}
	h := data[z:]
	n = int64(binary.LittleEndian.Uint32(h[8:]))
	wm = binary.LittleEndian.Uint64(h[16:])
	if n < 1 || n > int64(maxPayload) || binary.LittleEndian.Uint32(h[12:]) != 0 || wm > uint64(z) ||
		int64(len(data))-z-HeaderSize < n {
		return 0, 0, false
	}
	if xxhash.Sum64(h[8:HeaderSize+n]) != binary.LittleEndian.Uint64(h) {
		return 0, 0, false
	}
	return n, wm, true
}

// refScan is the reference Scan of data[start:].
func refScan(data []byte, start int64) (frames []frameRec, res ScanResult, corruptAt int64) {
	corruptAt = -1
	limit := int64(len(data))
	off := start
	for off < limit {
		n, _, ok := refFrame(data, off, MaxPayload)
		if !ok {
			break
		}
		frames = append(frames, frameRec{off, string(data[off+HeaderSize : off+HeaderSize+n])})
		off += HeaderSize + n
	}
	res = ScanResult{End: off, Frames: len(frames)}
	lastNZ := int64(-1)
	for i := off; i < limit; i++ {
		if data[i] != 0 {
			lastNZ = i
		}
	}
	if lastNZ < 0 {
		return frames, res, -1
	}
	for z := off + 1; z < limit; z++ {
		if _, wm, ok := refFrame(data, z, MaxPayload); ok && wm > uint64(off) {
			return frames, res, off
		}
	}
	res.Torn, res.TornBytes = true, lastNZ+1-off
	return frames, res, -1
}

// buildRecipe turns fuzz input into a file of mostly valid frames, so that
// the fuzzer reaches the interesting cases (a damaged frame followed by
// valid ones with high or low watermarks) instead of only invalid headers.
// Layout: count byte, then per frame a length byte, a watermark selector
// and the payload bytes; whatever is left is a list of (position, xor)
// mutations; pad zero bytes follow.
func buildRecipe(in []byte, pad int) []byte {
	if len(in) == 0 {
		return nil
	}
	count := int(in[0] % 16)
	in = in[1:]
	var file []byte
	var starts []int64
	for range count {
		if len(in) < 2 {
			break
		}
		n, sel := 1+int(in[0]%48), in[1]
		in = in[2:]
		p := make([]byte, n)
		copy(p, in) // short input: the rest of the payload stays zero
		in = in[min(n, len(in)):]
		off := int64(len(file))
		var wm uint64
		switch sel % 4 {
		case 1: // synced up to its own offset
			wm = uint64(off)
		case 2: // synced up to the previous frame
			if len(starts) > 0 {
				wm = uint64(starts[len(starts)-1])
			}
		case 3: // synced up to some earlier point
			wm = uint64(off) * uint64(sel>>2) / 64
		}
		starts = append(starts, off)
		file = AppendFrame(file, p, wm)
	}
	for len(in) >= 3 && len(file) > 0 {
		pos := int(binary.LittleEndian.Uint16(in)) % len(file)
		if in[2] == 0 {
			file = file[:pos] // truncate
		} else {
			file[pos] ^= in[2]
		}
		in = in[3:]
	}
	return append(file, make([]byte, pad)...)
}

// scanSeeds are the FuzzScan seeds: (input, mode). Bit 0 of mode selects a
// recipe, bits 1-2 the zero padding, bits 3-5 the start offset.
func scanSeeds() [][2]any {
	var s [][2]any
	add := func(in []byte, mode byte) { s = append(s, [2]any{in, mode}) }
	good := AppendFrame(AppendFrame(nil, []byte("hello"), 0), []byte("world"), 29)
	add(nil, 0)
	add(good, 0)
	add(append(bytes.Clone(good), make([]byte, 40)...), 0)
	add(good[:len(good)-3], 0)
	bad := bytes.Clone(good)
	bad[3] ^= 1
	add(bad, 0) // corrupt: the second frame's watermark vouches for the first
	// Recipes: 4 frames, synced watermarks, a flip in frame 1.
	add([]byte{4, 5, 1, 'a', 'a', 'a', 'a', 'a', 7, 1, 'b', 'b', 'b', 'b', 'b', 'b', 'b',
		3, 1, 'c', 'c', 'c', 9, 1, 'd', 'd', 'd', 'd', 'd', 'd', 'd', 'd', 'd', 35, 0, 0x20}, 1)
	// Same with watermark 0 everywhere: torn, not corrupt.
	add([]byte{4, 5, 0, 'a', 'a', 'a', 'a', 'a', 7, 0, 'b', 'b', 'b', 'b', 'b', 'b', 'b',
		3, 0, 'c', 'c', 'c', 9, 0, 'd', 'd', 'd', 'd', 'd', 'd', 'd', 'd', 'd', 35, 0, 0x20}, 1)
	// Truncated inside the last frame, then zero padding, start offset 8.
	add([]byte{3, 10, 1, '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 10, 2, 'q', 'q', 'q', 'q', 'q', 'q', 'q', 'q', 'q', 'q',
		2, 1, 'z', 'z', 80, 0, 0}, 1|2<<1|1<<3)
	return s
}

func FuzzScan(f *testing.F) {
	for _, s := range scanSeeds() {
		f.Add(s[0].([]byte), s[1].(byte))
	}
	f.Fuzz(func(t *testing.T, in []byte, mode byte) {
		data := in
		if mode&1 == 1 {
			data = buildRecipe(in, int(mode>>1&3)*16)
		}
		start := min(int64(mode>>3&7)*4, int64(len(data)))
		got, res, err := scanAll(t, data, start, int64(len(data)))
		want, wantRes, corruptAt := refScan(data, start)

		// Any error is a *corruption.Error, and exactly when the reference
		// says so, at the same offset.
		if corruptAt >= 0 {
			var ce *corruption.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, corruptAt, ce.Offset)
			require.Equal(t, "test.log", ce.Path)
			require.Equal(t, ScanResult{End: wantRes.End, Frames: wantRes.Frames}, res)
		} else {
			require.NoError(t, err)
			require.Equal(t, wantRes, res)
		}
		require.Equal(t, want, got)

		// End is a frame boundary: the frames tile [start, End).
		pos := start
		for _, fr := range got {
			require.Equal(t, pos, fr.Off)
			pos += HeaderSize + int64(len(fr.Payload))
		}
		require.Equal(t, pos, res.End)

		// NextFrame after End finds the first offset where the reference
		// sees a valid frame, whatever its watermark.
		wantNext := int64(-1)
		for z := res.End + 1; z < int64(len(data)); z++ {
			if _, _, ok := refFrame(data, z, MaxPayload); ok {
				wantNext = z
				break
			}
		}
		next, found, err := NextFrame(bytes.NewReader(data), "test.log", res.End, int64(len(data)))
		require.NoError(t, err)
		require.Equal(t, wantNext >= 0, found)
		if found {
			require.Equal(t, wantNext, next.Off)
			n, wm, _ := refFrame(data, wantNext, MaxPayload)
			require.Equal(t, wm, next.Watermark)
			require.Equal(t, data[wantNext+HeaderSize:wantNext+HeaderSize+n], next.Payload)
		}

		// Re-scanning [start, End) finds the same frames and nothing torn:
		// what a recovery keeps after truncating is clean.
		again, res2, err := scanAll(t, data[:res.End], start, res.End)
		require.NoError(t, err)
		require.Equal(t, got, again)
		require.Equal(t, ScanResult{End: res.End, Frames: res.Frames}, res2)
	})
}

// streamSeeds are the FuzzStreamReader seeds: (input, maxPayload).
func streamSeeds() [][2]any {
	good := AppendFrame(AppendFrame(nil, []byte("hello"), 0), []byte("world"), 29)
	bad := bytes.Clone(good)
	bad[30] ^= 1
	return [][2]any{
		{[]byte{}, uint16(0)},
		{good, uint16(0)},
		{good, uint16(4)},
		{good[:len(good)-1], uint16(0)},
		{good[:10], uint16(0)},
		{bad, uint16(0)},
		{append(bytes.Clone(good), make([]byte, 24)...), uint16(0)},
	}
}

func FuzzStreamReader(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add(s[0].([]byte), s[1].(uint16))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxPayload uint16) {
		limit := int(maxPayload)
		if limit == 0 {
			limit = MaxPayload
		}
		sr := NewStreamReader(bytes.NewReader(data), "test.log", 0, int(maxPayload))
		var got bytes.Buffer
		var err error
		for {
			var frame, payload []byte
			frame, payload, err = sr.Next()
			if err != nil {
				break
			}
			require.Equal(t, frame[HeaderSize:], payload)
			got.Write(frame)
			require.Equal(t, int64(got.Len()), sr.Offset())
		}
		// The frames read are exactly the input's prefix the reference
		// accepts; the reader stops with io.EOF only at the very end, and
		// otherwise with corruption at the first bad frame.
		var off int64
		for {
			n, _, ok := refFrame(data, off, limit)
			if !ok {
				break
			}
			off += HeaderSize + n
		}
		require.Equal(t, string(data[:off]), got.String())
		if off == int64(len(data)) {
			require.ErrorIs(t, err, io.EOF)
		} else {
			var ce *corruption.Error
			require.True(t, errors.As(err, &ce), "error %v", err)
			require.Equal(t, off, ce.Offset)
		}
	})
}

// TestFuzzCorpusCommitted keeps the seed corpora under testdata/fuzz in
// step with the seed lists above: with WAL_WRITE_FUZZ_CORPUS=1 it writes
// them, otherwise it checks that they are there, so `go test` without
// -fuzz also replays them.
func TestFuzzCorpusCommitted(t *testing.T) {
	write := os.Getenv("WAL_WRITE_FUZZ_CORPUS") == "1"
	check := func(target string, seeds [][2]any) {
		dir := filepath.Join("testdata", "fuzz", target)
		if write {
			require.NoError(t, os.MkdirAll(dir, 0o755))
		}
		for _, s := range seeds {
			var b bytes.Buffer
			b.WriteString("go test fuzz v1\n")
			for _, v := range s {
				switch v := v.(type) {
				case []byte:
					fmt.Fprintf(&b, "[]byte(%q)\n", v)
				case byte:
					fmt.Fprintf(&b, "byte(%q)\n", v)
				case uint16:
					fmt.Fprintf(&b, "uint16(%d)\n", v)
				}
			}
			sum := sha256.Sum256(b.Bytes())
			name := filepath.Join(dir, fmt.Sprintf("seed-%x", sum[:8]))
			if write {
				require.NoError(t, os.WriteFile(name, b.Bytes(), 0o644))
				continue
			}
			have, err := os.ReadFile(name)
			require.NoError(t, err, "seed corpus file missing: run with WAL_WRITE_FUZZ_CORPUS=1")
			require.Equal(t, b.String(), string(have))
		}
	}
	check("FuzzScan", scanSeeds())
	check("FuzzStreamReader", streamSeeds())
}

// TestScanSeedsCoverOutcomes makes sure the FuzzScan seeds start the fuzzer
// from each outcome: clean end, torn tail and corruption.
func TestScanSeedsCoverOutcomes(t *testing.T) {
	var clean, torn, corrupt int
	for _, s := range scanSeeds() {
		in, mode := s[0].([]byte), s[1].(byte)
		data := in
		if mode&1 == 1 {
			data = buildRecipe(in, int(mode>>1&3)*16)
		}
		start := min(int64(mode>>3&7)*4, int64(len(data)))
		_, res, corruptAt := refScan(data, start)
		switch {
		case corruptAt >= 0:
			corrupt++
		case res.Torn:
			torn++
		default:
			clean++
		}
	}
	t.Logf("seeds: %d clean, %d torn, %d corrupt", clean, torn, corrupt)
	require.Positive(t, clean)
	require.GreaterOrEqual(t, torn, 2)
	require.GreaterOrEqual(t, corrupt, 2)
}
