//go:build !linux

package main

// procMemory has no /proc/self/status to read outside Linux.
func procMemory() (rss, hwm int64) { return 0, 0 }
