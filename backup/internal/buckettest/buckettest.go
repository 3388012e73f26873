// Package buckettest holds the backup's test doubles for buckets (a
// counting wrapper, a fault-injecting one) and the conformance suite every
// Bucket adapter must pass.
package buckettest

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/segkv/segkv/backup/bucket"
)

// Counting wraps a Bucket and records every successful put (key and size)
// and every get that found its object.
type Counting struct {
	bucket.Bucket
	mu   sync.Mutex
	Puts map[string]int // successful puts per key
	// PutBytes per key prefix directory ("segments/", "edits/", ...).
	PutBytes map[string]int64
	Gets     map[string]int
	Order    []string // keys put, in order
}

// NewCounting wraps b.
func NewCounting(b bucket.Bucket) *Counting {
	return &Counting{Bucket: b, Puts: map[string]int{}, PutBytes: map[string]int64{}, Gets: map[string]int{}}
}

func dirOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i+1]
	}
	return ""
}

// PutIfAbsent implements bucket.Bucket.
func (c *Counting) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	err := c.Bucket.PutIfAbsent(ctx, key, r, size)
	if err == nil {
		c.mu.Lock()
		c.Puts[key]++
		c.PutBytes[dirOf(key)] += size
		c.Order = append(c.Order, key)
		c.mu.Unlock()
	}
	return err
}

// Get implements bucket.Bucket.
func (c *Counting) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	rc, err := c.Bucket.Get(ctx, key, off, length)
	if err == nil {
		c.mu.Lock()
		c.Gets[key]++
		c.mu.Unlock()
	}
	return rc, err
}

// ErrInjected is the error Faulty injects.
var ErrInjected = errors.New("buckettest: injected fault")

// Faulty wraps a Bucket and fails puts on request. AfterPut, if set,
// decides after a put reached the bucket whether to report it failed
// anyway (an ambiguous failure: the object exists, the caller sees an
// error).
type Faulty struct {
	bucket.Bucket
	mu sync.Mutex
	// FailPut, if set, is asked before each put (with the put's ordinal,
	// from 1) whether to fail it without writing.
	FailPut func(n int, key string) bool
	// LoseReply, if set, is asked after a successful put whether to
	// report an error anyway.
	LoseReply func(n int, key string) bool
	puts      int
}

// PutIfAbsent implements bucket.Bucket.
func (f *Faulty) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	f.mu.Lock()
	f.puts++
	n := f.puts
	fail, lose := f.FailPut, f.LoseReply
	f.mu.Unlock()
	if fail != nil && fail(n, key) {
		io.Copy(io.Discard, r) // a failed upload still consumed its body
		return ErrInjected
	}
	err := f.Bucket.PutIfAbsent(ctx, key, r, size)
	if err == nil && lose != nil && lose(n, key) {
		return ErrInjected
	}
	return err
}

// Puts returns how many puts were attempted.
func (f *Faulty) Puts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts
}

// Conformance checks the Bucket contract on a fresh, empty bucket.
func Conformance(t *testing.T, b bucket.Bucket) {
	ctx := context.Background()
	put := func(key, val string) error {
		return b.PutIfAbsent(ctx, key, strings.NewReader(val), int64(len(val)))
	}
	get := func(key string, off, n int64) (string, error) {
		rc, err := b.Get(ctx, key, off, n)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		return string(data), err
	}
	if err := put("d/a", "hello"); err != nil {
		t.Fatalf("put: %v", err)
	}
	if err := put("d/a", "other"); !errors.Is(err, bucket.ErrExists) {
		t.Fatalf("second put: %v, want ErrExists", err)
	}
	if v, err := get("d/a", 0, -1); err != nil || v != "hello" {
		t.Fatalf("get = %q, %v", v, err)
	}
	if v, err := get("d/a", 1, 3); err != nil || v != "ell" {
		t.Fatalf("ranged get = %q, %v", v, err)
	}
	if _, err := get("d/missing", 0, -1); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if err := b.PutIfAbsent(ctx, "d/short", strings.NewReader("abc"), 5); err == nil {
		t.Fatalf("short reader accepted")
	}
	if _, err := get("d/short", 0, -1); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("short put left an object: %v", err)
	}
	for _, k := range []string{"d/c", "d/b", "e/x"} {
		if err := put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	list := func(prefix, after string, limit int) string {
		objs, err := b.List(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		var keys []string
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		return strings.Join(keys, ",")
	}
	if got := list("d/", "", 0); got != "d/a,d/b,d/c" {
		t.Fatalf("list = %s", got)
	}
	if got := list("d/", "d/a", 1); got != "d/b" {
		t.Fatalf("list after = %s", got)
	}
	if got := list("d/b", "", 0); got != "d/b" {
		t.Fatalf("list name prefix = %s", got)
	}
	if got := list("nope/", "", 0); got != "" {
		t.Fatalf("list empty = %s", got)
	}
	if err := b.Delete(ctx, "d/b"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "d/b"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	if got := list("d/", "", 0); got != "d/a,d/c" {
		t.Fatalf("list after delete = %s", got)
	}
	// Racing put-if-absent: exactly one winner.
	var wg sync.WaitGroup
	wins := make(chan int, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := put("race/k", string(rune('a'+i))); err == nil {
				wins <- i
			} else if !errors.Is(err, bucket.ErrExists) {
				t.Errorf("racing put: %v", err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	var n int
	var winner int
	for w := range wins {
		n++
		winner = w
	}
	if n != 1 {
		t.Fatalf("%d racing puts won", n)
	}
	if v, _ := get("race/k", 0, -1); v != string(rune('a'+winner)) {
		t.Fatalf("race object = %q, winner %d", v, winner)
	}
}
