// Package testutil holds the helpers that the tests of several packages
// share: crash image recording at every sync point, the crash seed count,
// listing the frames of a file, flipping bits, and asserting a corruption
// error. It is for tests only: no non-test file imports it, and the raft
// module's tests may use it too (its import path is under this module's).
//
// The wal package's own tests cannot use it (this package imports wal), so
// they keep their in-package helpers.
package testutil
