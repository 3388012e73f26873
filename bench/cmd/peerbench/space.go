package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/segkv/segkv/bench/peers"
)

// The space workload: for each key count of -spacen and each engine, load a
// fresh store in bulk mode with puts, overwrites and deletes, close it,
// reopen it and read at once ("reopened"), wait for the engine's background
// work ("settled") and read again, and report the disk the store takes
// against its live data (space amplification) and the bytes the process
// wrote against the bytes the caller wrote (write amplification).

// spaceValueSize is the size of every value the space workload writes.
const spaceValueSize = 200

// spaceRecord is the logical size of one live key and its value.
const spaceRecord = peers.ShortKeySize + spaceValueSize

// spaceMaxN bounds -spacen: the load's permutations hold key numbers as
// uint32.
const spaceMaxN = 1 << 32

// spacePoll is how often the settle wait asks the engine.
const spacePoll = 100 * time.Millisecond

// Space workload names, one per figure.
const (
	spaceLoad         = "space/load"             // s: first batch to the return of the last (synced)
	spaceSettle       = "space/settle"           // s: after the reopened reads, until no background work is left (engines that can tell)
	spaceLive         = "space/live"             // B: len(key)+len(value) summed over the live keys
	spaceDiskLoaded   = "space/disk_loaded"      // B: store directory after the load's Close, before settling
	spaceAmpLoaded    = "space/space_amp_loaded" // x: disk_loaded / live
	spaceDisk         = "space/disk"             // B: store directory after settling and Close
	spaceAmp          = "space/space_amp"        // x: disk / live
	spaceUser         = "space/user_written"     // B: key+value of every Put, key of every Delete
	spaceWrittenLoad  = "space/written_load"     // B: write_bytes of /proc/self/io from Open to the end of the load's Close (Linux)
	spaceWritten      = "space/written"          // B: the same from Open to the end of settling (Linux)
	spaceWriteAmpLoad = "space/write_amp_load"   // x: written_load / user_written (Linux)
	spaceWriteAmp     = "space/write_amp"        // x: written / user_written (Linux)
	spaceGetReopened  = "space/get_reopened"     // ops/s: Gets of live keys right after the reopen, 1 goroutine
	spaceScanReopened = "space/scan_reopened"    // ops/s (scans/s): forward scans then, 1 goroutine
	spaceGetSettled   = "space/get_settled"      // ops/s: Gets of live keys after settling
	spaceScanSettled  = "space/scan_settled"     // ops/s (scans/s): forward scans after settling
)

// spaceDeleted reports whether the load deletes key number i: every fourth.
func spaceDeleted(i uint64) bool { return i%4 == 3 }

// spaceLiveCount is the keys of [0, n) the load leaves.
func spaceLiveCount(n int) int { return n - n/4 }

// spaceLiveKey is the j-th live key number (j < spaceLiveCount(n)).
func spaceLiveKey(j uint64) uint64 { return j/3*4 + j%3 }

// The value generator: a JSON object with fixed field names, names, states
// and regions from small vocabularies, a few numbers, and a note of
// pseudo-words of two or three syllables from sixteen, cut to exactly
// spaceValueSize bytes, e.g.
//
//	{"id":12345,"v":2,"user":"dax.nash","status":"active","plan":"free","region":"eu-west","score":86067,"visits":4503,"ts":1788119234,"tags":["zone","amber"],"note":"ruti nemi vode bati loti dede tine "}
//
// Compressed in 4 KiB blocks (a table block) of consecutive values it comes
// out about 3x smaller with compress/flate (3.1x) and 2.0x with Snappy
// (Pebble's, goleveldb's and Badger's default); TestSpaceValue checks the
// flate figure.
var (
	spaceFirst    = []string{"ada", "bo", "cleo", "dax", "eli", "fay", "gus", "hana", "ivo", "jun", "kai", "lena", "milo", "nia", "otto", "pia"}
	spaceLast     = []string{"berg", "costa", "diaz", "eng", "fox", "gray", "hale", "ito", "jain", "kato", "lund", "moss", "nash", "okafor", "park", "quinn"}
	spaceStatus   = []string{"active", "idle", "suspended", "pending"}
	spacePlans    = []string{"free", "pro", "team", "enterprise"}
	spaceRegions  = []string{"eu-west", "eu-north", "us-east", "us-west", "ap-south", "ap-east", "sa-east", "af-south"}
	spaceTags     = []string{"alpha", "blue", "cache", "delta", "edge", "fast", "green", "host", "index", "jade", "kilo", "lime", "merge", "node", "orbit", "pixel", "quota", "red", "shard", "token", "unit", "vault", "wave", "xeno", "yield", "zone", "amber", "birch", "coral", "dune", "ember", "fjord"}
	spaceSyllable = []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ba", "de", "fi", "go", "hu", "ja", "pe", "zo"}
)

// spaceRand is splitmix64: deterministic, cheap, no allocation.
type spaceRand struct{ s uint64 }

func (r *spaceRand) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	x := r.s
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (r *spaceRand) pick(xs []string) string { return xs[r.next()%uint64(len(xs))] }

// spaceValue writes the value of key number i at the given version (1: the
// first put, 2: the overwrite) into dst[:0] (cap >= spaceValueSize avoids
// an allocation) and returns exactly spaceValueSize bytes.
func spaceValue(dst []byte, i, version uint64) []byte {
	r := spaceRand{s: i<<2 | version}
	r.next()
	d := dst[:0]
	d = append(d, `{"id":`...)
	d = strconv.AppendUint(d, i, 10)
	d = append(d, `,"v":`...)
	d = strconv.AppendUint(d, version, 10)
	d = append(d, `,"user":"`...)
	d = append(d, r.pick(spaceFirst)...)
	d = append(d, '.')
	d = append(d, r.pick(spaceLast)...)
	d = append(d, `","status":"`...)
	d = append(d, r.pick(spaceStatus)...)
	d = append(d, `","plan":"`...)
	d = append(d, r.pick(spacePlans)...)
	d = append(d, `","region":"`...)
	d = append(d, r.pick(spaceRegions)...)
	d = append(d, `","score":`...)
	d = strconv.AppendUint(d, r.next()%1_000_000, 10)
	d = append(d, `,"visits":`...)
	d = strconv.AppendUint(d, r.next()%10_000, 10)
	d = append(d, `,"ts":`...)
	d = strconv.AppendUint(d, 1_700_000_000+r.next()%100_000_000, 10)
	d = append(d, `,"tags":["`...)
	d = append(d, r.pick(spaceTags)...)
	d = append(d, `","`...)
	d = append(d, r.pick(spaceTags)...)
	d = append(d, `"],"note":"`...)
	// The fields above take at most 181 bytes (10-digit id), so the note
	// always has a few characters.
	for len(d) < spaceValueSize-2 {
		x := r.next()
		for k := 0; k < 2+int(x>>63); k++ {
			d = append(d, spaceSyllable[x&15]...)
			x >>= 4
		}
		d = append(d, ' ')
	}
	return append(d[:spaceValueSize-2], `"}`...)
}

// spaceLoadStats is what one load did.
type spaceLoadStats struct {
	puts, deletes int64
	userBytes     int64   // key+value of every put, key of every delete
	seconds       float64 // first batch to the return of the last
}

// spaceLoadStore runs the space workload's load on db: every key number of
// [0, n) put once in random key order (keys are hashes of the numbers, so
// the numbers in order are keys in random order), then put again with a new
// value in another random order (a seeded shuffle of the numbers), then
// every fourth deleted in a third order; batches of bs, unsynced but the
// last.
func spaceLoadStore(db peers.DB, n, bs int, seed uint64) (spaceLoadStats, error) {
	var st spaceLoadStats
	rng := rand.New(rand.NewPCG(seed, 0x5ace))
	over := make([]uint32, n)
	var dels []uint32
	for i := range over {
		over[i] = uint32(i)
		if spaceDeleted(uint64(i)) {
			dels = append(dels, uint32(i))
		}
	}
	rng.Shuffle(len(over), func(a, b int) { over[a], over[b] = over[b], over[a] })
	rng.Shuffle(len(dels), func(a, b int) { dels[a], dels[b] = dels[b], dels[a] })

	kbuf, vbuf := make([]byte, bs*peers.ShortKeySize), make([]byte, bs*spaceValueSize)
	keys, vals := make([][]byte, bs), make([][]byte, bs)
	// put writes key numbers number(0), ..., number(n-1) at version.
	put := func(version uint64, number func(j int) uint64, syncLast bool) error {
		for lo := 0; lo < n; lo += bs {
			hi := min(lo+bs, n)
			for j := lo; j < hi; j++ {
				x, i := j-lo, number(j)
				keys[x] = peers.ShortKey(kbuf[x*peers.ShortKeySize:], i)
				vals[x] = spaceValue(vbuf[x*spaceValueSize:x*spaceValueSize], i, version)
			}
			if err := db.Batch(keys[:hi-lo], vals[:hi-lo], syncLast && hi == n); err != nil {
				return fmt.Errorf("put (version %d) batch at %d of %d: %w", version, lo, n, err)
			}
			st.puts += int64(hi - lo)
		}
		return nil
	}
	start := time.Now()
	if err := put(1, func(j int) uint64 { return uint64(j) }, false); err != nil {
		return st, err
	}
	if err := put(2, func(j int) uint64 { return uint64(over[j]) }, len(dels) == 0); err != nil {
		return st, err
	}
	for lo := 0; lo < len(dels); lo += bs {
		hi := min(lo+bs, len(dels))
		for j := lo; j < hi; j++ {
			x := j - lo
			keys[x] = peers.ShortKey(kbuf[x*peers.ShortKeySize:], uint64(dels[j]))
		}
		if err := db.DeleteBatch(keys[:hi-lo], hi == len(dels)); err != nil {
			return st, fmt.Errorf("delete batch at %d of %d: %w", lo, len(dels), err)
		}
		st.deletes += int64(hi - lo)
	}
	st.seconds = time.Since(start).Seconds()
	st.userBytes = st.puts*spaceRecord + st.deletes*peers.ShortKeySize
	return st, nil
}

// spaceGetFor does Gets of uniformly random live keys on one goroutine for
// d, checks each finds a spaceValueSize-byte value, and returns the Gets
// done and the wall time.
func spaceGetFor(db peers.DB, n int, d time.Duration, seed uint64) (int64, time.Duration, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9e7))
	live := uint64(spaceLiveCount(n))
	var kb [peers.ShortKeySize]byte
	dst := make([]byte, 0, spaceValueSize)
	var ops int64
	start := time.Now()
	stop := start.Add(d)
	for {
		i := spaceLiveKey(rng.Uint64N(live))
		v, found, err := db.Get(peers.ShortKey(kb[:], i), dst)
		if err == nil && (!found || len(v) != spaceValueSize) {
			err = fmt.Errorf("key %d: found=%v, value of %d bytes; want %d", i, found, len(v), spaceValueSize)
		}
		if err != nil {
			return ops, time.Since(start), err
		}
		ops++
		if ops&63 == 0 && !time.Now().Before(stop) {
			return ops, time.Since(start), nil
		}
	}
}

// spaceLiveOrder is the live key numbers of [0, n) in key order.
func spaceLiveOrder(n int) []uint64 {
	all := peers.KeyOrder(n)
	live := all[:0]
	for _, i := range all {
		if !spaceDeleted(i) {
			live = append(live, i)
		}
	}
	return live
}

// spaceScanFor runs forward scans of up to limit keys from uniformly random
// live keys on one goroutine for d (at least one scan). Each scan's key and
// value are copied into reused buffers, as a caller consuming them would,
// and checked: the first key is the start key, every key follows the one
// before, every value has spaceValueSize bytes, the count is
// min(limit, keys from the start to the end) and the last key is the one of
// that rank, so a scan that is short, misplaced, unordered or returns a
// deleted key fails. With exact it also checks every key and value.
func spaceScanFor(db peers.DB, order []uint64, limit int, d time.Duration, exact bool, seed uint64) (scanStats, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5ca))
	var st scanStats
	var sb, want [peers.ShortKeySize]byte
	key, prev := make([]byte, 0, peers.ShortKeySize), make([]byte, 0, peers.ShortKeySize)
	value, wantVal := make([]byte, 0, spaceValueSize), make([]byte, 0, spaceValueSize)
	var rank, seen int
	var verr error
	visit := func(k, v []byte) {
		prev = append(prev[:0], key...)
		key = append(key[:0], k...)
		value = append(value[:0], v...)
		if verr == nil {
			switch {
			case len(value) != spaceValueSize:
				verr = fmt.Errorf("key %q: value of %d bytes, want %d", key, len(value), spaceValueSize)
			case seen == 0 || exact:
				if rank+seen >= len(order) {
					verr = fmt.Errorf("key %q is past the last key", key)
				} else if i := order[rank+seen]; !bytes.Equal(key, peers.ShortKey(want[:], i)) {
					verr = fmt.Errorf("key %d of the scan is %q, want %q", seen+1, key, want)
				} else if exact {
					if wantVal = spaceValue(wantVal, i, 2); !bytes.Equal(value, wantVal) {
						verr = fmt.Errorf("key %q: value %q, want %q", key, value, wantVal)
					}
				}
			case bytes.Compare(key, prev) <= 0:
				verr = fmt.Errorf("key %d of the scan (%q) out of order after %q", seen+1, key, prev)
			}
		}
		seen++
	}
	start := time.Now()
	stop := start.Add(d)
	for {
		rank, seen, verr = rng.IntN(len(order)), 0, nil
		wantN := min(limit, len(order)-rank)
		got, err := db.Scan(peers.ShortKey(sb[:], order[rank]), limit, false, visit)
		switch {
		case err != nil:
		case verr != nil:
			err = verr
		case got != seen:
			err = fmt.Errorf("the scan returned %d but visited %d keys", got, seen)
		case got != wantN:
			err = fmt.Errorf("visited %d keys, want %d", got, wantN)
		case !bytes.Equal(key, peers.ShortKey(want[:], order[rank+got-1])):
			err = fmt.Errorf("last key %q, want %q", key, want)
		}
		if err != nil {
			return st, fmt.Errorf("scan from key number %d (rank %d of %d live): %w", order[rank], rank, len(order), err)
		}
		st.scans++
		st.keys += int64(got)
		if !time.Now().Before(stop) {
			st.elapsed = time.Since(start)
			return st, nil
		}
	}
}

// spaceVerify checks, untimed, what the load left: random live keys have
// their second value, random deleted keys are gone, and a few scans match
// the live keys key by key and value by value.
func spaceVerify(db peers.DB, n int, order []uint64, limit int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0xc4e))
	var kb [peers.ShortKeySize]byte
	want := make([]byte, 0, spaceValueSize)
	for range 1000 {
		i := spaceLiveKey(rng.Uint64N(uint64(spaceLiveCount(n))))
		v, found, err := db.Get(peers.ShortKey(kb[:], i), nil)
		if err != nil {
			return err
		}
		if want = spaceValue(want, i, 2); !found || !bytes.Equal(v, want) {
			return fmt.Errorf("key %d: found=%v, value %q; want %q", i, found, v, want)
		}
	}
	if deleted := n - spaceLiveCount(n); deleted > 0 {
		for range 1000 {
			i := rng.Uint64N(uint64(deleted))*4 + 3
			if _, found, err := db.Get(peers.ShortKey(kb[:], i), nil); err != nil || found {
				return fmt.Errorf("deleted key %d: found=%v, err %v", i, found, err)
			}
		}
	}
	for range 20 {
		if _, err := spaceScanFor(db, order, limit, 0, true, rng.Uint64()); err != nil {
			return err
		}
	}
	return nil
}

// spaceRun is one engine's figures at one key count, before they become rows.
type spaceRun struct {
	load                 spaceLoadStats
	live                 int64
	diskLoaded, disk     int64
	settleSeconds        float64
	settleTimedOut       bool
	settler              bool  // the engine can tell when it has no background work
	written, writtenLoad int64 // bytes written to the storage layer; -1 where unknown
	getReopened          readStats
	scanReopened         scanStats
	getSettled           readStats
	scanSettled          scanStats
}

type readStats struct {
	ops     int64
	elapsed time.Duration
}

// space runs the space workload: key counts ascending, engines in run order
// within each, one store on disk at a time.
func (b *bench) space(ctx context.Context) ([]result, error) {
	var rows []result
	for _, n := range b.c.spaceN {
		order := spaceLiveOrder(n)
		for _, name := range b.c.engines {
			sr, err := b.spaceOne(ctx, name, n, order)
			if err != nil {
				return nil, fmt.Errorf("space n=%d %s: %w", n, name, err)
			}
			rows = append(rows, spaceRows(name, n, sr)...)
		}
	}
	return rows, nil
}

func (b *bench) spaceOne(ctx context.Context, name string, n int, order []uint64) (sr spaceRun, err error) {
	dir := filepath.Join(b.root, "space", strconv.Itoa(n), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sr, err
	}
	if !b.c.keep {
		defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	}
	e := b.engine[name]
	sr.live = int64(len(order)) * spaceRecord
	sr.written, sr.writtenLoad = -1, -1
	written0, ioOK := procWriteBytes()

	// The load, on a fresh store, then Close.
	err = labelled(ctx, name, "space/load", func(context.Context) error {
		db, err := e.Open(dir, peers.Bulk)
		if err != nil {
			return err
		}
		if sr.load, err = spaceLoadStore(db, n, b.c.batch, uint64(n)); err != nil {
			return errors.Join(err, db.Close())
		}
		if err := db.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		return nil
	})
	if err != nil {
		return sr, err
	}
	if w, ok := procWriteBytes(); ok && ioOK {
		sr.writtenLoad = w - written0
	}
	if sr.diskLoaded, err = dirSize(dir); err != nil {
		return sr, err
	}
	b.progress("%-6s n=%d %-9s load %.2f s (%d puts, %d deletes), %s on disk after Close (space amp %.2f)%s", "space", n, name,
		sr.load.seconds, sr.load.puts, sr.load.deletes, mib(sr.diskLoaded), float64(sr.diskLoaded)/float64(sr.live), writtenNote(sr.writtenLoad, sr.load.userBytes))

	// Reopen and read at once: no warm-up, the engine's background work
	// (merges, compactions) running or pending.
	var db peers.DB
	if err = labelled(ctx, name, "space/reopened", func(context.Context) error {
		var err error
		if db, err = e.Open(dir, peers.Bulk); err != nil {
			db = nil
			return err
		}
		sr.getReopened, sr.scanReopened, err = b.spaceReads(db, n, order, 1)
		return err
	}); err != nil {
		if db != nil {
			err = errors.Join(err, db.Close())
		}
		return sr, fmt.Errorf("reopened: %w", err)
	}
	defer func() {
		if db != nil {
			if cerr := db.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close: %w", cerr))
			}
		}
	}()
	b.progress("%-6s n=%d %-9s reopened: get %.0f ops/s, scan %.0f scans/s", "space", n, name,
		perSecond(sr.getReopened.ops, sr.getReopened.elapsed), perSecond(sr.scanReopened.scans, sr.scanReopened.elapsed))

	// Settle, where the engine can tell, within -space-settle.
	if st, ok := db.(peers.Settler); ok {
		sr.settler = true
		err = labelled(ctx, name, "space/settle", func(ctx context.Context) error {
			sctx, cancel := context.WithTimeout(ctx, b.c.spaceSettle)
			defer cancel()
			start := time.Now()
			err := st.Settle(sctx, spacePoll)
			sr.settleSeconds = time.Since(start).Seconds()
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				sr.settleTimedOut = true
				return nil
			}
			return err
		})
		if err != nil {
			return sr, fmt.Errorf("settle: %w", err)
		}
	}
	if w, ok := procWriteBytes(); ok && ioOK {
		sr.written = w - written0
	}
	switch {
	case !sr.settler:
		b.progress("%-6s n=%d %-9s no settle signal: the settled reads follow at once", "space", n, name)
	case sr.settleTimedOut:
		b.progress("%-6s n=%d %-9s settle TIMED OUT after %.2f s (-space-settle %v): background work still pending%s", "space", n, name,
			sr.settleSeconds, b.c.spaceSettle, writtenNote(sr.written, sr.load.userBytes))
	default:
		b.progress("%-6s n=%d %-9s settled in %.2f s%s", "space", n, name, sr.settleSeconds, writtenNote(sr.written, sr.load.userBytes))
	}

	// Read the settled store, check its contents (untimed), close it.
	err = labelled(ctx, name, "space/settled", func(context.Context) error {
		var err error
		if sr.getSettled, sr.scanSettled, err = b.spaceReads(db, n, order, 3); err != nil {
			return err
		}
		return spaceVerify(db, n, order, b.c.scanLen, 5)
	})
	if err != nil {
		return sr, fmt.Errorf("settled: %w", err)
	}
	cerr := db.Close()
	db = nil
	if cerr != nil {
		return sr, fmt.Errorf("close: %w", cerr)
	}
	if sr.disk, err = dirSize(dir); err != nil {
		return sr, err
	}
	b.progress("%-6s n=%d %-9s settled: get %.0f ops/s, scan %.0f scans/s; %s on disk after Close (space amp %.2f)", "space", n, name,
		perSecond(sr.getSettled.ops, sr.getSettled.elapsed), perSecond(sr.scanSettled.scans, sr.scanSettled.elapsed),
		mib(sr.disk), float64(sr.disk)/float64(sr.live))
	return sr, nil
}

// spaceReads measures Gets of live keys and then forward scans, each for
// -duration on one goroutine.
func (b *bench) spaceReads(db peers.DB, n int, order []uint64, seed uint64) (readStats, scanStats, error) {
	ops, d, err := spaceGetFor(db, n, b.c.duration, seed)
	if err != nil {
		return readStats{}, scanStats{}, fmt.Errorf("get: %w", err)
	}
	st, err := spaceScanFor(db, order, b.c.scanLen, b.c.duration, b.c.checkScans, seed+1)
	if err != nil {
		return readStats{}, scanStats{}, fmt.Errorf("scan: %w", err)
	}
	return readStats{ops, d}, st, nil
}

func perSecond(ops int64, d time.Duration) float64 { return float64(ops) / d.Seconds() }

// writtenNote is the progress lines' account of the bytes written.
func writtenNote(written, user int64) string {
	if written < 0 {
		return ""
	}
	return fmt.Sprintf(", %s written so far (write amp %.2f)", mib(written), float64(written)/float64(user))
}

// spaceRows turns one engine's figures at one key count into result rows.
func spaceRows(name string, n int, sr spaceRun) []result {
	amp := func(b int64) float64 { return float64(b) / float64(sr.live) }
	rows := []result{
		{Workload: spaceLoad, Unit: "s", Value: sr.load.seconds, Ops: sr.load.puts + sr.load.deletes, Seconds: sr.load.seconds},
	}
	if sr.settler {
		rows = append(rows, result{Workload: spaceSettle, Unit: "s", Value: sr.settleSeconds, Seconds: sr.settleSeconds, TimedOut: sr.settleTimedOut})
	}
	rows = append(rows,
		result{Workload: spaceLive, Unit: "B", Value: float64(sr.live)},
		result{Workload: spaceDiskLoaded, Unit: "B", Value: float64(sr.diskLoaded), DiskBytes: sr.diskLoaded},
		result{Workload: spaceAmpLoaded, Unit: "x", Value: amp(sr.diskLoaded)},
		result{Workload: spaceDisk, Unit: "B", Value: float64(sr.disk), DiskBytes: sr.disk},
		result{Workload: spaceAmp, Unit: "x", Value: amp(sr.disk)},
		result{Workload: spaceUser, Unit: "B", Value: float64(sr.load.userBytes)},
	)
	user := float64(sr.load.userBytes)
	if sr.writtenLoad >= 0 {
		rows = append(rows,
			result{Workload: spaceWrittenLoad, Unit: "B", Value: float64(sr.writtenLoad)},
			result{Workload: spaceWriteAmpLoad, Unit: "x", Value: float64(sr.writtenLoad) / user})
	}
	if sr.written >= 0 {
		rows = append(rows,
			result{Workload: spaceWritten, Unit: "B", Value: float64(sr.written)},
			result{Workload: spaceWriteAmp, Unit: "x", Value: float64(sr.written) / user})
	}
	get := func(w string, r readStats) result {
		return result{Workload: w, Unit: "ops/s", Value: perSecond(r.ops, r.elapsed), Ops: r.ops, Seconds: r.elapsed.Seconds()}
	}
	scan := func(w string, s scanStats) result {
		return result{Workload: w, Unit: "ops/s", Value: perSecond(s.scans, s.elapsed), Ops: s.scans, Seconds: s.elapsed.Seconds(),
			Keys: s.keys, KeysPerS: perSecond(s.keys, s.elapsed)}
	}
	rows = append(rows,
		get(spaceGetReopened, sr.getReopened), scan(spaceScanReopened, sr.scanReopened),
		get(spaceGetSettled, sr.getSettled), scan(spaceScanSettled, sr.scanSettled))
	for i := range rows {
		rows[i].Engine, rows[i].N = name, n
	}
	return rows
}

// spaceRow finds one engine's row of a figure at one key count.
func spaceRow(rows []result, workload string, n int, engine string) (result, bool) {
	for _, r := range rows {
		if r.Workload == workload && r.N == n && r.Engine == engine {
			return r, true
		}
	}
	return result{}, false
}

// writeSpaceTable writes one table per key count: a row per figure, a
// column per engine, and segkv/pebble when both ran.
func writeSpaceTable(w io.Writer, res *results) error {
	c := res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "\nspace: %d-byte keys, %d-byte JSON-like values (about 3x compressible: flate 3.1x, Snappy 2.0x on 4 KiB blocks), bulk mode, batches of %d,\n",
		peers.ShortKeySize, spaceValueSize, c.batch)
	b.WriteString("  unsynced but the last: every key put in random order, put again with a new value in another random order, then every fourth key\n")
	b.WriteString("  deleted (a third order). load: first batch to the return of the last. Close; disk@load: the directory then (blocks allocated, du).\n")
	fmt.Fprintf(&b, "  Reopened (bulk mode) and read at once, no warm-up: get: Gets of random live keys; scan: forward scans of %d keys from random\n", c.scanLen)
	fmt.Fprintf(&b, "  live keys; 1 goroutine, %v each. settle: then until the engine reported no background work (segkv: Seal, then\n", c.duration)
	fmt.Fprintf(&b, "  Metrics.MergeBacklog 0; Pebble: Flush, then no flush or compaction for 1 s), at most %v; goleveldb, badger and bbolt\n", c.spaceSettle)
	b.WriteString("  cannot tell, so their settled reads follow the reopened ones at once. Then the same reads (settled), Close; disk: the directory then.\n")
	b.WriteString("  live: len(key)+len(value) over the live keys; space amp = disk / live. user: key+value of every Put plus key of every Delete.\n")
	b.WriteString("  written: write_bytes of /proc/self/io (bytes the process sent to the storage layer, counted when dirtied; Linux only)\n")
	b.WriteString("  from the first Open to the load's Close (@load) and to the end of settle; write amp = written / user.\n")
	type row struct {
		name, workload string
		format         func(result) string
	}
	mibs := func(r result) string { return fmt.Sprintf("%.1f MiB", r.Value/(1<<20)) }
	secs := func(r result) string { return fmt.Sprintf("%.2f s", r.Value) }
	times := func(r result) string { return fmt.Sprintf("%.2fx", r.Value) }
	ops := func(r result) string { return commas(int64(r.Value+0.5)) + " ops/s" }
	scans := func(r result) string { return commas(int64(r.Value+0.5)) + " scans/s" }
	table := []row{
		{"load", spaceLoad, secs},
		{"settle", spaceSettle, func(r result) string {
			if r.TimedOut {
				return fmt.Sprintf("TIMED OUT %.0f s", r.Value)
			}
			return secs(r)
		}},
		{"live", spaceLive, mibs},
		{"disk@load", spaceDiskLoaded, mibs},
		{"space amp@load", spaceAmpLoaded, times},
		{"disk", spaceDisk, mibs},
		{"space amp", spaceAmp, times},
		{"user", spaceUser, mibs},
		{"written@load", spaceWrittenLoad, mibs},
		{"write amp@load", spaceWriteAmpLoad, times},
		{"written", spaceWritten, mibs},
		{"write amp", spaceWriteAmp, times},
		{"get reopened", spaceGetReopened, ops},
		{"scan reopened", spaceScanReopened, scans},
		{"get settled", spaceGetSettled, ops},
		{"scan settled", spaceScanSettled, scans},
	}
	ratio := contains(c.engines, "segkv") && contains(c.engines, "pebble")
	for _, n := range c.spaceN {
		head := append([]string{""}, c.engines...)
		if ratio {
			head = append(head, "segkv/pebble")
		}
		cells := [][]string{head}
		for _, r := range table {
			line := []string{r.name}
			for _, name := range c.engines {
				cell := "-"
				if x, ok := spaceRow(res.Space, r.workload, n, name); ok {
					cell = r.format(x)
				}
				line = append(line, cell)
			}
			if ratio {
				cell := "-"
				s, ok1 := spaceRow(res.Space, r.workload, n, "segkv")
				p, ok2 := spaceRow(res.Space, r.workload, n, "pebble")
				if ok1 && ok2 && p.Value != 0 && !s.TimedOut && !p.TimedOut {
					cell = fmt.Sprintf("%.2fx", s.Value/p.Value)
				}
				line = append(line, cell)
			}
			cells = append(cells, line)
		}
		fmt.Fprintf(&b, "\nn = %s keys (%s live)\n", commas(int64(n)), commas(int64(spaceLiveCount(n))))
		writeAligned(&b, cells)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
