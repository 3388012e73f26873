package raftfsm_test

// Cluster tests: real hashicorp/raft nodes, each with a raftstore log and
// stable store, a FileSnapshotStore and a raftfsm FSM in its own directory,
// talking over raft's in-memory transport so that the tests can cut and
// heal links. Every test keeps a model of the acknowledged writes and checks
// that every FSM converges to exactly it.
//
// Nothing here times or counts background work: the tests wait (polling,
// with generous deadlines) for conditions that must eventually hold, and
// retry writes that fail because leadership moved.

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/raft/raftfsm"
	"github.com/segkv/segkv/raft/raftstore"
	"github.com/segkv/segkv/segstore"
)

// waitFor bounds every wait: far above what any step takes, even under
// -race on a loaded machine.
const waitFor = 20 * time.Second

// countingFSM counts the snapshots raft installed into the FSM: Restore is
// called only by raft, at start (its own latest snapshot) or when a leader
// sends one. ApplyBatch is promoted, so raft still batches.
type countingFSM struct {
	*raftfsm.FSM
	// restores counts the calls, from their start: the restored state is
	// visible to readers before Restore returns, and a test that sees it
	// must see the count too. Failed calls are counted in restoreErrs as
	// well, and every test requires none.
	restores    atomic.Int64
	restoreErrs atomic.Int64
	lastErr     atomic.Value // error
}

func (f *countingFSM) Restore(rc io.ReadCloser) error {
	f.restores.Add(1)
	err := f.FSM.Restore(rc)
	if err != nil {
		f.restoreErrs.Add(1)
		f.lastErr.Store(err)
	}
	return err
}

var _ raft.BatchingFSM = (*countingFSM)(nil)

// logBuffer collects raft's logs, shown only when a test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const logKeep = 256 << 10

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*logKeep {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-logKeep:]...)
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) > logKeep {
		return "...\n" + string(b.buf[len(b.buf)-logKeep:])
	}
	return string(b.buf)
}

type node struct {
	id   raft.ServerID
	addr raft.ServerAddress
	dir  string

	trans *raft.InmemTransport
	logs  *raftstore.Store
	snaps *raft.FileSnapshotStore
	fsm   *countingFSM
	raft  *raft.Raft

	restores int64 // Restore calls over the node's past lives
	// startRestores is the FSM's Restore calls once NewRaft returned (1
	// if it restored the node's latest snapshot, else 0).
	startRestores int64
	restoreErrs   int64
}

func (n *node) running() bool { return n.raft != nil }

func (n *node) stat(key string) uint64 {
	v, err := strconv.ParseUint(n.raft.Stats()[key], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// totalRestores returns the Restore calls over every life of the node.
func (n *node) totalRestores() int64 {
	r := n.restores
	if n.fsm != nil {
		r += n.fsm.restores.Load()
	}
	return r
}

type clusterOptions struct {
	// snapshotThreshold and trailingLogs make raft snapshot and truncate
	// its logs often; zero keeps raft's defaults (no snapshot in a test).
	snapshotThreshold uint64
	trailingLogs      uint64
	// noSnapshotRestoreOnStart is Config.NoSnapshotRestoreOnStart.
	noSnapshotRestoreOnStart bool
}

type cluster struct {
	t     *testing.T
	opts  clusterOptions
	base  string // every node's directory is in it
	nodes []*node
	logs  *logBuffer
	// cut holds the links that do not carry messages, both ways.
	cut map[[2]raft.ServerAddress]bool
}

// newCluster starts n nodes and bootstraps them as one cluster.
func newCluster(t *testing.T, n int, opts clusterOptions) *cluster {
	t.Helper()
	// The directory first: cleanups run last first, so the nodes stop
	// before it is removed.
	base := t.TempDir()
	c := &cluster{t: t, opts: opts, base: base, logs: &logBuffer{}, cut: map[[2]raft.ServerAddress]bool{}}
	t.Cleanup(func() {
		defer func() {
			// Also when stopping failed.
			if t.Failed() {
				t.Logf("raft logs:\n%s", c.logs)
			}
		}()
		c.stopAll()
	})
	var servers []raft.Server
	for i := 0; i < n; i++ {
		nd := c.add()
		servers = append(servers, raft.Server{ID: nd.id, Address: nd.addr, Suffrage: raft.Voter})
	}
	// Every server bootstrapped with the same configuration, on disk
	// before it starts: any of them can win the first election.
	c.startAll(c.nodes, &raft.Configuration{Servers: servers})
	return c
}

// add creates a node (not started) with empty directories.
func (c *cluster) add() *node {
	i := len(c.nodes) + 1
	n := &node{
		id:   raft.ServerID(fmt.Sprintf("n%d", i)),
		addr: raft.ServerAddress(fmt.Sprintf("addr%d", i)),
		dir:  filepath.Join(c.base, fmt.Sprintf("n%d", i)),
	}
	c.nodes = append(c.nodes, n)
	return n
}

func (c *cluster) config(n *node) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = n.id
	conf.HeartbeatTimeout = 100 * time.Millisecond
	conf.ElectionTimeout = 100 * time.Millisecond
	conf.LeaderLeaseTimeout = 100 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.LogOutput = c.logs
	conf.LogLevel = "INFO"
	if c.opts.snapshotThreshold > 0 {
		conf.SnapshotThreshold = c.opts.snapshotThreshold
		conf.SnapshotInterval = 100 * time.Millisecond
	}
	if c.opts.trailingLogs > 0 {
		conf.TrailingLogs = c.opts.trailingLogs
	}
	conf.NoSnapshotRestoreOnStart = c.opts.noSnapshotRestoreOnStart
	return conf
}

// start opens the node's stores from its directories and starts raft.
func (c *cluster) start(n *node) {
	c.t.Helper()
	c.startAll([]*node{n}, nil)
}

// startAll starts the nodes together, first bootstrapping their stores
// with bootstrap if it is not nil.
func (c *cluster) startAll(nodes []*node, bootstrap *raft.Configuration) {
	t := c.t
	t.Helper()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		require.False(t, n.running(), n.id)
		wg.Go(func() { errs[i] = c.open(n, bootstrap) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	c.wire()
}

// open opens n's stores and starts its raft, unconnected.
func (c *cluster) open(n *node, bootstrap *raft.Configuration) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", n.id, err)
			if n.fsm != nil {
				n.fsm.Close()
			}
			if n.logs != nil {
				n.logs.Close()
			}
			n.fsm, n.logs, n.snaps, n.trans = nil, nil, nil, nil
		}
	}()
	if n.logs, err = raftstore.Open(filepath.Join(n.dir, "raft"), &raftstore.Options{SegmentSize: 64 << 10}); err != nil {
		return err
	}
	f, err := raftfsm.Open(filepath.Join(n.dir, "fsm"), &raftfsm.Options{
		// Small segments: snapshots carry several, and Restore can reuse
		// some of them.
		Store: &segstore.Options{SegmentSize: 16 << 10},
	})
	if err != nil {
		return err
	}
	n.fsm = &countingFSM{FSM: f}
	if n.snaps, err = raft.NewFileSnapshotStore(n.dir, 2, c.logs); err != nil {
		return err
	}
	_, n.trans = raft.NewInmemTransport(n.addr)
	if bootstrap != nil {
		if err := raft.BootstrapCluster(c.config(n), n.logs, n.logs, n.snaps, n.trans, *bootstrap); err != nil {
			return err
		}
	}
	r, err := raft.NewRaft(c.config(n), n.fsm, n.logs, n.logs, n.snaps, n.trans)
	if err != nil {
		return err
	}
	// NewRaft restores the latest snapshot, if any, before it returns.
	n.startRestores = n.fsm.restores.Load()
	n.raft = r
	return nil
}

// stop shuts the node down and closes its stores; its directories stay.
func (c *cluster) stop(n *node) {
	t := c.t
	t.Helper()
	require.NoError(t, n.raft.Shutdown().Error())
	n.raft = nil
	n.restores += n.fsm.restores.Load()
	n.restoreErrs += n.fsm.restoreErrs.Load()
	require.NoError(t, n.fsm.Close())
	require.NoError(t, n.logs.Close())
	n.fsm, n.logs, n.snaps, n.trans = nil, nil, nil, nil
	c.wire()
}

// stopAll stops every running node, together: a node shutting down waits
// for its RPCs to the nodes already gone to time out.
func (c *cluster) stopAll() {
	t := c.t
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range c.running() {
		wg.Go(func() { n.raft.Shutdown().Error() })
	}
	wg.Wait()
	for _, n := range c.running() {
		c.stop(n)
	}
}

// wire connects every pair of running nodes whose link is not cut, and
// disconnects the others.
func (c *cluster) wire() {
	for _, a := range c.nodes {
		if !a.running() {
			continue
		}
		for _, b := range c.nodes {
			if a == b {
				continue
			}
			if b.running() && !c.cut[[2]raft.ServerAddress{a.addr, b.addr}] {
				a.trans.Connect(b.addr, b.trans)
			} else {
				a.trans.Disconnect(b.addr)
			}
		}
	}
}

// isolate cuts every link between n and the other nodes.
func (c *cluster) isolate(n *node) {
	for _, o := range c.nodes {
		if o != n {
			c.cut[[2]raft.ServerAddress{n.addr, o.addr}] = true
			c.cut[[2]raft.ServerAddress{o.addr, n.addr}] = true
		}
	}
	c.wire()
}

// heal restores every link.
func (c *cluster) heal() {
	clear(c.cut)
	c.wire()
}

func (c *cluster) running() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.running() {
			out = append(out, n)
		}
	}
	return out
}

func (c *cluster) others(n *node) []*node {
	var out []*node
	for _, o := range c.running() {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// leader waits until one of among (all running nodes if none) is the
// leader and returns it. During a partition, pass the nodes of one side.
func (c *cluster) leader(among ...*node) *node {
	t := c.t
	t.Helper()
	if len(among) == 0 {
		among = c.running()
	}
	deadline := time.Now().Add(waitFor)
	for {
		var best *node
		var bestTerm uint64
		for _, n := range among {
			if n.running() && n.raft.State() == raft.Leader {
				// A deposed leader may not know yet: prefer the newest term.
				if term := n.stat("term"); best == nil || term > bestTerm {
					best, bestTerm = n, term
				}
			}
		}
		if best != nil {
			return best
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader among %v after %v", ids(among), waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(nodes []*node) []raft.ServerID {
	var out []raft.ServerID
	for _, n := range nodes {
		out = append(out, n.id)
	}
	return out
}

// model is the store's expected contents.
type model map[string]string

// op is one write of a command, mirrored in the model once acknowledged.
type op struct {
	kind       byte // 'p' put, 'd' delete, 'r' delete range
	key, value string
}

func (m model) apply(ops []op) {
	for _, o := range ops {
		switch o.kind {
		case 'p':
			m[o.key] = o.value
		case 'd':
			delete(m, o.key)
		case 'r':
			for k := range m {
				if k >= o.key && k < o.value {
					delete(m, k)
				}
			}
		}
	}
}

func encode(ops []op) []byte {
	var cmd raftfsm.Command
	for _, o := range ops {
		switch o.kind {
		case 'p':
			cmd.Put([]byte(o.key), []byte(o.value))
		case 'd':
			cmd.Delete([]byte(o.key))
		case 'r':
			cmd.DeleteRange([]byte(o.key), []byte(o.value))
		}
	}
	return cmd.Bytes()
}

// submit applies the commands through the leader among the given nodes
// (every running node if none), retrying those whose future fails until a
// leader commits them, and returns the FSM's responses. The commands are in
// flight together, so they must commute: they touch disjoint keys. A retry
// resubmits the same command, so they must be idempotent: they are puts,
// deletes and range deletes of fixed keys.
//
// A failed attempt may still commit (leadership moved after it was
// replicated), but never after a command submitted once submit has
// returned: any entry created later commits at a higher index. So the
// model, updated in submission order, stays exact.
func (c *cluster) submit(cmds [][]byte, among ...*node) []interface{} {
	t := c.t
	t.Helper()
	resps := make([]interface{}, len(cmds))
	pending := make([]int, len(cmds))
	for i := range pending {
		pending[i] = i
	}
	deadline := time.Now().Add(waitFor)
	for {
		l := c.leader(among...)
		futures := make([]raft.ApplyFuture, len(pending))
		for i, p := range pending {
			futures[i] = l.raft.Apply(cmds[p], 5*time.Second)
		}
		var failed []int
		var lastErr error
		for i, f := range futures {
			if err := f.Error(); err != nil {
				failed, lastErr = append(failed, pending[i]), err
				continue
			}
			resps[pending[i]] = f.Response()
		}
		if len(failed) == 0 {
			return resps
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d commands not committed within %v; last error from %s: %v", len(failed), waitFor, l.id, lastErr)
		}
		pending = failed
		time.Sleep(5 * time.Millisecond)
	}
}

// writer produces commands over keys "<prefix>/NNNN" (fixed width, so a
// range of keys is a range of numbers): mostly puts of new keys, some
// overwrites, deletes and range deletes, and now and then a command the
// FSM must refuse.
type writer struct {
	c      *cluster
	m      model
	rng    *rand.Rand
	next   int
	prefix string
}

func (c *cluster) writer(m model, prefix string, seed uint64) *writer {
	return &writer{c: c, m: m, rng: rand.New(rand.NewPCG(seed, 1)), prefix: prefix}
}

func (w *writer) key(i int) string { return fmt.Sprintf("%s/%04d", w.prefix, i) }

type command struct {
	ops     []op
	touches []int // the numbers of the keys it writes
	refused bool  // the FSM must answer ErrReservedKey
}

func (w *writer) command() command {
	var c command
	switch r := w.rng.IntN(20); {
	case r == 0:
		// Refused whole on every replica: a put under the reserved
		// prefix, next to a put that must not happen either. The key is
		// never written by another command: it must not exist anywhere.
		c.refused = true
		c.ops = []op{{kind: 'p', key: w.key(w.next), value: "never"}, {kind: 'p', key: raftfsm.ReservedPrefix + "x", value: "x"}}
		c.touches = []int{w.next}
		w.next++
		return c
	case r == 1 && w.next > 10:
		a := w.rng.IntN(w.next - 5)
		b := a + 1 + w.rng.IntN(4)
		c.ops = append(c.ops, op{kind: 'r', key: w.key(a), value: w.key(b)})
		for i := a; i < b; i++ {
			c.touches = append(c.touches, i)
		}
	case r <= 3 && w.next > 0:
		i := w.rng.IntN(w.next)
		c.ops = append(c.ops, op{kind: 'd', key: w.key(i)})
		c.touches = append(c.touches, i)
	case r <= 6 && w.next > 0:
		i := w.rng.IntN(w.next)
		c.ops = append(c.ops, op{kind: 'p', key: w.key(i), value: fmt.Sprintf("over-%d", w.rng.Uint32())})
		c.touches = append(c.touches, i)
	}
	for range 1 + w.rng.IntN(4) {
		k := w.key(w.next)
		c.ops = append(c.ops, op{kind: 'p', key: k, value: strings.Repeat(k+";", 1+w.rng.IntN(8))})
		c.touches = append(c.touches, w.next)
		w.next++
	}
	return c
}

// window bounds the commands in flight together.
const window = 8

// write submits n commands through the leader among the given nodes (every
// running node if none), in windows of commands over disjoint keys, checks
// every response and updates the model.
func (w *writer) write(n int, among ...*node) {
	t := w.c.t
	t.Helper()
	var cmds []command
	touched := map[int]bool{}
	flush := func() {
		t.Helper()
		data := make([][]byte, len(cmds))
		for i, c := range cmds {
			data[i] = encode(c.ops)
		}
		for i, resp := range w.c.submit(data, among...) {
			if cmds[i].refused {
				err, _ := resp.(error)
				require.ErrorIs(t, err, raftfsm.ErrReservedKey)
				continue
			}
			require.Nil(t, resp, "FSM response to an acknowledged command")
			w.m.apply(cmds[i].ops)
		}
		cmds = cmds[:0]
		clear(touched)
	}
	for range n {
		c := w.command()
		if len(cmds) == window || slices.ContainsFunc(c.touches, func(i int) bool { return touched[i] }) {
			flush()
		}
		cmds = append(cmds, c)
		for _, i := range c.touches {
			touched[i] = true
		}
	}
	flush()
}

// contents returns every key and value of n's FSM below the reserved
// prefix.
func contents(n *node) (model, error) {
	it, err := n.fsm.Store().NewIterator(&segstore.IterOptions{UpperBound: []byte(raftfsm.ReservedPrefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := model{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		out[string(it.Key())] = string(v)
	}
	return out, it.Err()
}

// diff describes how got differs from want, briefly.
func diff(got, want model) string {
	var missing, extra, wrong []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			missing = append(missing, k)
		} else if g != v {
			wrong = append(wrong, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra)+len(wrong) == 0 {
		return ""
	}
	first := func(s []string) []string {
		slices.Sort(s)
		return s[:min(len(s), 5)]
	}
	return fmt.Sprintf("%d keys, want %d: %d missing %q, %d unexpected %q, %d with another value %q",
		len(got), len(want), len(missing), first(missing), len(extra), first(extra), len(wrong), first(wrong))
}

// converge waits until the FSM of every given node (every running node if
// none) holds exactly m.
func (c *cluster) converge(m model, nodes ...*node) {
	t := c.t
	t.Helper()
	if len(nodes) == 0 {
		nodes = c.running()
	}
	deadline := time.Now().Add(waitFor)
	for {
		var problems []string
		for _, n := range nodes {
			got, err := contents(n)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", n.id, err))
			} else if d := diff(got, m); d != "" {
				problems = append(problems, fmt.Sprintf("%s (applied %d, raft stats %v): %s",
					n.id, n.fsm.AppliedIndex(), n.raft.Stats(), d))
			}
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("FSMs did not converge within %v:\n%s", waitFor, strings.Join(problems, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually waits until cond holds.
func (c *cluster) eventually(cond func() bool, msg string) {
	c.t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v: %s", waitFor, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// snapshot makes n take a snapshot, which also truncates its log to the
// trailing logs, and returns the snapshot's index.
func (c *cluster) snapshot(n *node) uint64 {
	t := c.t
	t.Helper()
	err := n.raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatalf("%s: snapshot: %v", n.id, err)
	}
	return n.stat("last_snapshot_index")
}

// truncate makes each node snapshot, which truncates its log to the
// trailing entries, until no log holds the entry at index need(): a node
// that lacks it can catch up only from a snapshot, whichever is the
// leader. If need() is too recent, it writes more through the nodes. It
// returns the smallest of the nodes' snapshot indexes.
func (c *cluster) truncate(w *writer, need func() uint64, nodes ...*node) uint64 {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		done := true
		var snap uint64
		for i, n := range nodes {
			idx := c.snapshot(n)
			if i == 0 || idx < snap {
				snap = idx
			}
			first, err := n.logs.FirstIndex()
			require.NoError(t, err)
			if first <= need() {
				done = false
			}
		}
		if done {
			return snap
		}
		require.True(t, time.Now().Before(deadline), "logs still hold index %d after %v", need(), waitFor)
		w.write(5, nodes...)
	}
}

// requireNoRestoreErrors checks that raft never had a snapshot refused by
// an FSM.
func (c *cluster) requireNoRestoreErrors() {
	c.t.Helper()
	for _, n := range c.nodes {
		errs := n.restoreErrs
		var last error
		if n.fsm != nil {
			errs += n.fsm.restoreErrs.Load()
			last, _ = n.fsm.lastErr.Load().(error)
		}
		require.Zero(c.t, errs, "%s: failed FSM Restores (last: %v)", n.id, last)
	}
}

func TestClusterLeaderLoss(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	m := model{}
	w := c.writer(m, "a", 1)
	w.write(30)
	c.converge(m)

	old := c.leader()
	c.stop(old)
	rest := c.others(old)
	nl := c.leader(rest...)
	require.NotEqual(t, old.id, nl.id)
	w.write(30, rest...)
	c.converge(m, rest...)

	// The old leader comes back from its directories and catches up: its
	// log and FSM hold everything up to its stop, the rest is replicated.
	c.start(old)
	c.converge(m)
	w.write(15)
	c.converge(m)
	require.Zero(t, old.totalRestores(), "no snapshot was ever taken")
	c.requireNoRestoreErrors()
}

func TestClusterPartition(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{})
	m := model{}
	w := c.writer(m, "a", 2)
	w.write(24)
	c.converge(m)

	old := c.leader()
	oldTerm := old.stat("term")
	c.isolate(old)
	// The isolated leader accepts writes until it notices it has lost its
	// quorum, but cannot commit any of them.
	var stale []raft.ApplyFuture
	staleKeys := model{}
	for i := range 5 {
		k := fmt.Sprintf("stale/%d", i)
		staleKeys[k] = "x"
		stale = append(stale, old.raft.Apply(encode([]op{{kind: 'p', key: k, value: "x"}}), time.Second))
	}
	majority := c.others(old)
	nl := c.leader(majority...)
	require.NotEqual(t, old.id, nl.id)
	require.Greater(t, nl.stat("term"), oldTerm)
	w.write(24, majority...)
	c.converge(m, majority...)
	var kinds []string
	for i, f := range stale {
		err := f.Error()
		require.Error(t, err, "stale write %d on the isolated leader committed", i)
		kinds = append(kinds, err.Error())
	}
	t.Logf("stale writes on the isolated leader failed with: %q", kinds)
	// Its FSM never saw them: only committed entries are applied.
	got, err := contents(old)
	require.NoError(t, err)
	for k := range staleKeys {
		require.NotContains(t, got, k)
	}

	c.heal()
	c.converge(m) // exactly m: the stale writes were discarded everywhere
	w.write(12)
	c.converge(m)
	c.requireNoRestoreErrors()
}

func TestClusterSnapshotInstall(t *testing.T) {
	c := newCluster(t, 3, clusterOptions{snapshotThreshold: 16, trailingLogs: 4})
	m := model{}
	w := c.writer(m, "a", 3)
	w.write(24)
	c.converge(m)

	// A follower falls behind while the others write and truncate their
	// logs past it: it can only catch up from a snapshot.
	l := c.leader()
	lag := c.others(l)[0]
	c.isolate(lag)
	majority := c.others(lag)
	w.write(40, majority...)
	c.converge(m, majority...)
	snapIndex := c.truncate(w, func() uint64 {
		// Read again each time: an append sent just before the cut may
		// have landed late.
		last, err := lag.logs.LastIndex()
		require.NoError(t, err)
		return last + 1
	}, majority...)
	lagRestores := lag.totalRestores()
	c.heal()
	c.converge(m)
	require.Greater(t, lag.totalRestores(), lagRestores, "the lagging node caught up without a snapshot")
	// raft records the install just after the FSM restored it.
	c.eventually(func() bool { return lag.stat("last_snapshot_index") >= snapIndex },
		"the lagging node's raft does not record the snapshot install")

	// A new node joins: the log it would need is long gone.
	snapIndex = c.truncate(w, func() uint64 { return 1 }, c.running()...)
	n4 := c.add()
	c.start(n4)
	deadline := time.Now().Add(waitFor)
	for {
		l = c.leader()
		err := l.raft.AddVoter(n4.id, n4.addr, 0, 5*time.Second).Error()
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "AddVoter: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
	c.converge(m)
	require.NotZero(t, n4.totalRestores(), "the new node caught up without a snapshot")
	c.eventually(func() bool { return n4.stat("last_snapshot_index") >= snapIndex },
		"the new node's raft does not record the snapshot install")

	// A node down while the others truncate past it restarts from its
	// directories (its FSM reopened, then replaced by the snapshot).
	down := c.others(c.leader())[0]
	c.stop(down)
	downLast, err := raftstore.Open(filepath.Join(down.dir, "raft"), nil)
	require.NoError(t, err)
	last, err := downLast.LastIndex()
	require.NoError(t, err)
	require.NoError(t, downLast.Close())
	w.write(24)
	c.truncate(w, func() uint64 { return last + 1 }, c.running()...)
	before := down.totalRestores()
	c.start(down)
	c.converge(m)
	require.Greater(t, down.totalRestores(), before, "the restarted node caught up without a snapshot")
	w.write(12)
	c.converge(m)
	c.requireNoRestoreErrors()
}

func TestClusterRestartFromDisk(t *testing.T) {
	for _, noRestore := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSnapshotRestoreOnStart=%v", noRestore), func(t *testing.T) {
			c := newCluster(t, 3, clusterOptions{snapshotThreshold: 16, trailingLogs: 4, noSnapshotRestoreOnStart: noRestore})
			m := model{}
			w := c.writer(m, "a", 4)
			w.write(30)
			c.converge(m)
			// Every node holds a snapshot, and log entries after it.
			for _, n := range c.nodes {
				c.snapshot(n)
			}
			w.write(8)
			c.converge(m)

			c.stopAll()
			c.startAll(c.nodes, nil)
			for _, n := range c.nodes {
				// NewRaft restores the latest snapshot before it returns,
				// unless told not to: then the FSM's store already holds
				// everything it applied (and the cluster replays nothing
				// new into it: there are no writes).
				if noRestore {
					require.Zero(t, n.startRestores, "%s restored a snapshot at start", n.id)
					got, err := contents(n)
					require.NoError(t, err)
					require.Empty(t, diff(got, m), "%s at start", n.id)
				} else {
					require.Equal(t, int64(1), n.startRestores, "%s did not restore its snapshot at start", n.id)
				}
			}
			c.leader()
			c.converge(m)
			w.write(12)
			c.converge(m)
			// Once more, after writes on the restarted cluster.
			c.stopAll()
			c.startAll(c.nodes, nil)
			c.converge(m)
			w.write(8)
			c.converge(m)
			c.requireNoRestoreErrors()
		})
	}
}
