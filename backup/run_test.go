package backup

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestRunSealsAndStops: Run with a seal period backs up writes nobody
// sealed, within a generous deadline, and stops on cancel.
func TestRunSealsAndStops(t *testing.T) {
	sc := newScenario(t)
	b := openURL(t, "mem://")
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLoop(StoreSource(sc.s), b, &Options{Poll: 5 * time.Millisecond, SealEvery: 10 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for i := range 50 {
		sc.put(fmt.Sprintf("k%02d", i), "v")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var records uint64
		if c, err := loadChain(context.Background(), b, 0); err == nil {
			for _, s := range c.st.segs {
				records += s.Records
			}
		}
		if records == 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop backed up %d of 50 records", records)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
	dir := filepath.Join(t.TempDir(), "r")
	if _, err := Restore(context.Background(), b, dir, nil); err != nil {
		t.Fatal(err)
	}
	if got := readStore(t, dir); len(got) != 50 {
		t.Fatalf("restored %d keys", len(got))
	}
}

// TestTwoRunningLoops: two loops running on one prefix; one of them stops
// with ErrFenced while writes continue, and the chain restores.
func TestTwoRunningLoops(t *testing.T) {
	sc := newScenario(t)
	b := openURL(t, "mem://")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for range 2 {
		l := NewLoop(StoreSource(sc.s), b, &Options{Poll: time.Millisecond})
		go func() { done <- l.Run(ctx) }()
	}
	var first error
	for i := 0; first == nil; i++ {
		sc.round()
		select {
		case first = <-done:
		case <-time.After(5 * time.Millisecond):
		}
		if i > 20000 {
			t.Fatal("neither loop was fenced")
		}
	}
	if !errors.Is(first, ErrFenced) {
		t.Fatalf("first loop to stop: %v", first)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the other loop: %v", err)
	}
	if _, err := Restore(context.Background(), b, filepath.Join(t.TempDir(), "r"), nil); err != nil {
		t.Fatal(err)
	}
}
