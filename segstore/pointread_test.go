package segstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// A point read walks a block file's block only up to its key. These tests
// pin what that must never cost: when the key's own record is damaged (its
// value, or its key so that the block seems not to hold it), the read fails
// with ErrCorrupt, never falling through to the older version an older
// segment holds, whether the frame's checksum tells (a flipped byte) or
// holds (a block written so: then the record's own checksum, and the whole
// block's check before absence is said, must tell); under a frame checksum
// that holds, the block's undamaged keys still read their values.
func TestPointReadOfDamagedRecordNeverFallsThrough(t *testing.T) {
	for _, c := range []struct {
		name       string
		damage     string // "value" or "key" of the victim's record
		validFrame bool   // rewrite the frame with a checksum that holds
	}{
		{"value", "value", false},
		{"key", "key", false},
		{"value-valid-frame", "value", true},
		{"key-valid-frame", "key", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, SegmentSize: 1 << 20, DisableCompression: true,
				Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 1.5, KeepWriteOrder: true}}
			s := mustOpen(t, "/db", o)
			key := func(i int) []byte { return fmt.Appendf(nil, "key-%05d", i) }
			rng := rand.New(rand.NewPCG(3, 4))
			// The older segment: every key's old value.
			for _, i := range rng.Perm(1000) {
				require.NoError(t, s.Put(key(i), fmt.Appendf(nil, "old-%d", i)))
			}
			require.NoError(t, s.Seal())
			// Two smaller segments of new values, similar in size to each
			// other and not to the first: the merge takes them alone.
			for half := 0; half < 2; half++ {
				for _, j := range rng.Perm(500) {
					i := half*500 + j
					require.NoError(t, s.Put(key(i), fmt.Appendf(nil, "new-%d", i)))
				}
				require.NoError(t, s.Seal())
			}
			did, err := s.mergeStep(context.Background(), false)
			require.NoError(t, err)
			require.True(t, did)
			segs := s.Segments()
			require.Len(t, segs, 2)
			newer := segs[0]
			if segs[1].Order > newer.Order {
				newer = segs[1]
			}
			require.NoError(t, s.Close())

			path, frames := bbFrames(t, mem, "/db", newer)
			victimFrame := frames[len(frames)/2]
			keys := bbBlockKeys(t, path, victimFrame)
			require.Greater(t, len(keys), 4)
			// A victim whose key ends in '0': damaged into '/', it still
			// sorts between its neighbours, so the block's order holds and
			// only the record's checksum tells.
			var victim string
			for _, k := range keys[1 : len(keys)-1] {
				if k[len(k)-1] == '0' {
					victim = k
					break
				}
			}
			require.NotEmpty(t, victim)

			// Find the victim's record in the (raw) block, and its key
			// and value in it.
			payload := victimFrame.Payload
			require.EqualValues(t, segment.CodecNone, payload[0])
			recOff := 0
			for pos := 1; pos < len(payload); {
				r, n, err := segment.DecodeRecord(payload[pos:])
				require.NoError(t, err)
				if string(r.Key) == victim {
					recOff = pos
					break
				}
				pos += n
			}
			require.NotZero(t, recOff)
			r, _, err := segment.DecodeRecord(payload[recOff:])
			require.NoError(t, err)
			keyAt := recOff + bytes.Index(payload[recOff:], r.Key)
			valOff := keyAt + len(r.Key)
			var at int
			mask := byte(0x01)
			if c.damage == "key" {
				at, mask = keyAt+len(r.Key)-1, '0'^'/'
			} else {
				at = valOff
			}
			if c.validFrame {
				damaged := append([]byte(nil), payload...)
				damaged[at] ^= mask
				bbRewriteFrame(t, mem, path, victimFrame.Off, damaged)
			} else {
				testutil.FlipByte(t, mem, path, victimFrame.Off+wal.HeaderSize+int64(at), mask)
			}

			s = mustOpen(t, "/db", o)
			defer s.Close()
			_, err = s.Get([]byte(victim))
			require.ErrorIs(t, err, ErrCorrupt, "the damaged key read something: an older version would be a wrong answer")
			read := 0
			for _, k := range keys {
				if k == victim {
					continue
				}
				got, err := s.Get([]byte(k))
				if !c.validFrame {
					// The frame's checksum fails: nothing in the block
					// is trusted, not even whole records.
					require.ErrorIs(t, err, ErrCorrupt, k)
					continue
				}
				// The frame holds and the other records are whole.
				require.NoError(t, err, k)
				var i int
				_, scanErr := fmt.Sscanf(k, "key-%05d", &i)
				require.NoError(t, scanErr)
				require.Equal(t, fmt.Sprintf("new-%d", i), string(got), k)
				read++
			}
			if c.validFrame {
				require.Positive(t, read, "no undamaged key of the block read")
			}
			rep, err := s.Verify(context.Background())
			require.NoError(t, err)
			require.Len(t, rep.Damaged, 1, "Verify must find the damaged block")
			require.ErrorIs(t, rep.Damaged[0], ErrCorrupt)
		})
	}
}
