package raftfsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// reseal recomputes the header checksum and the trailer of a container
// whose header was edited.
func reseal(d []byte) []byte {
	count := int(binary.LittleEndian.Uint32(d[20:]))
	hdrEnd := containerFixed + 16*count
	binary.LittleEndian.PutUint64(d[hdrEnd:], xxhash.Sum64(d[:hdrEnd]))
	binary.LittleEndian.PutUint64(d[len(d)-8:], xxhash.Sum64(d[:len(d)-8]))
	return d
}

// A container whose header's applied index disagrees with its segments
// (well-formed, checksums right) is refused, but only after ReplaceAll has
// installed it: the store's state changed, FSM.applied did not.
func TestBreakRestoreAppliedMismatchChangesState(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	mem := vfs.NewMem()
	a := openFSM(t, mem, "/a")
	defer a.Close()
	fill(t, a, rng, 1, 60)
	data := persist(t, a)
	binary.LittleEndian.PutUint64(data[12:], 999) // applied index in the header
	data = reseal(data)

	b := openFSM(t, mem, "/b")
	defer b.Close()
	fill(t, b, rand.New(rand.NewPCG(7, 7)), 1, 30)
	keep := contents(t, b.Store())
	keepIdx := b.AppliedIndex()
	_, _ = keep, keepIdx
	err := b.Restore(io.NopCloser(bytes.NewReader(data)))
	require.ErrorIs(t, err, ErrBadSnapshot)
	// The mismatch is only found once the segments are installed: then at
	// least the FSM must agree with its store and stop applying.
	stored, rerr := readApplied(b.Store())
	require.NoError(t, rerr)
	require.Equal(t, stored, b.AppliedIndex(), "FSM.AppliedIndex disagrees with the store after a failed Restore")
	resp := b.Apply(cmdLog(stored+1, func(c *Command) { c.Put([]byte("q"), []byte("1")) }))
	require.ErrorIs(t, resp.(error), ErrStopped, "the FSM goes on applying onto a state raft did not ask for")
}

// The same with an empty container (count 0) announcing applied 5: the
// store is wiped and Restore fails.
func TestBreakRestoreEmptyContainerWipes(t *testing.T) {
	mem := vfs.NewMem()
	b := openFSM(t, mem, "/b")
	defer b.Close()
	fill(t, b, rand.New(rand.NewPCG(7, 7)), 1, 30)
	keep := contents(t, b.Store())
	d := make([]byte, 0, 64)
	d = append(d, containerMagic...)
	d = binary.LittleEndian.AppendUint32(d, containerVersion)
	d = binary.LittleEndian.AppendUint64(d, 5)
	d = binary.LittleEndian.AppendUint32(d, 0)
	d = binary.LittleEndian.AppendUint64(d, xxhash.Sum64(d))
	d = binary.LittleEndian.AppendUint64(d, xxhash.Sum64(d))
	err := b.Restore(io.NopCloser(bytes.NewReader(d)))
	require.ErrorIs(t, err, ErrBadSnapshot)
	require.True(t, equalMaps(keep, contents(t, b.Store())), "Restore failed but wiped the store (%d keys before)", len(keep))
}

// A merge that commits between restore's scan of the local segments and
// ReplaceAll's own plan makes a valid container fail to restore.
func TestBreakRestoreRacesMergeCommit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mem := vfs.NewMem()
	f, err := Open("/a", &Options{Store: &segstore.Options{FS: mem, SegmentSize: 16 << 10,
		Merge: segstore.MergeOptions{Disable: true, MinRun: 2}}})
	require.NoError(t, err)
	defer f.Close()
	idx := fill(t, f, rng, 1, 200)
	_ = idx
	want := contents(t, f.Store())
	data := persist(t, f) // every segment of the container is local now
	require.GreaterOrEqual(t, len(f.Store().Segments()), 2)

	var armed atomic.Bool
	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	mem.SetSyncHook(func(ev vfs.SyncEvent) {
		if ev.Before && ev.Kind == vfs.FileSync && strings.Contains(ev.Name, "MANIFEST") && armed.CompareAndSwap(true, false) {
			blocked <- struct{}{}
			<-release
		}
	})
	armed.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = f.Store().Compact(context.Background())
	}()
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Skip("the merge never reached its manifest commit (file names?)")
	}
	go func() { time.Sleep(200 * time.Millisecond); close(release) }()
	err = f.Restore(io.NopCloser(bytes.NewReader(data)))
	wg.Wait()
	mem.SetSyncHook(nil)
	require.NoError(t, err, "a valid container of the node's own state failed to restore")
	require.Equal(t, want, contents(t, f.Store()))
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// rebuild makes a container from (digest, size, data) parts.
func rebuild(applied uint64, parts [][3]any) []byte {
	d := []byte(containerMagic)
	d = binary.LittleEndian.AppendUint32(d, containerVersion)
	d = binary.LittleEndian.AppendUint64(d, applied)
	d = binary.LittleEndian.AppendUint32(d, uint32(len(parts)))
	for _, p := range parts {
		d = binary.LittleEndian.AppendUint64(d, p[0].(uint64))
		d = binary.LittleEndian.AppendUint64(d, p[1].(uint64))
	}
	d = binary.LittleEndian.AppendUint64(d, xxhash.Sum64(d))
	for _, p := range parts {
		d = append(d, p[2].([]byte)...)
	}
	return binary.LittleEndian.AppendUint64(d, xxhash.Sum64(d))
}

func TestBreakRestoreGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	mem := vfs.NewMem()
	a := openFSM(t, mem, "/a")
	defer a.Close()
	fill(t, a, rng, 1, 120)
	data := persist(t, a)
	want := contents(t, a.Store())
	count := int(binary.LittleEndian.Uint32(data[20:]))
	require.GreaterOrEqual(t, count, 2)
	applied := binary.LittleEndian.Uint64(data[12:])
	var parts [][3]any
	off := containerFixed + 16*count + 8
	for i := 0; i < count; i++ {
		dg := binary.LittleEndian.Uint64(data[containerFixed+16*i:])
		sz := binary.LittleEndian.Uint64(data[containerFixed+16*i+8:])
		parts = append(parts, [3]any{dg, sz, data[off : off+int(sz)]})
		off += int(sz)
	}
	require.Equal(t, data, rebuild(applied, parts))

	b := openFSM(t, mem, "/b")
	defer b.Close()
	fill(t, b, rand.New(rand.NewPCG(7, 7)), 1, 30)
	keep := contents(t, b.Store())
	refused := func(what string, d []byte) {
		t.Helper()
		require.Error(t, b.Restore(io.NopCloser(bytes.NewReader(d))), what)
		require.True(t, equalMaps(keep, contents(t, b.Store())), what)
	}
	// duplicated entries: the same state
	dup := append([][3]any{parts[0]}, parts...)
	dup = append(dup, parts[len(parts)-1])
	// valid prefix then random bytes
	for _, cut := range []int{30, containerFixed + 16*count + 8 + 10, len(data) / 2, len(data) - 20} {
		d := bytes.Clone(data[:cut])
		junk := make([]byte, len(data)-cut)
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		refused(fmt.Sprintf("random after %d", cut), append(d, junk...))
	}
	// a local digest with another size (the receiver holds it: restore a onto a)
	wrongSize := slices.Clone(parts)
	p0 := wrongSize[0]
	wrongSize[0] = [3]any{p0[0], p0[1].(uint64) + 1, append(bytes.Clone(p0[2].([]byte)), 0)}
	require.Error(t, a.Restore(io.NopCloser(bytes.NewReader(rebuild(applied, wrongSize)))))
	require.True(t, equalMaps(want, contents(t, a.Store())))
	// huge count, other version
	h := bytes.Clone(data[:containerFixed])
	binary.LittleEndian.PutUint32(h[20:], 0xffffffff)
	refused("huge count", h)
	v := bytes.Clone(data)
	binary.LittleEndian.PutUint32(v[8:], 2)
	refused("version 2", reseal(v))
	// and the duplicated one restores to a's state
	require.NoError(t, b.Restore(io.NopCloser(bytes.NewReader(rebuild(applied, dup)))))
	require.True(t, equalMaps(want, contents(t, b.Store())))
	require.Equal(t, applied, b.AppliedIndex())
}
