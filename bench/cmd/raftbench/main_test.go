package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "1"},
		{"-truncate", "0"},
		{"-n", "100", "-truncate", "100"},
		{"-data", "-1"},
		{"-preload", "0"},
		{"-gets", "0"},
		{"-batches", "1,x"},
		{"-batches", "0"},
		{"-batches", ""},
		{"-duration", "0s"},
		{"-rounds", "0"},
		{"-idle", "-1s"},
		{"-barriers", "-1"},
		{"-engines", "rocksdb"},
		{"-engines", ""},
		{"extra"},
		{"-nosuchflag"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	c, err := parseFlags([]string{"-batches", "64, 1,64", "-engines", "raft-wal,segkv,raft-wal"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.batches) != 2 || c.batches[0] != 64 || c.batches[1] != 1 || len(c.engines) != 2 || c.engines[0] != "raft-wal" {
		t.Fatalf("batches %v, engines %v", c.batches, c.engines)
	}
}

// TestSmoke runs the whole benchmark on tiny stores of every engine, on the
// real disk, and checks the JSON report: every measurement of every engine
// present and plausible, every target evaluated, and no progress on a
// stderr that is not a terminal.
func TestSmoke(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"-n", "3000", "-truncate", "2970", "-preload", "100", "-duration", "60ms", "-rounds", "2",
		"-gets", "500", "-idle", "0s", "-barriers", "40", "-dir", t.TempDir(), "-json"}
	if err := run(args, &out, &errOut, false); err != nil {
		t.Fatal(err)
	}
	if errOut.Len() != 0 {
		t.Errorf("progress on a non-terminal: %q", errOut.String())
	}
	kinds := map[string]int{}
	perEngine := map[string]map[string]int{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m struct {
			Kind string `json:"kind"`
			row
			Met *bool `json:"met"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		kinds[m.Kind]++
		switch m.Kind {
		case "result":
			if perEngine[m.Engine] == nil {
				perEngine[m.Engine] = map[string]int{}
			}
			perEngine[m.Engine][m.Measure]++
			bad := false
			switch m.Measure {
			case "storelogs":
				bad = m.Calls < 1 || m.Entries != m.Calls*int64(m.Batch) || m.EntriesPerS <= 0 || m.P50us <= 0 || m.P99us < m.P50us || m.MaxUs < m.P99us ||
					(m.State == stateTruncated) != (len(m.RoundRatios) == 2 && m.RoundRatioMedian > 0)
			case "getlog":
				bad = m.Calls != 500 || m.MeanUs <= 0 || m.P99us < m.P50us
			case "preload":
				bad = m.Entries != 3000 || m.Calls != 30 || m.Seconds <= 0
			case "deleterange":
				bad = m.Entries != 2970 || m.Seconds <= 0
			case "barrier":
				bad = m.Engine != "disk" || m.Calls != 40 || m.P50us <= 0 || m.P99us < m.P50us
			case "disk":
				bad = m.Bytes <= 0 || m.Files < 1
				if m.State == diskFirstDrop && m.Engine != "segkv" {
					t.Errorf("%s: files dropped while appending after the truncation: %s", m.Engine, sc.Text())
				}
			default:
				bad = true
			}
			if bad {
				t.Errorf("implausible result: %s", sc.Text())
			}
		case "target":
			if m.Met == nil {
				t.Errorf("target without met: %s", sc.Text())
			}
		}
	}
	// Targets: 4 p50, GetLog, DeleteRange time, files gone, 2 after/fresh.
	if kinds["run"] != 1 || kinds["engine"] != 3 || kinds["target"] != 9 {
		t.Fatalf("line kinds %v", kinds)
	}
	// Per engine: 1 preload, 2 getlog, 1 deleterange, 2 states x 2 batch
	// sizes of storelogs, 5 disk samples (6 with a first drop, which a
	// store this small hardly reaches: segkv drops at a seal).
	if perEngine["disk"]["barrier"] != 2 {
		t.Errorf("%d barrier rows, want 2", perEngine["disk"]["barrier"])
	}
	for _, name := range engineNames() {
		want := map[string]int{"preload": 1, "getlog": 2, "deleterange": 1, "storelogs": 4, "disk": 5}
		for k, v := range want {
			if got := perEngine[name][k]; got != v && (k != "disk" || name != "segkv" || got != 6) {
				t.Errorf("%s: %d %s rows, want %d", name, got, k, v)
			}
		}
	}
}

// TestTableAndProgress runs one engine with the table report, the plot and
// a stderr taken for a terminal.
func TestTableAndProgress(t *testing.T) {
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	plot := filepath.Join(dir, "lat.svg")
	args := []string{"-n", "500", "-truncate", "400", "-duration", "20ms", "-rounds", "1", "-batches", "8",
		"-gets", "100", "-idle", "0s", "-barriers", "10", "-engines", "segkv", "-dir", dir, "-plot", plot}
	if err := run(args, &out, &errOut, true); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Fatalf("plot is not well-formed XML: %v", err)
	}
	if n := strings.Count(string(svg), "<polyline"); n != 2 {
		t.Errorf("plot has %d curves, want 2 (fresh, truncated)", n)
	}
	s := out.String()
	for _, want := range []string{"StoreLogs x8, fresh: p50 / p99 us", "GetLog over 500 entries", "DeleteRange(1, 400)",
		"after Close", "files of \"before\" removed", "the disk's own barrier", "GetLog at a random index of 500, mean <= 3 us", "entries/s after preload + truncation"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if !strings.Contains(errOut.String(), "\r\033[K") {
		t.Errorf("no progress on a terminal: %q", errOut.String())
	}
	// Only segkv: no target against raft-wal.
	if strings.Contains(s, "segkv <= raft-wal") {
		t.Errorf("a raft-wal target without raft-wal:\n%s", s)
	}
}
