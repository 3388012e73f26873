//go:build !linux

package main

// procWriteBytes has no /proc/self/io to read outside Linux: the space
// workload leaves its written and write-amplification figures out.
func procWriteBytes() (n int64, ok bool) { return 0, false }
