package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segkv/segkv/bench/peers"
)

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "0"},
		{"-workloads", "nosuch"},
		{"-workloads", ""},
		{"-engines", "rocksdb"},
		{"-batch", "0"},
		{"-duration", "0s"},
		{"-gets", "1"},
		{"-scanlen", "0"},
		{"-freshkeys", "0"},
		{"extra"},
		{"-nosuchflag"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestWorkloadAliases(t *testing.T) {
	got, err := parseWorkloads("miss, put1,get,put1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"put1", "get1", "get2", "miss1", "miss2"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	got, err = parseWorkloads("fscan,scan,reopen")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"reopen", "scan1", "scan2", "rscan1", "rscan2", "fscan1", "fscan2", "frscan1"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestJSONShape runs a tiny end-to-end bench and checks every line is a JSON
// object of a known kind with the fields the docs promise.
func TestJSONShape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs durable puts on the real disk")
	}
	var out bytes.Buffer
	args := []string{"-n", "300", "-freshkeys", "250", "-duration", "40ms", "-gets", "200", "-engines", "segkv,bbolt", "-dir", t.TempDir(), "-json", "-q"}
	if err := run(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		kind, _ := m["kind"].(string)
		kinds[kind]++
		if kind == "result" {
			for _, f := range []string{"workload", "engine", "value", "unit", "ops", "seconds"} {
				if _, ok := m[f]; !ok {
					t.Errorf("result without %q: %s", f, sc.Text())
				}
			}
			if v, _ := m["value"].(float64); v <= 0 {
				t.Errorf("non-positive value: %s", sc.Text())
			}
			if w, _ := m["workload"].(string); strings.Contains(w, "scan") {
				if k, _ := m["keys_per_s"].(float64); k <= 0 {
					t.Errorf("scan without keys_per_s: %s", sc.Text())
				}
			}
		}
	}
	// 15 workloads x 2 engines; get1/get2 have a bbolt target, reopen and
	// miss1 an absolute one (no goleveldb or pebble in this run).
	if kinds["run"] != 1 || kinds["engine"] != 2 || kinds["result"] != 30 || kinds["target"] != 4 {
		t.Fatalf("line kinds %v", kinds)
	}
}

func TestTable(t *testing.T) {
	res := &results{
		Config:  &config{n: 10, engines: []string{"segkv", "pebble"}, batch: 1, rounds: 1, gets: 2},
		Configs: map[string][2]string{"segkv": {"a", "b"}, "pebble": {"c", "d"}},
		Rows: []result{
			{Workload: "put1", Engine: "pebble", Value: 1000, Unit: "ops/s"},
			{Workload: "put1", Engine: "segkv", Value: 1500, Unit: "ops/s"},
			{Workload: "bulk", Engine: "segkv", Value: 2, Unit: "s"},
			{Workload: "bulk", Engine: "pebble", Value: 2, Unit: "s"},
			{Workload: "scan1", Engine: "segkv", Value: 20000, Unit: "ops/s", Ops: 1000, Keys: 100000, KeysPerS: 2_000_000},
		},
	}
	var out bytes.Buffer
	if err := writeTable(&out, res); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"1.50x", "1,500 ops/s", "MISSED: segkv needs 1.25x", "met (1.15x headroom)", "20,000 ops/s", "2,000,000", "scan rows:"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

// TestScanWorkloads runs every scan workload on tiny stores of every engine
// with -checkscans, so every scan is checked key by key and value by value
// against the sorted list of the keys written: a wrong adapter (start
// position, order, count, value) fails the run.
func TestScanWorkloads(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-n", "700", "-freshkeys", "500", "-scanlen", "60", "-duration", "30ms", "-workloads", "scan,fscan",
		"-checkscans", "-dir", t.TempDir(), "-json", "-q"}
	if err := run(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r struct {
			Kind     string  `json:"kind"`
			Workload string  `json:"workload"`
			Ops      int64   `json:"ops"`
			Keys     int64   `json:"keys"`
			KeysPerS float64 `json:"keys_per_s"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind != "result" {
			continue
		}
		rows++
		// A uniformly random start leaves the mean scan well above half
		// the limit on these key counts.
		if r.Ops < 1 || r.Keys < 30*r.Ops || r.Keys > 60*r.Ops || r.KeysPerS <= 0 {
			t.Errorf("implausible scan row: %s", sc.Text())
		}
	}
	if want := 7 * len(peers.Names()); rows != want {
		t.Fatalf("%d result rows, want %d:\n%s", rows, want, out.String())
	}
}

// fakeDB is a sorted key list with a Scan that can be broken on purpose.
type fakeDB struct {
	keys   [][]byte
	broken string
}

func (f *fakeDB) Put(k, v []byte) error                        { return nil }
func (f *fakeDB) Batch(keys, values [][]byte, sync bool) error { return nil }
func (f *fakeDB) DeleteBatch(keys [][]byte, sync bool) error   { return nil }
func (f *fakeDB) Get(k, dst []byte) ([]byte, bool, error)      { return nil, false, nil }
func (f *fakeDB) Close() error                                 { return nil }

func (f *fakeDB) Scan(start []byte, n int, reverse bool, fn func(k, v []byte)) (int, error) {
	r, _ := slices.BinarySearchFunc(f.keys, start, bytes.Compare)
	m := n
	if f.broken == "skip" {
		m++ // one more, for the one skipped
	}
	var keys [][]byte
	if reverse {
		if f.broken == "lte" && r < len(f.keys) && bytes.Equal(f.keys[r], start) {
			r++ // <= start instead of < start
		}
		keys = slices.Clone(f.keys[max(0, r-m):r])
		slices.Reverse(keys)
	} else {
		keys = slices.Clone(f.keys[r:min(len(f.keys), r+m)])
	}
	switch f.broken {
	case "short":
		if len(keys) > 1 {
			keys = keys[:len(keys)-1]
		}
	case "skip":
		if len(keys) > 2 {
			keys = slices.Delete(keys, 1, 2)
		}
	case "swap":
		if len(keys) > 2 {
			keys[1], keys[2] = keys[2], keys[1]
		}
	}
	var vb [peers.ValueSize]byte
	for _, k := range keys {
		i, err := strconv.ParseUint(string(k[16:]), 16, 64)
		if err != nil {
			return 0, err
		}
		fn(k, peers.Value(vb[:], i))
	}
	return len(keys), nil
}

// TestScanChecker checks that scanFor catches the scans a broken adapter
// would return: short, with a key missing (the count made up past the end),
// out of order, or starting at the start key in reverse, with and without
// the key-by-key check.
func TestScanChecker(t *testing.T) {
	const n = 400
	ks := newKeySpace(n)
	f := &fakeDB{}
	for _, i := range ks.order {
		f.keys = append(f.keys, peers.Key(make([]byte, peers.KeySize), i))
	}
	for _, exact := range []bool{false, true} {
		for _, reverse := range []bool{false, true} {
			f.broken = ""
			st, err := scanFor(f, ks, 50, 2, reverse, time.Millisecond, exact, 1)
			if err != nil || st.scans < 2 || st.keys == 0 {
				t.Fatalf("exact=%v reverse=%v: correct scans: %+v, %v", exact, reverse, st, err)
			}
			for _, b := range []string{"short", "skip", "swap", "lte"} {
				if b == "lte" && !reverse {
					continue // forward has no <= to get wrong
				}
				f.broken = b
				if _, err := scanFor(f, ks, 50, 1, reverse, 20*time.Millisecond, exact, 1); err == nil {
					t.Errorf("exact=%v reverse=%v: %s scans not detected", exact, reverse, b)
				}
			}
		}
	}
}
