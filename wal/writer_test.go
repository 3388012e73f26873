package wal

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// testFile wraps a vfs.File to count syncs, slow them down (so that groups
// form as they would on a real disk), block them on demand and inject
// errors.
type testFile struct {
	vfs.File
	syncs     atomic.Int64
	writes    atomic.Int64
	syncDelay time.Duration
	// syncHook, if set, runs at the start of every Sync with its 1-based
	// number; a non-nil result is returned as the sync's error.
	syncHook  func(n int64) error
	writeHook func(n int64) error
}

func (f *testFile) Sync() error {
	n := f.syncs.Add(1)
	if f.syncHook != nil {
		if err := f.syncHook(n); err != nil {
			return err
		}
	}
	if f.syncDelay > 0 {
		time.Sleep(f.syncDelay) // the fake disk's latency, not the writer's
	}
	return f.File.Sync()
}

func (f *testFile) WriteAt(p []byte, off int64) (int, error) {
	n := f.writes.Add(1)
	if f.writeHook != nil {
		if err := f.writeHook(n); err != nil {
			return 0, err
		}
	}
	return f.File.WriteAt(p, off)
}

func newMemFile(t testing.TB) (*vfs.Mem, *testFile) {
	t.Helper()
	fs := vfs.NewMem()
	f, err := fs.Create("/live.log")
	require.NoError(t, err)
	require.NoError(t, fs.SyncDir("/")) // so that crash images keep the file
	return fs, &testFile{File: f}
}

// fileFrames scans the whole file.
func fileFrames(t testing.TB, f vfs.File, start int64) ([]frameRec, ScanResult) {
	t.Helper()
	size, err := f.Size()
	require.NoError(t, err)
	var got []frameRec
	res, err := Scan(f, "test.log", start, size, func(off int64, p []byte) error {
		got = append(got, frameRec{off, string(p)})
		return nil
	})
	require.NoError(t, err)
	return got, res
}

func TestWriterGroupCommit(t *testing.T) {
	const (
		goroutines = 32
		perG       = 40
		start      = 16 // a file header the writer starts after
	)
	_, f := newMemFile(t)
	f.syncDelay = 200 * time.Microsecond
	var (
		published  [][]string // payloads of each Publish call
		inPublish  atomic.Bool
		concurrent atomic.Bool
	)
	w := NewWriter(f, "test.log", start, start, Options{Publish: func(reqs []*Request) {
		if inPublish.Swap(true) {
			concurrent.Store(true)
		}
		var g []string
		for _, r := range reqs {
			g = append(g, string(r.Payload))
		}
		published = append(published, g)
		inPublish.Store(false)
	}})

	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				p := []byte(fmt.Sprintf("g%02d-%04d;", g, i))
				req := &Request{Payload: p, Sync: true}
				if err := w.Commit(req); err != nil {
					errs <- err
					return
				}
				// Committed and synced: the bytes are at req.Offset and durable.
				if w.SyncedOffset() < req.Offset+int64(len(p)) {
					errs <- fmt.Errorf("synced %d < end %d", w.SyncedOffset(), req.Offset+int64(len(p)))
					return
				}
				got := make([]byte, len(p))
				if _, err := f.ReadAt(got, req.Offset); err != nil || !bytes.Equal(got, p) {
					errs <- fmt.Errorf("payload at %d: %q, %v", req.Offset, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.False(t, concurrent.Load(), "Publish ran concurrently")

	commits := int64(goroutines * perG)
	syncs := f.syncs.Load()
	t.Logf("%d commits, %d syncs, %d groups (%.1f commits per sync)", commits, syncs, len(published), float64(commits)/float64(syncs))
	require.Less(t, syncs*4, commits, "group commit should share syncs")
	require.Equal(t, int64(len(published)), syncs, "one sync per group")
	require.Equal(t, int64(len(published)), f.writes.Load(), "one write per group")

	// The file holds one frame per group, in Publish order.
	frames, res := fileFrames(t, f, start)
	require.False(t, res.Torn)
	require.Equal(t, w.Offset(), res.End)
	require.Equal(t, w.Offset(), w.SyncedOffset())
	require.Len(t, frames, len(published))
	next := make([]int, goroutines)
	for i, fr := range frames {
		require.Equal(t, stringsJoin(published[i]), fr.Payload, "frame %d", i)
		for _, p := range published[i] {
			var g, n int
			_, err := fmt.Sscanf(p, "g%02d-%04d;", &g, &n)
			require.NoError(t, err)
			require.Equal(t, next[g], n, "goroutine %d's commits out of order", g)
			next[g]++
		}
	}
	for g := range goroutines {
		require.Equal(t, perG, next[g])
	}
}

func stringsJoin(s []string) string {
	var b bytes.Buffer
	for _, x := range s {
		b.WriteString(x)
	}
	return b.String()
}

func TestWriterWatermarks(t *testing.T) {
	_, f := newMemFile(t)
	w := NewWriter(f, "test.log", 0, 0, Options{})
	require.NoError(t, w.Commit(&Request{Payload: []byte("a")}))
	require.NoError(t, w.Commit(&Request{Payload: []byte("b"), Sync: true}))
	synced := w.SyncedOffset()
	require.NoError(t, w.Commit(&Request{Payload: []byte("c")}))
	require.NoError(t, w.Commit(&Request{Payload: []byte("d")}))
	frames, _ := fileFrames(t, f, 0)
	require.Len(t, frames, 4)
	wantWM := []int64{0, 0, synced, synced}
	for i, fr := range frames {
		hdr := make([]byte, HeaderSize)
		_, err := f.ReadAt(hdr, fr.Off)
		require.NoError(t, err)
		require.Equal(t, wantWM[i], int64(decodeHeader(hdr).watermark), "frame %d", i)
	}
	require.Equal(t, int64(1), f.syncs.Load())
}

func TestWriterSyncAndEmptyRequests(t *testing.T) {
	_, f := newMemFile(t)
	var publishedN int
	w := NewWriter(f, "test.log", 8, 8, Options{Publish: func(reqs []*Request) { publishedN += len(reqs) }})

	// Nothing written: Sync is free.
	require.NoError(t, w.Sync())
	require.Equal(t, int64(0), f.syncs.Load())

	require.NoError(t, w.Commit(&Request{Payload: []byte("abc")}))
	require.Equal(t, int64(8+HeaderSize+3), w.Offset())
	require.Equal(t, int64(8), w.SyncedOffset())
	require.NoError(t, w.Sync())
	require.Equal(t, int64(1), f.syncs.Load())
	require.Equal(t, w.Offset(), w.SyncedOffset())
	require.NoError(t, w.Sync()) // nothing new: no fsync
	require.Equal(t, int64(1), f.syncs.Load())

	// Empty payloads take no space; with Sync they make what precedes durable.
	require.NoError(t, w.Commit(&Request{Payload: []byte("de")}))
	end := w.Offset()
	empty := &Request{Sync: true}
	require.NoError(t, w.Commit(empty))
	require.Equal(t, end, empty.Offset)
	require.Equal(t, end, w.Offset())
	require.Equal(t, end, w.SyncedOffset())
	require.Equal(t, int64(2), f.syncs.Load())
	require.NoError(t, w.Commit(&Request{})) // no sync needed, no write
	require.Equal(t, int64(2), f.syncs.Load())
	require.Equal(t, int64(2), f.writes.Load())
	require.Equal(t, 4, publishedN)

	err := w.Commit(&Request{Payload: make([]byte, MaxPayload+1)})
	require.ErrorIs(t, err, ErrPayloadTooLarge)
	require.NoError(t, w.Err(), "an oversized request does not fail the writer")

	frames, res := fileFrames(t, f, 8)
	require.Equal(t, []frameRec{{8, "abc"}, {8 + HeaderSize + 3, "de"}}, frames)
	require.Equal(t, end, res.End)
}

func TestWriterZeroAhead(t *testing.T) {
	_, f := newMemFile(t)
	const start, ahead, limit = 8, 4096, 10000
	w := NewWriter(f, "test.log", start, start, Options{ZeroAhead: ahead, ZeroLimit: limit})
	size := func() int64 {
		n, err := f.Size()
		require.NoError(t, err)
		return n
	}

	// A group nobody syncs writes its frame only: bulk loads write nothing twice.
	require.NoError(t, w.Commit(&Request{Payload: []byte("abc")}))
	require.Equal(t, w.Offset(), size())

	// A synced group fills ZeroAhead bytes past its end.
	require.NoError(t, w.Commit(&Request{Payload: []byte("de"), Sync: true}))
	filledTo := w.Offset() + ahead
	require.Equal(t, filledTo, size())

	// While more than half of the fill is left, synced groups write their
	// frame only, over the zeros.
	writes := f.writes.Load()
	var want []frameRec
	for w.Offset()+HeaderSize+100+ahead/2 <= filledTo {
		req := &Request{Payload: bytes.Repeat([]byte{'s'}, 100), Sync: true}
		require.NoError(t, w.Commit(req))
		want = append(want, frameRec{req.Offset - HeaderSize, string(req.Payload)})
		require.Equal(t, filledTo, size(), "refilled with %d bytes of the fill left", filledTo-w.Offset())
	}
	require.Greater(t, f.writes.Load()-writes, int64(10), "the loop ran")

	// The group that leaves less than half refills, but never past ZeroLimit.
	refills := 0
	for w.Offset() < limit+1000 {
		before := size()
		req := &Request{Payload: bytes.Repeat([]byte{'t'}, 500), Sync: true}
		require.NoError(t, w.Commit(req))
		want = append(want, frameRec{req.Offset - HeaderSize, string(req.Payload)})
		end := w.Offset()
		wantSize := max(before, end)
		if end+ahead/2 > before {
			wantSize = max(end, min(int64(limit), end+ahead))
			refills++
		}
		require.Equal(t, wantSize, size(), "after a group ending at %d, with %d written before it", end, before)
	}
	require.Greater(t, refills, 1)

	// Zeros never land on data: every frame reads back, and the scan ends
	// cleanly at the data's end, past which only zeros remain.
	frames, res := fileFrames(t, f, start)
	require.Equal(t, w.Offset(), res.End)
	require.False(t, res.Torn)
	require.Equal(t, want, frames[2:])
}

func TestWriterConcurrentSyncCalls(t *testing.T) {
	_, f := newMemFile(t)
	f.syncDelay = 100 * time.Microsecond
	w := NewWriter(f, "test.log", 0, 0, Options{})
	var wg sync.WaitGroup
	var failures atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := range 30 {
				req := &Request{Payload: []byte(fmt.Sprintf("%d.%d", g, i))}
				if w.Commit(req) != nil {
					failures.Add(1)
					return
				}
				if g%2 == 0 {
					end := req.Offset + int64(len(req.Payload))
					if w.Sync() != nil || w.SyncedOffset() < end {
						failures.Add(1)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, failures.Load())
	t.Logf("%d syncs for %d Sync calls", f.syncs.Load(), 8*30)
	require.Less(t, f.syncs.Load(), int64(8*30))
	frames, _ := fileFrames(t, f, 0)
	n := 0
	for _, fr := range frames {
		n += len(fr.Payload)
	}
	require.Positive(t, n)
}

func TestWriterMaxGroupBytes(t *testing.T) {
	_, f := newMemFile(t)
	f.syncDelay = 200 * time.Microsecond
	w := NewWriter(f, "test.log", 0, 0, Options{MaxGroupBytes: 100})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 20 {
				size := 40
				if g == 0 {
					size = 300 // larger than a group: a group alone
				}
				_ = w.Commit(&Request{Payload: bytes.Repeat([]byte{'a' + byte(g)}, size), Sync: true})
			}
		})
	}
	wg.Wait()
	require.NoError(t, w.Err())
	frames, _ := fileFrames(t, f, 0)
	for _, fr := range frames {
		if len(fr.Payload) > 100 {
			require.Equal(t, 300, len(fr.Payload), "only a single oversized request may exceed the limit")
		}
	}
}

// TestWriterHandsOffLeadership checks that a leader leaves once its own
// group is done instead of serving requests that queued behind it.
func TestWriterHandsOffLeadership(t *testing.T) {
	_, f := newMemFile(t)
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	inSync := make(chan int64, 2)
	f.syncHook = func(n int64) error {
		inSync <- n
		switch n {
		case 1:
			<-gate1
		case 2:
			<-gate2
		}
		return nil
	}
	w := NewWriter(f, "test.log", 0, 0, Options{})
	aDone := make(chan error, 1)
	go func() { aDone <- w.Commit(&Request{Payload: []byte("A"), Sync: true}) }()
	require.Equal(t, int64(1), <-inSync) // A leads group 1 and is in its sync
	bDone := make(chan error, 1)
	go func() { bDone <- w.Commit(&Request{Payload: []byte("B"), Sync: true}) }()
	// B is queued behind the in-flight group (it cannot be written yet).
	require.Eventually(t, func() bool { return w.g.Queued() == 1 }, 5*time.Second, time.Millisecond)
	close(gate1)
	require.Equal(t, int64(2), <-inSync) // B leads group 2 and is in its sync...
	select {
	case err := <-aDone: // ...while A has already returned.
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the first leader did not return while the next group was in flight")
	}
	close(gate2)
	require.NoError(t, <-bDone)
}

func TestWriterSyncFailureIsFailStop(t *testing.T) {
	_, f := newMemFile(t)
	f.syncDelay = 50 * time.Microsecond
	boom := errors.New("injected EIO")
	const failAt = 5
	f.syncHook = func(n int64) error {
		if n >= failAt {
			return boom
		}
		return nil
	}
	var publishedAfterFailure atomic.Bool
	w := NewWriter(f, "test.log", 0, 0, Options{Publish: func([]*Request) {
		if f.syncs.Load() >= failAt {
			publishedAfterFailure.Store(true)
		}
	}})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				err := w.Commit(&Request{Payload: []byte(fmt.Sprintf("%d.%d", g, i)), Sync: true})
				if err != nil {
					if !errors.Is(err, ErrFailed) || !errors.Is(err, boom) {
						t.Errorf("error %v does not match ErrFailed and the cause", err)
					}
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(failAt), f.syncs.Load(), "fsync must not be retried after a failure")
	require.False(t, publishedAfterFailure.Load(), "a failed group must not be published")
	require.Positive(t, failed.Load())
	require.ErrorIs(t, w.Err(), ErrFailed)
	require.ErrorIs(t, w.Err(), boom)
	require.ErrorIs(t, w.Commit(&Request{Payload: []byte("x")}), ErrFailed)
	require.ErrorIs(t, w.Commit(&Request{Payload: []byte("x"), Sync: true}), ErrFailed)
	require.ErrorIs(t, w.Sync(), ErrFailed)
	require.Equal(t, int64(failAt), f.syncs.Load())
}

func TestWriterWriteFailureIsFailStop(t *testing.T) {
	_, f := newMemFile(t)
	boom := errors.New("injected ENOSPC")
	f.writeHook = func(n int64) error {
		if n == 3 {
			return boom
		}
		return nil
	}
	w := NewWriter(f, "test.log", 0, 0, Options{})
	require.NoError(t, w.Commit(&Request{Payload: []byte("1")}))
	require.NoError(t, w.Commit(&Request{Payload: []byte("2")}))
	off := w.Offset()
	err := w.Commit(&Request{Payload: []byte("3"), Sync: true})
	require.ErrorIs(t, err, ErrFailed)
	require.ErrorIs(t, err, boom)
	require.Zero(t, f.syncs.Load(), "no sync after a failed write")
	require.Equal(t, off, w.Offset())
	require.ErrorIs(t, w.Commit(&Request{Payload: []byte("4")}), ErrFailed)
	require.ErrorIs(t, w.Sync(), ErrFailed)
	require.Equal(t, int64(3), f.writes.Load())
}

// TestWriterCrash runs concurrent committers on the strict in-memory file
// system and takes a crash image, in a random crash mode, at every sync
// point (just before each fsync, with the group written but not durable) and
// after every group is published. For each image it checks that Scan never
// reports corruption for what a crash can leave, that every commit
// acknowledged as synced before the image survives, and that what survives
// is a prefix of the final file (never a later group without an earlier one).
func TestWriterCrash(t *testing.T) {
	modes := []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset, vfs.CrashGarbageTail, vfs.CrashTornSectors}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 99))
		fs, f := newMemFile(t)
		f.syncDelay = 100 * time.Microsecond
		prealloc := seed%2 == 1
		if prealloc {
			require.NoError(t, f.Preallocate(0, 128<<10))
		}
		var (
			mu     sync.Mutex
			acked  = map[string]bool{} // synced commits
			images []string            // what each crash image holds, in file order
			order  []string            // payloads in Publish order
		)
		snap := func() {
			// Only the leader calls this, so rng needs no lock.
			mu.Lock()
			ackedNow := maps.Clone(acked)
			mu.Unlock()
			mode := modes[rng.IntN(len(modes))]
			img, err := checkCrashImage(fs.CrashClone(mode, rng), ackedNow)
			if err != nil {
				t.Errorf("seed %d, crash image %d, mode %v: %v", seed, len(images), mode, err)
			}
			images = append(images, img)
		}
		f.syncHook = func(int64) error { snap(); return nil }
		// Seeds 2 and 3 write zeros ahead of the data, as live files do.
		zeroAhead := int64(0)
		if seed >= 2 {
			zeroAhead = 4096
		}
		w := NewWriter(f, "test.log", 0, 0, Options{ZeroAhead: zeroAhead, ZeroLimit: 128 << 10, Publish: func(reqs []*Request) {
			for _, r := range reqs {
				order = append(order, string(r.Payload))
			}
			snap()
		}})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(g)))
				for i := range 30 {
					p := fmt.Sprintf("<%d.%d.%s>", g, i, bytes.Repeat([]byte{'x'}, r.IntN(300)))
					durable := r.IntN(3) > 0
					if err := w.Commit(&Request{Payload: []byte(p), Sync: durable}); err != nil {
						t.Error(err)
						return
					}
					if durable {
						mu.Lock()
						acked[p] = true
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
		frames, _ := fileFrames(t, f, 0)
		var all string
		for _, fr := range frames {
			all += fr.Payload
		}
		require.Equal(t, stringsJoin(order), all)
		for i, img := range images {
			require.True(t, strings.HasPrefix(all, img), "crash image %d is not a prefix of the file", i)
		}
		t.Logf("seed %d (prealloc %v, zero ahead %d): %d crash images checked, %d syncs", seed, prealloc, zeroAhead, len(images), f.syncs.Load())
	}
}

// checkCrashImage scans the live file of a crash image and returns its
// payloads in file order.
func checkCrashImage(img *vfs.Mem, acked map[string]bool) (string, error) {
	f, err := img.Open("/live.log")
	if err != nil {
		return "", err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return "", err
	}
	found := map[string]bool{}
	var all bytes.Buffer
	_, err = Scan(f, "live.log", 0, size, func(_ int64, p []byte) error {
		all.Write(p)
		for _, rec := range bytes.SplitAfter(p, []byte(">")) {
			if len(rec) > 0 {
				found[string(rec)] = true
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("a crash image must never look corrupt: %w", err)
	}
	for p := range acked {
		if !found[p] {
			return "", fmt.Errorf("acknowledged synced commit %.20q lost", p)
		}
	}
	return all.String(), nil
}
