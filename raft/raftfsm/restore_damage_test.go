package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// Every damaged container is refused with an error matching ErrBadSnapshot
// (issue 28 item 5: about 45% of flipped or cut bytes inside a segment the
// node copies were refused with an error matching segstore.ErrCorrupt
// only), and the state and applied index are unchanged. Every byte
// position of a small snapshot is flipped, and the container cut there.
func TestRestoreEveryDamageIsBadSnapshot(t *testing.T) {
	mem := vfs.NewMem()
	a := openFSM(t, mem, "/a")
	defer a.Close()
	rng := rand.New(rand.NewPCG(28, 5))
	idx := uint64(1)
	for range 2 {
		for range 4 {
			resp := a.Apply(cmdLog(idx, func(c *Command) {
				k := fmt.Appendf(nil, "k%02d", rng.IntN(20))
				c.Put(k, bytes.Repeat([]byte{byte(idx)}, 1+rng.IntN(12)))
				if rng.IntN(3) == 0 {
					c.Delete(fmt.Appendf(nil, "k%02d", rng.IntN(20)))
				}
			}))
			require.Nil(t, resp)
			idx++
		}
		require.NoError(t, a.Store().Seal())
	}
	data := persist(t, a)
	require.GreaterOrEqual(t, len(a.Store().Segments()), 2)
	t.Logf("container: %d bytes, %d segments", len(data), len(a.Store().Segments()))

	b := openFSM(t, mem, "/b")
	defer b.Close()
	fill(t, b, rand.New(rand.NewPCG(7, 7)), 1, 10)
	keep := contents(t, b.Store())
	keepIdx := b.AppliedIndex()
	stride := 1
	if testing.Short() {
		stride = 7
	}
	var corruptToo int
	check := func(what string, d []byte) {
		t.Helper()
		err := b.Restore(io.NopCloser(bytes.NewReader(d)))
		require.Error(t, err, what)
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: %v: does not match ErrBadSnapshot", what, err)
		}
		if errors.Is(err, segstore.ErrCorrupt) {
			corruptToo++
		}
		require.Equal(t, keepIdx, b.AppliedIndex(), what)
		if !equalMaps(keep, contents(t, b.Store())) {
			t.Fatalf("%s: the state changed", what)
		}
	}
	for p := 0; p < len(data); p += stride {
		for _, mask := range []byte{0x01, 0x80} {
			d := bytes.Clone(data)
			d[p] ^= mask
			check(fmt.Sprintf("flip %#x at %d of %d", mask, p, len(data)), d)
		}
		check(fmt.Sprintf("cut at %d of %d", p, len(data)), data[:p])
	}
	t.Logf("%d refusals also match segstore.ErrCorrupt", corruptToo)
	require.NoError(t, b.Restore(io.NopCloser(bytes.NewReader(data))))
	require.Equal(t, contents(t, a.Store()), contents(t, b.Store()))
}
