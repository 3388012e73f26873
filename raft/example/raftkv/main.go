// Command raftkv runs a small replicated key-value store on one machine:
// hashicorp/raft nodes on loopback TCP, each keeping its raft log and
// stable values in a raftstore.Store, its snapshots in a
// raft.FileSnapshotStore, and its state in a raftfsm.FSM, every one in its
// own directory.
//
// It bootstraps three nodes and writes through the leader; stops the
// leader and shows a new one elected and writes going on; snapshots and
// truncates the logs, so that a fourth node that joins is brought up by a
// snapshot install; brings the old leader back from its directories; and
// at the end compares the contents of every node's FSM, exiting non-zero
// if they differ.
//
//	go run ./example/raftkv            # from raft/; data in a temporary directory
//	go run ./example/raftkv -dir /tmp/kv -v
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/segkv/segkv/raft/raftfsm"
	"github.com/segkv/segkv/raft/raftstore"
	"github.com/segkv/segkv/segstore"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.Dir, "dir", "", "keep the nodes' directories in `dir` (empty or new); default: a temporary directory, removed at exit")
	verbose := flag.Bool("v", false, "show raft's logs (on stderr)")
	flag.Parse()
	if *verbose {
		cfg.RaftLog = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "raftkv:", err)
		os.Exit(1)
	}
}

type config struct {
	// Dir holds a directory per node. Empty means a temporary directory,
	// removed at the end.
	Dir string
	// RaftLog receives the logs of raft, its transports and snapshot
	// stores; nil discards them.
	RaftLog io.Writer
}

// stepTimeout bounds every wait for the cluster: far more than any step
// takes.
const stepTimeout = 20 * time.Second

// countingFSM is the raftfsm.FSM, counting the snapshots raft restores
// into it (its own at start, or one a leader sends).
type countingFSM struct {
	*raftfsm.FSM
	restores atomic.Int64
}

func (f *countingFSM) Restore(rc io.ReadCloser) error {
	f.restores.Add(1)
	return f.FSM.Restore(rc)
}

type node struct {
	id   raft.ServerID
	addr raft.ServerAddress // chosen at the first start, kept across restarts
	dir  string

	logs  *raftstore.Store
	fsm   *countingFSM
	trans *raft.NetworkTransport
	raft  *raft.Raft
	// startRestores is the FSM's restore count once NewRaft returned:
	// the restores after it are snapshots installed by a leader.
	startRestores int64
}

type cluster struct {
	cfg   config
	out   io.Writer
	log   io.Writer
	start time.Time
	nodes []*node
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (c *cluster) printf(format string, args ...any) {
	fmt.Fprintf(c.out, "[%5.2fs] ", time.Since(c.start).Seconds())
	fmt.Fprintf(c.out, format+"\n", args...)
}

func (c *cluster) raftConfig(n *node) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = n.id
	// Loopback: short timeouts keep elections quick.
	conf.HeartbeatTimeout = 200 * time.Millisecond
	conf.ElectionTimeout = 200 * time.Millisecond
	conf.LeaderLeaseTimeout = 200 * time.Millisecond
	conf.CommitTimeout = 10 * time.Millisecond
	// Snapshot often and keep few entries after a snapshot, so that a
	// node that joins or comes back late needs a snapshot.
	conf.SnapshotThreshold = 32
	conf.SnapshotInterval = 250 * time.Millisecond
	conf.TrailingLogs = 16
	conf.LogOutput = c.log
	conf.LogLevel = "INFO"
	if c.cfg.RaftLog == nil {
		conf.LogLevel = "OFF"
	}
	return conf
}

// open opens the node's stores from its directory and starts raft, first
// bootstrapping the stores with bootstrap if it is not nil. It listens on
// n.trans if set, else on n.addr (a restart), else on a free port.
func (c *cluster) open(n *node, bootstrap *raft.Configuration) (err error) {
	defer func() {
		if err != nil {
			c.closeStores(n)
		}
	}()
	// Segment sizes for a demo: the defaults preallocate tens of MiB per
	// store.
	if n.logs, err = raftstore.Open(filepath.Join(n.dir, "raft"), &raftstore.Options{SegmentSize: 1 << 20}); err != nil {
		return err
	}
	f, err := raftfsm.Open(filepath.Join(n.dir, "fsm"), &raftfsm.Options{Store: &segstore.Options{SegmentSize: 256 << 10}})
	if err != nil {
		return err
	}
	n.fsm = &countingFSM{FSM: f}
	snaps, err := raft.NewFileSnapshotStore(n.dir, 2, c.log)
	if err != nil {
		return err
	}
	if n.trans == nil {
		bind := "127.0.0.1:0"
		if n.addr != "" {
			bind = string(n.addr) // a restart: the others know it there
		}
		if n.trans, err = raft.NewTCPTransport(bind, nil, 3, 2*time.Second, c.log); err != nil {
			return err
		}
		n.addr = n.trans.LocalAddr()
	}
	conf := c.raftConfig(n)
	if bootstrap != nil {
		if err := raft.BootstrapCluster(conf, n.logs, n.logs, snaps, n.trans, *bootstrap); err != nil {
			return fmt.Errorf("%s: bootstrap: %w", n.id, err)
		}
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, n.logs, n.logs, snaps, n.trans); err != nil {
		return fmt.Errorf("%s: %w", n.id, err)
	}
	n.startRestores = n.fsm.restores.Load()
	return nil
}

// stop shuts the node's raft down (which closes its transport) and closes
// its stores; its directory stays.
func (c *cluster) stop(n *node) error {
	var err error
	if n.raft != nil {
		err = n.raft.Shutdown().Error()
		n.raft, n.trans = nil, nil // closed by the shutdown
	}
	return errors.Join(err, c.closeStores(n))
}

// closeStores closes what open opened, but raft.
func (c *cluster) closeStores(n *node) error {
	var errs []error
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.fsm != nil {
		errs = append(errs, n.fsm.Close())
	}
	if n.logs != nil {
		errs = append(errs, n.logs.Close())
	}
	n.fsm, n.logs, n.trans = nil, nil, nil
	return errors.Join(errs...)
}

func (c *cluster) running() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.raft != nil {
			out = append(out, n)
		}
	}
	return out
}

func stat(n *node, key string) uint64 {
	v, _ := strconv.ParseUint(n.raft.Stats()[key], 10, 64)
	return v
}

// waitFor polls cond until it holds.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(stepTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, stepTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// leader waits for a running node to be the leader, the one of the newest
// term if a deposed one does not know yet.
func (c *cluster) leader(ctx context.Context) (*node, error) {
	var l *node
	err := waitFor(ctx, "a leader", func() bool {
		l = nil
		for _, n := range c.running() {
			if n.raft.State() == raft.Leader && (l == nil || stat(n, "term") > stat(l, "term")) {
				l = n
			}
		}
		return l != nil
	})
	return l, err
}

// apply commits cmd through the leader, retrying while leadership moves:
// the commands here are idempotent puts and deletes, submitted one at a
// time, so a failed attempt that committed after all changes nothing. It
// returns the node that committed it.
func (c *cluster) apply(ctx context.Context, cmd *raftfsm.Command) (*node, error) {
	data := cmd.Bytes()
	deadline := time.Now().Add(stepTimeout)
	for {
		l, err := c.leader(ctx)
		if err != nil {
			return nil, err
		}
		f := l.raft.Apply(data, 5*time.Second)
		err = f.Error()
		if err == nil {
			// The FSM's answer: nil, or why it refused the command.
			if resp, ok := f.Response().(error); ok {
				return l, fmt.Errorf("the FSM refused a command: %w", resp)
			}
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader committed a command in %v: %w", stepTimeout, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// writer writes keys through the cluster and keeps what it expects the
// FSMs to hold.
type writer struct {
	c    *cluster
	want map[string]string
}

// put writes keys [from, to) with values tagged by round, batch keys per
// command, and returns the leader of the last command.
func (w *writer) put(ctx context.Context, from, to, batch int, round string) (*node, error) {
	var l *node
	for i := from; i < to; i += batch {
		var cmd raftfsm.Command
		ops := map[string]string{}
		for k := i; k < min(i+batch, to); k++ {
			key, val := fmt.Sprintf("user/%04d", k), fmt.Sprintf("%s:%d", round, k)
			cmd.Put([]byte(key), []byte(val))
			ops[key] = val
		}
		var err error
		if l, err = w.c.apply(ctx, &cmd); err != nil {
			return nil, err
		}
		maps.Copy(w.want, ops)
	}
	return l, nil
}

// deleteRange deletes the keys [from, to).
func (w *writer) deleteRange(ctx context.Context, from, to int) error {
	start, end := fmt.Sprintf("user/%04d", from), fmt.Sprintf("user/%04d", to)
	var cmd raftfsm.Command
	cmd.DeleteRange([]byte(start), []byte(end))
	if _, err := w.c.apply(ctx, &cmd); err != nil {
		return err
	}
	for k := range w.want {
		if k >= start && k < end {
			delete(w.want, k)
		}
	}
	return nil
}

// caughtUp waits until every running node's FSM applied what the leader's
// has: a barrier on the leader (it returns once the leader's FSM applied
// every entry before it), then the FSMs' applied indexes. Not raft's
// AppliedIndex: raft advances it when it hands entries to the FSM, before
// the FSM applied them.
func (c *cluster) caughtUp(ctx context.Context) error {
	var target uint64
	err := waitFor(ctx, "a barrier on the leader", func() bool {
		l, err := c.leader(ctx)
		if err != nil || l.raft.Barrier(stepTimeout).Error() != nil {
			return false // leadership moved: again, on the new leader
		}
		target = l.fsm.AppliedIndex()
		return true
	})
	if err != nil {
		return err
	}
	return waitFor(ctx, fmt.Sprintf("every FSM applying up to %d", target), func() bool {
		for _, n := range c.running() {
			if n.fsm.AppliedIndex() < target {
				return false
			}
		}
		return true
	})
}

// snapshot makes n snapshot its FSM; raft then truncates its log to the
// trailing entries. It returns the snapshot's index.
func snapshot(n *node) (uint64, error) {
	err := n.raft.Snapshot().Error()
	if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return 0, fmt.Errorf("%s: snapshot: %w", n.id, err)
	}
	return stat(n, "last_snapshot_index"), nil
}

func firstIndex(n *node) uint64 {
	i, _ := n.logs.FirstIndex()
	return i
}

// contents reads n's FSM: every key below raftfsm.ReservedPrefix.
func contents(n *node) (map[string]string, error) {
	it, err := n.fsm.Store().NewIterator(&segstore.IterOptions{UpperBound: []byte(raftfsm.ReservedPrefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		out[string(it.Key())] = string(v)
	}
	return out, it.Err()
}

func digest(m map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(m[k]), m[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	c := &cluster{cfg: cfg, out: out, log: io.Discard, start: time.Now()}
	if cfg.RaftLog != nil {
		// Every node's loggers write to it, concurrently.
		c.log = &lockedWriter{w: cfg.RaftLog}
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "raftkv-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%s is not empty: the example bootstraps a new cluster", dir)
	}
	defer func() {
		// Shut every node down together: one waits for its RPCs to the
		// others to fail once they are gone.
		var wg sync.WaitGroup
		for _, n := range c.running() {
			wg.Go(func() { n.raft.Shutdown().Error() })
		}
		wg.Wait()
		for _, n := range c.nodes {
			err = errors.Join(err, c.stop(n))
		}
	}()
	for i := 1; i <= 4; i++ {
		c.nodes = append(c.nodes, &node{id: raft.ServerID(fmt.Sprintf("n%d", i)), dir: filepath.Join(dir, fmt.Sprintf("n%d", i))})
	}
	n4 := c.nodes[3]

	// 1. Three nodes, bootstrapped with the same configuration. The
	// transports listen first, on free ports: the configuration names
	// their addresses. n4's listens from now on too, so that its port
	// cannot be the one the leader stopped in step 3 gives back, which it
	// takes again in step 6.
	var servers []raft.Server
	for _, n := range c.nodes {
		if n.trans, err = raft.NewTCPTransport("127.0.0.1:0", nil, 3, 2*time.Second, c.log); err != nil {
			return err
		}
		n.addr = n.trans.LocalAddr()
		if n != n4 {
			servers = append(servers, raft.Server{ID: n.id, Address: n.addr, Suffrage: raft.Voter})
		}
	}
	for _, n := range c.nodes[:3] {
		if err := c.open(n, &raft.Configuration{Servers: servers}); err != nil {
			return err
		}
	}
	c.printf("started n1 %s, n2 %s, n3 %s (data in %s)", c.nodes[0].addr, c.nodes[1].addr, c.nodes[2].addr, dir)
	l, err := c.leader(ctx)
	if err != nil {
		return err
	}
	c.printf("%s is the leader (term %d)", l.id, stat(l, "term"))

	// 2. Writes through the leader.
	w := &writer{c: c, want: map[string]string{}}
	if l, err = w.put(ctx, 0, 200, 10, "r1"); err != nil {
		return err
	}
	c.printf("wrote user/0000..0199 in 20 commands through %s", l.id)

	// 3. The leader stops; the other two elect a new one and take writes.
	old := l
	if err := c.stop(old); err != nil {
		return err
	}
	stopped := time.Now()
	c.printf("stopped the leader %s", old.id)
	if l, err = c.leader(ctx); err != nil {
		return err
	}
	c.printf("%s elected leader (term %d) %dms after the stop", l.id, stat(l, "term"), time.Since(stopped).Milliseconds())
	if l, err = w.put(ctx, 150, 400, 10, "r2"); err != nil {
		return err
	}
	if err := w.deleteRange(ctx, 0, 50); err != nil {
		return err
	}
	c.printf("through %s: wrote user/0150..0399 (overwriting 50), deleted the range user/0000..0049", l.id)

	// 4. Snapshots: raft then keeps only the trailing entries of its log.
	for _, n := range c.running() {
		idx, err := snapshot(n)
		if err != nil {
			return err
		}
		c.printf("%s snapshot at index %d; its log now starts at %d", n.id, idx, firstIndex(n))
	}

	// 5. A fourth node joins: the entries it lacks are gone from the
	// leader's log, so the leader sends it a snapshot.
	if err := c.open(n4, nil); err != nil {
		return err
	}
	err = waitFor(ctx, "adding n4", func() bool {
		l, err := c.leader(ctx)
		return err == nil && l.raft.AddVoter(n4.id, n4.addr, 0, 5*time.Second).Error() == nil
	})
	if err != nil {
		return err
	}
	if err := c.caughtUp(ctx); err != nil {
		return err
	}
	if n4.fsm.restores.Load() == 0 {
		return errors.New("n4 caught up without a snapshot install")
	}
	c.printf("n4 joined (AddVoter at %s): installed a snapshot at index %d (FSM restored %d time(s)), applied up to %d",
		n4.addr, stat(n4, "last_snapshot_index"), n4.fsm.restores.Load(), n4.fsm.AppliedIndex())

	// 6. The old leader comes back from its directory, as a follower.
	if err := c.open(old, nil); err != nil {
		return err
	}
	c.printf("%s restarted from %s: log up to %d, FSM at %d", old.id, old.dir, stat(old, "last_log_index"), old.fsm.AppliedIndex())
	if l, err = w.put(ctx, 400, 500, 20, "r3"); err != nil {
		return err
	}
	if err := c.caughtUp(ctx); err != nil {
		return err
	}
	how := "from the leader's log"
	if installs := old.fsm.restores.Load() - old.startRestores; installs > 0 {
		how = fmt.Sprintf("by a snapshot install (index %d)", stat(old, "last_snapshot_index"))
	}
	c.printf("%s caught up %s; wrote user/0400..0499 through %s", old.id, how, l.id)

	// 7. Every FSM must hold exactly what was acknowledged.
	fmt.Fprintf(out, "\n%-4s %-9s %4s %7s %8s %5s %s\n", "node", "state", "term", "applied", "restores", "keys", "digest")
	ok := true
	for _, n := range c.nodes {
		got, err := contents(n)
		if err != nil {
			return fmt.Errorf("%s: read FSM: %w", n.id, err)
		}
		mark := ""
		if d := digest(got); d != digest(w.want) {
			ok, mark = false, "  MISMATCH"
		}
		fmt.Fprintf(out, "%-4s %-9s %4d %7d %8d %5d %s%s\n", n.id, n.raft.State(), stat(n, "term"),
			n.fsm.AppliedIndex(), n.fsm.restores.Load(), len(got), digest(got), mark)
	}
	fmt.Fprintln(out)
	if !ok {
		return fmt.Errorf("the FSMs differ: want %d keys, digest %s", len(w.want), digest(w.want))
	}
	fmt.Fprintf(out, "OK: all %d nodes hold the same %d keys (digest %s)\n", len(c.nodes), len(w.want), digest(w.want))
	return nil
}
