package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestMain lets the test binary be the scale workload's child process, as
// the peerbench binary is: scale re-executes os.Executable().
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == scaleChildArg {
		os.Exit(scaleChildMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestParseCounts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"1000000", []int{1_000_000}},
		{"1M", []int{1_000_000}},
		{"20M, 1m,300k,300000", []int{300_000, 1_000_000, 20_000_000}},
		{"2.5M,1.25k,100K,1_000", []int{1_000, 1_250, 100_000, 2_500_000}},
		{"1G,7", []int{7, 1_000_000_000}},
		{"0.5k", []int{500}},
		{"1.000M", []int{1_000_000}},
	} {
		got, err := parseCounts(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseCounts(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", ",", "0", "-5", "1.5", "1.0005k", "M", ".M", "1e6", "1MB", "2T", "0x10", "+3", "1.2.3M", "99999999999G", "nan", "1,x"} {
		if got, err := parseCounts(in); err == nil {
			t.Errorf("parseCounts(%q) = %v, want an error", in, got)
		}
	}
}

func TestScaleFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if contains(c.workloads, "scale") || !slices.Equal(c.scaleN, []int{1_000_000}) {
		t.Fatalf("default: workloads %v, scalen %v", c.workloads, c.scaleN)
	}
	c, err = parseFlags([]string{"-workloads", "scale,get1", "-scalen", "3M,100k", "-plot", "x.svg"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.workloads, []string{"get1", "scale"}) || !slices.Equal(c.scaleN, []int{100_000, 3_000_000}) || c.plot != "x.svg" {
		t.Fatalf("workloads %v, scalen %v, plot %q", c.workloads, c.scaleN, c.plot)
	}
	for _, args := range [][]string{
		{"-workloads", "scale", "-scalen", "0"},
		{"-workloads", "scale", "-scalen", "1Q"},
		{"-plot", "x.svg"}, // scale not selected
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestScaleChildRoundTrip checks that the parent reads back what the child
// writes, whatever else the child's stdout holds, and turns it into rows
// with the right names, units and per-key figures.
func TestScaleChildRoundTrip(t *testing.T) {
	ch := scaleChild{Kind: scaleChildKind, Engine: "segkv", N: 1000, HeapBefore: 500_000, HeapAfter: 540_000,
		OpenS: 0.01, FirstGetS: 0.0125, RSS: 30 << 20, HWM: 31 << 20,
		Gets: 200, GetS: 0.001, Misses: 200, MissS: 0.0005, Scans: 50, ScanKeys: 5000, ScanS: 0.1}
	var out bytes.Buffer
	out.WriteString("an engine's chatter\n{\"kind\":\"other\"}\n")
	if err := json.NewEncoder(&out).Encode(ch); err != nil {
		t.Fatal(err)
	}
	got, err := parseScaleChild(out.Bytes())
	if err != nil || got != ch {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, ch)
	}
	if _, err := parseScaleChild([]byte("{\"kind\":\"other\"}\n")); err == nil {
		t.Fatal("no error without a scale-child line")
	}
	rows := scaleRows("segkv", 1000, scaleLoadStats{seconds: 2, settleSeconds: 0.5, heapPeak: 3_000_000, livePeak: 1_000_000, diskBytes: 150_000}, got)
	want := map[string][2]any{
		scaleLoad: {2.0, "s"}, scaleSettle: {0.5, "s"}, scaleHeapLoad: {3e6, "B"}, scaleHeapLoadKey: {3000.0, "B/key"},
		scaleLiveLoad: {1e6, "B"}, scaleLiveLoadKey: {1000.0, "B/key"},
		scaleDisk: {150_000.0, "B"}, scaleDiskKey: {150.0, "B/key"},
		scaleOpen: {0.01, "s"}, scaleOpenFirstGet: {0.0125, "s"},
		scaleHeapOpen: {40_000.0, "B"}, scaleHeapOpenKey: {40.0, "B/key"},
		scaleRSS: {float64(30 << 20), "B"}, scaleHWM: {float64(31 << 20), "B"},
		scaleGet: {200_000.0, "ops/s"}, scaleMiss: {400_000.0, "ops/s"}, scaleScan: {500.0, "ops/s"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for _, r := range rows {
		w, ok := want[r.Workload]
		if !ok || r.Engine != "segkv" || r.N != 1000 || r.Unit != w[1] || r.Value < w[0].(float64)*0.999999 || r.Value > w[0].(float64)*1.000001 {
			t.Errorf("row %+v, want value %v unit %v", r, w[0], w[1])
		}
	}
}

func TestScaleTable(t *testing.T) {
	ch := scaleChild{Kind: scaleChildKind, HeapBefore: 1000, HeapAfter: 41_000, OpenS: 0.0123, FirstGetS: 0.0456,
		RSS: 40 << 20, HWM: 50 << 20, Gets: 1000, GetS: 0.002, Misses: 1000, MissS: 0.001, Scans: 10, ScanKeys: 1000, ScanS: 0.01}
	var rows []result
	for _, n := range []int{1000, 2000} {
		rows = append(rows, scaleRows("segkv", n, scaleLoadStats{seconds: 1.5, heapPeak: 250_000, diskBytes: 300_000}, ch)...)
	}
	res := &results{
		Config:  &config{n: 10, engines: []string{"segkv", "bbolt"}, batch: 1000, gets: 1000, scanLen: 100, scaleN: []int{1000, 2000}, workloads: []string{"scale"}},
		Configs: map[string][2]string{"segkv": {"a", "b"}, "bbolt": {"c", "d"}},
		Scale:   rows,
	}
	var out bytes.Buffer
	if err := writeTable(&out, res); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"n = 1,000 keys", "n = 2,000 keys", "heap@open", "B/key", "ops/s", "scans/s",
		"  250  ", "40.0", "12.3", "45.6", "500,000", "1,000,000", "1,000"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "segkv/peer") || strings.Contains(s, "targets") {
		t.Errorf("a scale-only table has the main table's legend or targets:\n%s", s)
	}
	// bbolt has no figures: dashes, not zeros.
	if !regexpLine(s, "bbolt", "-") {
		t.Errorf("no dashed bbolt row:\n%s", s)
	}
	svg := scalePlot(res)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("plot is not XML: %v\n%s", err, svg)
	}
	if got := strings.Count(svg, "<polyline"); got != 2 {
		t.Errorf("%d polylines, want 2 (segkv in two panels)", got)
	}
}

func regexpLine(s, prefix, cell string) bool {
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == prefix && f[1] == cell {
			return true
		}
	}
	return false
}

// TestScaleEndToEnd runs the scale workload on tiny stores of two engines,
// child processes included (this test binary re-executed), and checks the
// JSON lines and the plot.
func TestScaleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("loads stores on the real disk and starts child processes")
	}
	dir := t.TempDir()
	plot := filepath.Join(dir, "scale.svg")
	var out bytes.Buffer
	args := []string{"-workloads", "scale", "-scalen", "1500,3k", "-engines", "segkv,bbolt", "-duration", "30ms", "-gets", "200",
		"-dir", dir, "-json", "-q", "-plot", plot}
	if err := run(args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	perEngine := 15
	if runtime.GOOS == "linux" {
		perEngine += 2 // VmRSS, VmHWM
	}
	count := map[int]int{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r struct {
			Kind     string  `json:"kind"`
			Workload string  `json:"workload"`
			Engine   string  `json:"engine"`
			Unit     string  `json:"unit"`
			Value    float64 `json:"value"`
			N        int     `json:"n"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kind != "result" {
			continue
		}
		count[r.N]++
		if !strings.HasPrefix(r.Workload, "scale/") || !slices.Contains([]string{"B", "B/key", "s", "ops/s"}, r.Unit) {
			t.Errorf("bad row: %s", sc.Text())
		}
		// Every figure but the heap differences must be positive (a load
		// this small may finish before any GC cycle marks the live heap, and
		// leave no background work, or bbolt has none to wait for).
		if r.Value <= 0 && !strings.HasPrefix(r.Workload, "scale/heap_") && !strings.HasPrefix(r.Workload, "scale/live_") && r.Workload != scaleSettle {
			t.Errorf("non-positive figure: %s", sc.Text())
		}
	}
	if count[1500] != 2*perEngine || count[3000] != 2*perEngine || len(count) != 2 {
		t.Fatalf("result rows per n: %v, want %d at 1500 and 3000:\n%s", count, 2*perEngine, out.String())
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Fatalf("plot is not XML: %v", err)
	}
	if got := strings.Count(string(svg), "<polyline"); got != 4 {
		t.Errorf("%d polylines, want 4 (2 engines x 2 panels)", got)
	}
	// The stores are gone: only the plot is left in dir.
	if entries, _ := filepath.Glob(filepath.Join(dir, "peerbench-*")); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}
