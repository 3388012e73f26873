package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRun runs the whole example: elections, a leader stopped and
// restarted, a snapshot install to a new node, and the final comparison of
// every FSM, which makes run fail if they differ.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out bytes.Buffer
	err := run(ctx, config{Dir: dir}, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"n4 joined", "installed a snapshot",
		"OK: all 4 nodes hold the same 450 keys",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// -dir keeps every node's directories.
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		for _, sub := range []string{"raft", "fsm", "snapshots"} {
			if _, err := os.Stat(filepath.Join(dir, n, sub)); err != nil {
				t.Error(err)
			}
		}
	}
	// A directory that holds a cluster already is refused.
	if err := run(ctx, config{Dir: dir}, &out); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("run in a used directory: %v", err)
	}
}
