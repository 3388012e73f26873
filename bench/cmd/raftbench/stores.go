package main

import (
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"

	"github.com/segkv/segkv/raft/raftstore"
)

// logStore is what the benchmark drives: hashicorp/raft's LogStore, and
// Close, which every store here has.
type logStore interface {
	raft.LogStore
	Close() error
}

// engine is one raft log store under test. Each is opened with its own
// durable defaults: every StoreLogs is durable (fsynced) when it returns.
type engine struct {
	name string
	// module is the Go module whose version the report prints.
	module string
	// config describes, in one line, how open opens it.
	config string
	open   func(dir string) (logStore, error)
}

var engines = []engine{
	{
		name:   "segkv",
		module: "github.com/segkv/segkv/raft",
		config: "raftstore.Open(dir, nil): durable default (SyncAlways: one fdatasync per StoreLogs, shared by concurrent callers), 16 MiB segments, merging off, mmap reads",
		open: func(dir string) (logStore, error) {
			return raftstore.Open(dir, nil)
		},
	},
	{
		name:   "raft-wal",
		module: "github.com/hashicorp/raft-wal",
		config: "raftwal.Open(dir, WithLogger(null)): defaults (fsync per StoreLogs, 64 MiB segments, BinaryCodec, bbolt meta store); the logger only silences its info lines",
		open: func(dir string) (logStore, error) {
			return raftwal.Open(dir, raftwal.WithLogger(hclog.NewNullLogger()))
		},
	},
	{
		name:   "raft-boltdb",
		module: "github.com/hashicorp/raft-boltdb/v2",
		config: "raftboltdb.NewBoltStore(dir/raft.db): defaults (bbolt, NoSync false: fdatasync per commit, one write txn per StoreLogs, freelist synced, msgpack entries)",
		open: func(dir string) (logStore, error) {
			return raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		},
	},
}

func engineNames() []string {
	var names []string
	for _, e := range engines {
		names = append(names, e.name)
	}
	return names
}

func lookupEngine(name string) (engine, error) {
	for _, e := range engines {
		if e.name == name {
			return e, nil
		}
	}
	return engine{}, fmt.Errorf("unknown engine %q (have %s)", name, strings.Join(engineNames(), ", "))
}

// moduleVersion is the version of module linked into this binary, from its
// build information: "(this repository: ../raft)" for a module built from
// this repository's directory, "unknown" where the binary has no build
// information.
func moduleVersion(module string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path != module {
			continue
		}
		if r := d.Replace; r != nil {
			if r.Version != "" && r.Version != "(devel)" {
				return r.Version + " (replaced by " + r.Path + ")"
			}
			return "(this repository: " + r.Path + ")"
		}
		return d.Version
	}
	return "unknown"
}

// versionModules names the modules the comparison depends on, in the
// report's order.
var versionModules = []string{
	"github.com/hashicorp/raft",
	"github.com/segkv/segkv/raft",
	"github.com/hashicorp/raft-wal",
	"github.com/hashicorp/raft-boltdb/v2",
	"go.etcd.io/bbolt",
}
