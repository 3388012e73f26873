package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/json"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segkv/segkv/bench/peers"
)

// TestSpaceValue checks the space workload's values: exactly
// spaceValueSize bytes of valid JSON naming their key number and version,
// deterministic, different between versions, written without allocating,
// and about 3x compressible: compress/flate on 4 KiB blocks of consecutive
// values (a table block's worth) gives 3.1x.
func TestSpaceValue(t *testing.T) {
	dst := make([]byte, 0, spaceValueSize)
	for _, i := range []uint64{0, 1, 7, 12345, 999_999, 1 << 31, spaceMaxN - 1} {
		for _, version := range []uint64{1, 2} {
			v := spaceValue(dst, i, version)
			var obj struct {
				ID      uint64   `json:"id"`
				Version uint64   `json:"v"`
				Tags    []string `json:"tags"`
				Note    string   `json:"note"`
			}
			if len(v) != spaceValueSize || json.Unmarshal(v, &obj) != nil {
				t.Fatalf("key %d version %d: %d bytes, not JSON: %s", i, version, len(v), v)
			}
			if obj.ID != i || obj.Version != version || len(obj.Tags) != 2 || len(obj.Note) < 5 {
				t.Fatalf("key %d version %d: %s", i, version, v)
			}
			if again := spaceValue(nil, i, version); !bytes.Equal(again, v) {
				t.Fatalf("key %d version %d: not deterministic:\n%s\n%s", i, version, v, again)
			}
		}
		if bytes.Equal(spaceValue(nil, i, 1), spaceValue(dst, i, 2)) {
			t.Fatalf("key %d: both versions are equal", i)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { spaceValue(dst, 42, 2) }); allocs != 0 {
		t.Errorf("spaceValue allocates %v times with room in dst", allocs)
	}

	var all []byte
	for i := uint64(0); i < 20_000; i++ {
		all = append(all, spaceValue(dst, i, 2)...)
	}
	const block = 4096
	var compressed int
	for off := 0; off < len(all); off += block {
		var b bytes.Buffer
		w, err := flate.NewWriter(&b, flate.DefaultCompression)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(all[off:min(off+block, len(all))]); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		compressed += b.Len()
	}
	ratio := float64(len(all)) / float64(compressed)
	t.Logf("flate on %d-byte blocks: %.2fx", block, ratio)
	if ratio < 2.7 || ratio > 3.5 {
		t.Errorf("values compress %.2fx with flate on %d-byte blocks, want about 3x", ratio, block)
	}
}

// TestSpaceLiveKeys checks the live key numbering against the deletion rule.
func TestSpaceLiveKeys(t *testing.T) {
	for n := 1; n <= 50; n++ {
		var want []uint64
		for i := uint64(0); i < uint64(n); i++ {
			if !spaceDeleted(i) {
				want = append(want, i)
			}
		}
		if got := spaceLiveCount(n); got != len(want) {
			t.Fatalf("n=%d: spaceLiveCount %d, want %d", n, got, len(want))
		}
		for j, i := range want {
			if got := spaceLiveKey(uint64(j)); got != i {
				t.Fatalf("n=%d: spaceLiveKey(%d) = %d, want %d", n, j, got, i)
			}
		}
		order := spaceLiveOrder(n)
		if len(order) != len(want) || !slices.IsSortedFunc(order, func(a, b uint64) int {
			return bytes.Compare(peers.ShortKey(make([]byte, peers.ShortKeySize), a), peers.ShortKey(make([]byte, peers.ShortKeySize), b))
		}) {
			t.Fatalf("n=%d: spaceLiveOrder %v is not the %d live keys in key order", n, order, len(want))
		}
	}
}

// memDB is a sorted in-memory store whose deletes or scans can be broken
// on purpose.
type memDB struct {
	keys   [][]byte // sorted
	vals   map[string][]byte
	broken string // "nodelete": DeleteBatch does nothing; "short": scans stop one early
	syncs  int
}

func newMemDB() *memDB { return &memDB{vals: map[string][]byte{}} }

func (m *memDB) Put(k, v []byte) error { return m.Batch([][]byte{k}, [][]byte{v}, false) }

func (m *memDB) Batch(keys, values [][]byte, sync bool) error {
	for i, k := range keys {
		if _, ok := m.vals[string(k)]; !ok {
			r, _ := slices.BinarySearchFunc(m.keys, k, bytes.Compare)
			m.keys = slices.Insert(m.keys, r, bytes.Clone(k))
		}
		m.vals[string(k)] = bytes.Clone(values[i])
	}
	if sync {
		m.syncs++
	}
	return nil
}

func (m *memDB) DeleteBatch(keys [][]byte, sync bool) error {
	if sync {
		m.syncs++
	}
	if m.broken == "nodelete" {
		return nil
	}
	for _, k := range keys {
		if r, ok := slices.BinarySearchFunc(m.keys, k, bytes.Compare); ok {
			m.keys = slices.Delete(m.keys, r, r+1)
			delete(m.vals, string(k))
		}
	}
	return nil
}

func (m *memDB) Get(k, dst []byte) ([]byte, bool, error) {
	v, ok := m.vals[string(k)]
	return append(dst[:0], v...), ok, nil
}

func (m *memDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	r, _ := slices.BinarySearchFunc(m.keys, start, bytes.Compare)
	end := min(len(m.keys), r+n)
	if m.broken == "short" && end-r > 1 {
		end--
	}
	for _, k := range m.keys[r:end] {
		fn(k, m.vals[string(k)])
	}
	return end - r, nil
}

func (m *memDB) Close() error { return nil }

// TestSpaceLoadStore runs the load on an in-memory store and checks what it
// did and left: the counts and bytes, one sync, every live key at its second
// value, every deleted key gone; and that the reads' checks catch a store
// that ignores deletes or scans short.
func TestSpaceLoadStore(t *testing.T) {
	const n, bs = 2503, 300 // n%4 == 3: the last key number is not deleted
	db := newMemDB()
	st, err := spaceLoadStore(db, n, bs, 1)
	if err != nil {
		t.Fatal(err)
	}
	live := spaceLiveCount(n)
	deletes := n - live
	if st.puts != 2*n || st.deletes != int64(deletes) || st.userBytes != int64(2*n*spaceRecord+deletes*peers.ShortKeySize) || st.seconds <= 0 {
		t.Fatalf("stats %+v; want %d puts, %d deletes", st, 2*n, deletes)
	}
	if db.syncs != 1 || len(db.keys) != live {
		t.Fatalf("%d syncs, %d keys; want 1 sync (the last batch), %d keys", db.syncs, len(db.keys), live)
	}
	kb := make([]byte, peers.ShortKeySize)
	for i := uint64(0); i < n; i++ {
		v, found, _ := db.Get(peers.ShortKey(kb, i), nil)
		if found == spaceDeleted(i) || found && !bytes.Equal(v, spaceValue(nil, i, 2)) {
			t.Fatalf("key %d: found=%v %s", i, found, v)
		}
	}
	order := spaceLiveOrder(n)
	if err := spaceVerify(db, n, order, 100, 1); err != nil {
		t.Fatal(err)
	}
	ops, d, err := spaceGetFor(db, n, time.Millisecond, 1)
	if err != nil || ops < 1 || d <= 0 {
		t.Fatalf("gets: %d in %v, %v", ops, d, err)
	}
	sc, err := spaceScanFor(db, order, 100, 5*time.Millisecond, true, 1)
	if err != nil || sc.scans < 1 || sc.keys < 90*sc.scans || sc.keys > 100*sc.scans {
		t.Fatalf("scans: %+v, %v", sc, err)
	}
	// A scan from the first key returns the first 100 live keys.
	var got []uint64
	if c, err := db.Scan(peers.ShortKey(kb, order[0]), 100, false, func(k, _ []byte) {
		got = append(got, order[slices.IndexFunc(order, func(i uint64) bool { return bytes.Equal(peers.ShortKey(make([]byte, peers.ShortKeySize), i), k) })])
	}); err != nil || c != 100 || !slices.Equal(got, order[:100]) {
		t.Fatalf("scan from the first key: %d keys %v, %v", c, got, err)
	}

	for _, broken := range []string{"nodelete", "short"} {
		db := newMemDB()
		db.broken = broken
		if _, err := spaceLoadStore(db, n, bs, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := spaceScanFor(db, order, 100, 20*time.Millisecond, false, 1); err == nil {
			t.Errorf("%s: scans not caught", broken)
		}
		if err := spaceVerify(db, n, order, 100, 1); err == nil {
			t.Errorf("%s: verify passed", broken)
		}
	}
}

func TestSpaceFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if contains(c.workloads, "space") || !slices.Equal(c.spaceN, []int{2_000_000}) || c.spaceSettle != 120*time.Second {
		t.Fatalf("default: workloads %v, spacen %v, space-settle %v", c.workloads, c.spaceN, c.spaceSettle)
	}
	c, err = parseFlags([]string{"-workloads", "space,scale", "-spacen", "2M,300k", "-space-settle", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.workloads, []string{"scale", "space"}) || !slices.Equal(c.spaceN, []int{300_000, 2_000_000}) || c.spaceSettle != 5*time.Second {
		t.Fatalf("workloads %v, spacen %v, space-settle %v", c.workloads, c.spaceN, c.spaceSettle)
	}
	for _, args := range [][]string{
		{"-workloads", "space", "-spacen", "0"},
		{"-workloads", "space", "-spacen", "2X"},
		{"-workloads", "space", "-spacen", "5G"},
		{"-workloads", "space", "-space-settle", "0s"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestSpaceEndToEnd runs the space workload on tiny stores of every engine
// at two key counts and checks the JSON rows: each engine's figures are all
// there once, exact where they can be (live and user bytes, operation
// counts), and plausible where they cannot (disk, amplification, reads; a
// scan reads 100 keys but near the end of the key space).
func TestSpaceEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("loads stores on the real disk")
	}
	var out bytes.Buffer
	args := []string{"-workloads", "space", "-spacen", "3000,4k", "-duration", "40ms", "-dir", t.TempDir(), "-json", "-q"}
	if err := run(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Kind     string  `json:"kind"`
		Workload string  `json:"workload"`
		Engine   string  `json:"engine"`
		Unit     string  `json:"unit"`
		Value    float64 `json:"value"`
		Ops      int64   `json:"ops"`
		Keys     int64   `json:"keys"`
		N        int     `json:"n"`
		TimedOut bool    `json:"timed_out"`
		SpaceN   []int   `json:"space_n"`
	}
	type at struct {
		engine string
		n      int
	}
	rows := map[at]map[string]row{}
	runs := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind == "run" {
			runs++
			if !slices.Equal(r.SpaceN, []int{3000, 4000}) {
				t.Errorf("run line: space_n %v", r.SpaceN)
			}
		}
		if r.Kind != "result" {
			continue
		}
		k := at{r.Engine, r.N}
		if rows[k] == nil {
			rows[k] = map[string]row{}
		}
		if _, dup := rows[k][r.Workload]; dup || !strings.HasPrefix(r.Workload, "space/") {
			t.Errorf("duplicate or foreign row: %s", sc.Text())
		}
		rows[k][r.Workload] = r
	}
	if runs != 1 || len(rows) != 2*len(peers.Names()) {
		t.Fatalf("%d run lines, rows for %d engine/count pairs, want 1 and %d:\n%s", runs, len(rows), 2*len(peers.Names()), out.String())
	}
	for k, rs := range rows {
		want := []string{spaceLoad, spaceLive, spaceDiskLoaded, spaceAmpLoaded, spaceDisk, spaceAmp, spaceUser,
			spaceGetReopened, spaceScanReopened, spaceGetSettled, spaceScanSettled}
		if k.engine == "segkv" || k.engine == "pebble" {
			want = append(want, spaceSettle)
		}
		if runtime.GOOS == "linux" {
			want = append(want, spaceWrittenLoad, spaceWritten, spaceWriteAmpLoad, spaceWriteAmp)
		}
		var have []string
		for w := range rs {
			have = append(have, w)
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("%v: rows %v, want %v", k, have, want)
			continue
		}
		live := spaceLiveCount(k.n)
		deletes := k.n - live
		v := func(w string) float64 { return rs[w].Value }
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
		check := func(ok bool, what string) {
			if !ok {
				t.Errorf("%v: %s (rows %+v)", k, what, rs)
			}
		}
		check(v(spaceLive) == float64(live*spaceRecord), "live bytes")
		check(v(spaceUser) == float64(2*k.n*spaceRecord+deletes*peers.ShortKeySize), "user bytes")
		check(rs[spaceLoad].Ops == int64(2*k.n+deletes) && v(spaceLoad) > 0, "load ops and time")
		check(v(spaceDisk) > 0 && v(spaceDiskLoaded) > 0, "disk")
		check(near(v(spaceAmp), v(spaceDisk)/v(spaceLive)) && near(v(spaceAmpLoaded), v(spaceDiskLoaded)/v(spaceLive)), "space amp = disk / live")
		// Compression can take the store below its logical size, not to
		// a tenth of it; fixed overheads of a tiny store can take it far
		// above, not a hundredfold.
		check(v(spaceAmp) > 0.1 && v(spaceAmp) < 100 && v(spaceAmpLoaded) > 0.1 && v(spaceAmpLoaded) < 100, "plausible space amp")
		if runtime.GOOS == "linux" {
			check(v(spaceWritten) >= v(spaceWrittenLoad) && v(spaceWrittenLoad) > 0, "written")
			check(near(v(spaceWriteAmp), v(spaceWritten)/v(spaceUser)) && v(spaceWriteAmp) > 0.1, "write amp")
		}
		if s, ok := rs[spaceSettle]; ok {
			check(!s.TimedOut && s.Value >= 0, "settle")
		}
		for _, w := range []string{spaceGetReopened, spaceGetSettled} {
			check(rs[w].Ops > 0 && v(w) > 0, w)
		}
		for _, w := range []string{spaceScanReopened, spaceScanSettled} {
			// A uniformly random start on 2,250 or 3,000 live keys
			// leaves the mean scan above 96 keys.
			r := rs[w]
			check(r.Ops > 0 && v(w) > 0 && r.Keys >= 90*r.Ops && r.Keys <= 100*r.Ops, w+": keys per scan")
		}
	}
}

// TestSpaceTable checks the human table: a column per engine, the
// segkv/pebble ratio, dashes for figures an engine lacks, and a settle that
// timed out said so and left out of the ratio.
func TestSpaceTable(t *testing.T) {
	sr := spaceRun{
		load: spaceLoadStats{puts: 2000, deletes: 250, userBytes: 2000*spaceRecord + 250*16, seconds: 1.5},
		live: 750 * spaceRecord, diskLoaded: 4 << 20, disk: 1 << 20, settler: true, settleSeconds: 2,
		written: 3 << 20, writtenLoad: 2 << 20,
		getReopened: readStats{1000, time.Second}, scanReopened: scanStats{10, 1000, time.Second},
		getSettled: readStats{4000, time.Second}, scanSettled: scanStats{20, 2000, time.Second},
	}
	rows := spaceRows("segkv", 1000, sr)
	sr.disk, sr.settleTimedOut, sr.settleSeconds = 2<<20, true, 120
	rows = append(rows, spaceRows("pebble", 1000, sr)...)
	sr.settler, sr.written, sr.writtenLoad = false, -1, -1
	rows = append(rows, spaceRows("bbolt", 1000, sr)...)
	res := &results{
		Config:  &config{engines: []string{"segkv", "pebble", "bbolt"}, workloads: []string{"space"}, batch: 1000, scanLen: 100, duration: time.Second, spaceN: []int{1000}, spaceSettle: 120 * time.Second},
		Configs: map[string][2]string{"segkv": {"a", "b"}, "pebble": {"c", "d"}, "bbolt": {"e", "f"}},
		Space:   rows,
	}
	var out bytes.Buffer
	if err := writeTable(&out, res); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"space workload only", "n = 1,000 keys (750 live)", "segkv/pebble", "TIMED OUT 120 s", "1.0 MiB", "2.0 MiB", "0.50x",
		"4,000 ops/s", "20 scans/s", "1.50 s"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "settle":
			// segkv 2.00 s, pebble TIMED OUT 120 s, bbolt -, no ratio.
			if f[len(f)-1] != "-" || f[len(f)-2] != "-" {
				t.Errorf("settle line: %q", line)
			}
		case len(f) > 1 && f[0] == "write" && f[1] == "amp":
			if f[len(f)-2] != "-" || f[len(f)-1] != "1.00x" {
				t.Errorf("write amp line (bbolt has none): %q", line)
			}
		}
	}
}
