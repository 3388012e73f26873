// Package metamorphic is segkv's metamorphic test harness: a generator of
// long random operation sequences (writes, batches, range deletions, point
// reads, bounded iterators moving both ways, snapshots read after later
// writes, seals, merges, syncs, clean reopens, power losses in every
// vfs.Mem crash mode, export/import between two stores, ReplaceAll from a
// peer's sealed snapshot, and a follower kept in sync by Follow), an executor
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
// The peer is a second store with a vfs.Mem of its own: its sealed
// segments are imported into the store under test, and a sealed snapshot
// of it (NewSealedSnapshot, Segments, Export) replaces the store's whole
// state through ReplaceAll, which the model records as the peer's state,
// durable, with the adopted digests forgotten. The follower (follow.go) is
// a third store, on a vfs.Mem of its own, that mirrors the store under
// test through ChangesSince and Follow: after each Follow it must list the
// leader's segments (ids, orders, digests) as the Changes so far say, and,
// when the model knows the state of the leader's sealed segments (it just
// sealed, or the split of its state is known), read exactly that state.
// The follower loses power during a Follow (every crash mode) and must
// come back to the mirror before or after it, whole; a Put on it makes
// Follow answer ErrDiverged, and ReplaceAll(nil) resets it; Changes kept
// unapplied are refused with ErrFollowGap once the follower moved on, or
// else bring it back to the leader's state when they were taken.
//
// Everything here is test support: no production code imports it.
package metamorphic
