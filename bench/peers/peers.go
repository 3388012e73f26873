// Package peers adapts segkv and the embedded stores it is compared with
// (Pebble, goleveldb, Badger, bbolt) to one small interface, so that
// cmd/peerbench can run the same workload against each of them in one process.
//
// The adapters are deliberately thin: each uses the peer's ordinary public API
// the way its documentation recommends for that job, with the settings stated
// by Config, so that a reader can judge whether the comparison is fair.
package peers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Mode selects how an engine is opened: for writes that must be durable when
// they return, or for a bulk load whose durability is one sync at the end.
type Mode int

const (
	// Durable: every Put is durable before it returns.
	Durable Mode = iota
	// Bulk: writes are not synced; a Batch with sync=true (the last one of a
	// load) makes everything before it durable.
	Bulk
)

func (m Mode) String() string {
	switch m {
	case Durable:
		return "durable"
	case Bulk:
		return "bulk"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Engine opens stores of one kind.
type Engine interface {
	// Name is the short name used on the command line and in tables.
	Name() string
	// Config describes, in one line, the settings Open uses in the mode:
	// sync behaviour, caches, filters. It goes into the report verbatim.
	Config(m Mode) string
	// Open opens (creating if needed) the store in dir.
	Open(dir string, m Mode) (DB, error)
}

// DB is an open store.
type DB interface {
	// Put writes one key. In Durable mode it is durable when Put returns.
	// Safe for concurrent use.
	Put(key, value []byte) error
	// Batch writes keys[i]=values[i] atomically. If sync is true everything
	// written so far is durable when Batch returns.
	Batch(keys, values [][]byte, sync bool) error
	// DeleteBatch deletes keys atomically, in one batch (a key that does
	// not exist is no error). If sync is true everything written so far is
	// durable when it returns.
	DeleteBatch(keys [][]byte, sync bool) error
	// Get reports whether key exists and, when it does, returns its value
	// appended to dst[:0] (or a fresh slice the engine already allocated).
	// Peers that lend their value only inside a transaction or until a closer
	// runs pay one 100-byte copy here, as any caller keeping the value would.
	// Safe for concurrent use.
	Get(key, dst []byte) (value []byte, found bool, err error)
	// Scan visits up to n keys in key order, each with its value, and
	// returns how many it visited. Forward (reverse=false) it starts at the
	// first key >= start; reverse it starts at the last key < start (strictly
	// less, so a forward and a reverse scan from the same start never share a
	// key) and walks down. A nil start means the first key (reverse: the
	// last). fn's key and value are valid only during the call: a caller
	// that keeps them copies them, and every adapter leaves that copy to fn
	// (segkv's Iterator.Value already returns a fresh copy, which it pays on
	// top). Each Scan opens one iterator (in a read transaction where the
	// engine has them) with the engine's default iterator options and no
	// bounds, seeks once, steps, and closes it. Safe for concurrent use.
	Scan(start []byte, n int, reverse bool, fn func(key, value []byte)) (int, error)
	// Close makes every write durable (where the mode promises it) and
	// releases the store.
	Close() error
}

// Settler is implemented by a DB whose engine does background work after
// writes (merges, compactions) and can tell when it has none left.
type Settler interface {
	// Settle moves what the engine holds in memory (a live file, a
	// memtable) to its sorted files and returns once the engine reports no
	// background work pending or running, polling every poll, or with ctx's
	// error.
	Settle(ctx context.Context, poll time.Duration) error
}

// settle polls idle until it reports true or ctx ends.
func settle(ctx context.Context, poll time.Duration, idle func() bool) error {
	for !idle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
	return nil
}

// ErrUnknownEngine is returned by Lookup for a name no engine has.
var ErrUnknownEngine = errors.New("peers: unknown engine")

var registry = map[string]Engine{}

// order is the default running order: segkv first, then its peers.
var order = []string{"segkv", "pebble", "goleveldb", "badger", "bbolt"}

// variants are engines that run only when named: another configuration of
// an engine in order (segkv-raw: segkv with compression off).
var variants = []string{"segkv-raw"}

func register(e Engine) { registry[e.Name()] = e }

// Names returns the registered engine names in the default order, without
// the variants (which Lookup still finds).
func Names() []string {
	var out []string
	for _, n := range order {
		if _, ok := registry[n]; ok {
			out = append(out, n)
		}
	}
	// Anything registered but not in order (none today) goes last, sorted,
	// so that adding an adapter cannot silently hide it.
	var extra []string
	for n := range registry {
		if !contains(order, n) && !contains(variants, n) {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	return append(out, extra...)
}

// Lookup returns the engine with the given name.
func Lookup(name string) (Engine, error) {
	e, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (have %s)", ErrUnknownEngine, name, strings.Join(append(Names(), variants...), ", "))
	}
	return e, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
