package testutil

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// TestCrashRecorder: an image per sync event, cycling through every mode,
// with the acknowledged and begun counts of that moment; none while paused.
func TestCrashRecorder(t *testing.T) {
	mem := vfs.NewMem()
	r := NewCrashRecorder(mem, rand.New(rand.NewPCG(1, 2)))
	mem.SetSyncHook(r.Hook)
	require.NoError(t, mem.MkdirAll("/d"))
	modes := CrashModes()
	for i := range 2 * len(modes) {
		r.Started.Add(1)
		require.NoError(t, mem.WriteFile("/d/f", []byte{byte(i)}))
		require.NoError(t, mem.SyncDir("/d"))
		r.Acked.Add(1)
	}
	points := r.Points()
	require.NotEmpty(t, points)
	for i, p := range points {
		require.Equal(t, modes[i%len(modes)], p.Mode, "point %d", i)
		require.LessOrEqual(t, p.Lo, p.Hi)
		require.NotNil(t, p.FS)
	}
	n := len(points)
	r.SetMem(nil)
	require.NoError(t, mem.SyncDir("/d"))
	require.Len(t, r.Points(), n, "a paused recorder takes no image")
}

// TestFramesAndFlip: Frames lists what AppendFrame wrote, payloads owned by
// the caller; FlipByte changes exactly the byte asked, and a flipped last
// frame ends the list (a torn tail, not an error).
func TestFramesAndFlip(t *testing.T) {
	var data []byte
	data = wal.AppendFrame(data, []byte("one"), 0)
	data = wal.AppendFrame(data, []byte("two"), 0)
	frames := Frames(t, data, "f", 0)
	require.Len(t, frames, 2)
	require.Equal(t, "one", string(frames[0].Payload))
	require.Equal(t, "two", string(frames[1].Payload))
	require.Equal(t, frames[0].Size(), frames[1].Off)

	mem := vfs.NewMem()
	require.NoError(t, mem.WriteFile("/f", data))
	FlipByte(t, mem, "/f", frames[1].Off+wal.HeaderSize, 0x01)
	got, err := mem.ReadFile("/f")
	require.NoError(t, err)
	require.Equal(t, data[frames[1].Off+wal.HeaderSize]^0x01, got[frames[1].Off+wal.HeaderSize])
	require.Len(t, Frames(t, got, "f", 0), 1, "the damaged frame ends the list")
}
