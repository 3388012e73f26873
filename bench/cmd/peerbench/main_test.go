package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
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
}

// TestJSONShape runs a tiny end-to-end bench and checks every line is a JSON
// object of a known kind with the fields the docs promise.
func TestJSONShape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs durable puts on the real disk")
	}
	var out bytes.Buffer
	args := []string{"-n", "300", "-duration", "40ms", "-gets", "200", "-engines", "segkv,bbolt", "-dir", t.TempDir(), "-json", "-q"}
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
		}
	}
	// 8 workloads x 2 engines; get1/get2 have a bbolt target, reopen and
	// miss1 an absolute one (no goleveldb or pebble in this run).
	if kinds["run"] != 1 || kinds["engine"] != 2 || kinds["result"] != 16 || kinds["target"] != 4 {
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
		},
	}
	var out bytes.Buffer
	if err := writeTable(&out, res); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"1.50x", "1,500 ops/s", "MISSED: segkv needs 1.25x", "met (1.15x headroom)"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}
