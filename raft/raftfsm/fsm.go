// Package raftfsm is a hashicorp/raft FSM whose state is a segkv store.
//
// Commands are batches of writes (Command), applied in log order, each with
// the entry's index written in the same atomic batch under a reserved key: a
// replica that restarts knows exactly which entries its store holds and never
// applies one twice, whether raft restores a snapshot on start or replays the
// log onto the existing store (Config.NoSnapshotRestoreOnStart).
//
// Snapshot seals the store and pins its sealed segments; Persist streams
// their exports in a container with a checksum trailer (docs/FORMAT.md,
// "Raft FSM snapshot"); Restore replaces the store's whole state by the
// container's segments in one manifest commit, reusing the segments the
// store already holds (a restart restoring its own latest snapshot copies
// nothing) and copying only the others.
package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/segkv/segkv/segstore"
)

// ReservedPrefix starts every key the FSM keeps for itself. Commands may not
// put or delete such keys (Apply answers ErrReservedKey); a DeleteRange
// over them leaves them alone. Readers iterating the whole store see them
// last and should bound their iterators below it.
const ReservedPrefix = "\xff\xff\xff\xffsegkv-raftfsm/"

// appliedKey holds the index of the last log entry applied, 8 bytes
// big-endian.
var appliedKey = []byte(ReservedPrefix + "applied")

// ErrReservedKey is the response to a command that writes a key under
// ReservedPrefix: it is refused whole, on every replica.
var ErrReservedKey = errors.New("raftfsm: key under the reserved prefix")

// ErrStopped is returned by Apply and Snapshot after a write of the store
// failed: the FSM no longer applies entries, so that a snapshot can never
// capture a state that skipped one. Reopen the store (restart the node) to
// recover; it resumes after the last entry it holds.
var ErrStopped = errors.New("raftfsm: stopped applying after a store failure; restart the node")

// Options configures an FSM. A nil *Options means the defaults.
type Options struct {
	// Store configures the segkv store; nil means its durable defaults.
	// Writes the FSM applies need not be durable for raft's sake (the log
	// is), but an entry's applied index is written with its effects either
	// way, so the store never holds half an entry.
	Store *segstore.Options
	// Logger receives the FSM's errors; nil discards.
	Logger *slog.Logger
}

// FSM is a raft.FSM and raft.BatchingFSM over a segkv store. raft calls
// Apply, ApplyBatch, Snapshot and Restore from one goroutine; reads through
// Store may run concurrently with them.
type FSM struct {
	store *segstore.Store
	log   *slog.Logger

	mu      sync.Mutex // guards applied and err against concurrent readers
	applied uint64
	err     error
	scratch *segstore.Batch // validates one command at a time
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// Open opens (creating if needed) the FSM's store in dir.
func Open(dir string, opts *Options) (*FSM, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	st, err := segstore.Open(dir, o.Store)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: %w", err)
	}
	f := &FSM{store: st, log: o.Logger}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.applied, err = readApplied(st); err != nil {
		st.Close()
		return nil, err
	}
	return f, nil
}

func readApplied(st *segstore.Store) (uint64, error) {
	v, err := st.Get(appliedKey)
	if errors.Is(err, segstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raftfsm: read applied index: %w", err)
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftfsm: applied index of %d bytes: %w", len(v), segstore.ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}

// Store returns the store, for reads: Get, iterators, snapshots. Every write
// must go through raft (Command), or replicas diverge.
func (f *FSM) Store() *segstore.Store { return f.store }

// AppliedIndex returns the index of the last log entry applied.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// Close closes the store.
func (f *FSM) Close() error { return f.store.Close() }

// Apply applies one log entry; see ApplyBatch.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies the entries in order as one atomic batch of the store,
// with the last index as the applied index: one write (and one sync under
// SyncAlways) for all of them. Each entry's response is nil, or the error
// that made the FSM refuse its command (ErrBadCommand, ErrReservedKey, or a
// store validation error such as segstore.ErrKeyTooLarge): a refused command
// changes nothing, identically on every replica. Entries at or below the
// applied index (replayed after a restart) are skipped. Entries other than
// commands only advance the applied index.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	resp := make([]interface{}, len(logs))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		for i := range resp {
			resp[i] = f.err
		}
		return resp
	}
	b := f.store.NewBatch()
	last := f.applied
	for i, l := range logs {
		if l == nil || l.Index <= last {
			continue
		}
		last = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		ops, err := f.validate(l.Data)
		if err != nil {
			resp[i] = err
			continue
		}
		for _, o := range ops {
			addOp(b, o)
		}
	}
	if last == f.applied {
		return resp
	}
	var idx [8]byte
	binary.BigEndian.PutUint64(idx[:], last)
	// Last in the batch: a DeleteRange of the command cannot cover it.
	if err := b.Put(appliedKey, idx[:]); err == nil {
		err = f.store.Apply(b)
		if err == nil {
			f.applied = last
			return resp
		}
		f.err = fmt.Errorf("%w: applying entries up to %d: %w", ErrStopped, last, err)
	} else {
		f.err = fmt.Errorf("%w: %w", ErrStopped, err)
	}
	f.log.Error("raftfsm: store write failed; the FSM stops applying", "err", f.err)
	for i := range resp {
		resp[i] = f.err
	}
	return resp
}

// validate decodes a command and checks every operation against the
// store's limits, so that a bad command is refused alone rather than
// poisoning the batch it would share with others.
func (f *FSM) validate(data []byte) ([]op, error) {
	ops, err := parseCommand(data)
	if err != nil {
		return nil, err
	}
	if f.scratch == nil {
		f.scratch = f.store.NewBatch()
	}
	f.scratch.Reset()
	for _, o := range ops {
		if o.kind != opDeleteRange && bytes.HasPrefix(o.key, []byte(ReservedPrefix)) {
			return nil, fmt.Errorf("%w: %q", ErrReservedKey, o.key)
		}
		if err := addOp(f.scratch, o); err != nil {
			return nil, err
		}
	}
	return ops, nil
}

func addOp(b *segstore.Batch, o op) error {
	switch o.kind {
	case opPut:
		return b.Put(o.key, o.value)
	case opDelete:
		return b.Delete(o.key)
	default:
		return b.DeleteRange(o.key, o.value)
	}
}

// failure returns the store failure that stopped the FSM, if any.
func (f *FSM) failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Snapshot seals the store and pins its segments: the state at the applied
// index, which Persist streams while Apply goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.failure(); err != nil {
		return nil, err
	}
	sn, err := f.store.NewSealedSnapshot()
	if err != nil {
		return nil, fmt.Errorf("raftfsm: snapshot: %w", err)
	}
	v, err := sn.Get(appliedKey)
	var applied uint64
	switch {
	case err == nil && len(v) == 8:
		applied = binary.BigEndian.Uint64(v)
	case errors.Is(err, segstore.ErrNotFound):
	case err == nil:
		err = fmt.Errorf("applied index of %d bytes: %w", len(v), segstore.ErrCorrupt)
		fallthrough
	default:
		sn.Close()
		return nil, fmt.Errorf("raftfsm: snapshot: %w", err)
	}
	return &snapshot{sn: sn, segs: sn.Segments(), applied: applied}, nil
}

// Restore replaces the store's whole state by the snapshot in rc, in one
// manifest commit; see the package comment. On any error (a damaged or
// truncated container, an I/O error) the state is unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	applied, committed, err := restore(f.store, rc)
	if committed {
		// The store holds the new state, whatever else went wrong: the
		// applied index follows it.
		f.applied = applied
	}
	if err != nil {
		err = fmt.Errorf("raftfsm: restore: %w", err)
		if committed {
			// Installed, but not the state raft asked for: stop rather
			// than apply entries onto it.
			f.err = fmt.Errorf("%w: %w", ErrStopped, err)
		}
		return err
	}
	f.applied = applied
	return nil
}
