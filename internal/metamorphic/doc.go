// Package metamorphic is segkv's metamorphic test harness: a generator of
// long random operation sequences (writes, batches, range deletions, point
// reads, bounded iterators moving both ways, snapshots read after later
// writes, seals, merges, syncs, clean reopens, power losses in every
// vfs.Mem crash mode, and export/import between two stores), an executor
// that runs such a sequence against segstore through its public API only,
// and a model (a map per point of acknowledged history, plus the layering
// of sealed data and the live file that imports depend on) that every read
// result is compared with.
//
// After a power loss the store must open to exactly one state of the
// model's history between the last durable point and the operation in
// flight: every acknowledged durable write present, never a mixture.
//
// A failing run reports its seed, the option set and a trace shrunk by
// delta debugging, and writes the trace to a file that the test replays
// (META_TRACE=file). The test itself, with its flags and environment
// variables, is in meta_test.go; docs/RELIABILITY.md ("Metamorphic test")
// has the figures of the latest long run.
//
// The peer is a second store with a vfs.Mem of its own; a follower
// (Store.Follow, issue 28) fits the same way: a third instance whose
// expected state after a Follow to the leader's ManifestSeq is the model's
// state at that commit, and whose crashes take images of its own Mem.
//
// Everything here is test support: no production code imports it.
package metamorphic
