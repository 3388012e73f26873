// Package compat holds no code: its test opens the stores in the
// repository's top-level testdata/stores, each written by the code of a past
// commit in one on-disk format version, with today's code, and checks that
// every key, value and tombstone reads as the writer itself read it, before
// and after a seal, a full merge and a reopen. testdata/README.md says how
// each store was made.
package compat
