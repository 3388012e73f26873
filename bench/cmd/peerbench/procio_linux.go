package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procWriteBytes returns write_bytes of /proc/self/io: the bytes this
// process caused to be sent to the storage layer, counted when it dirtied
// the page cache (so a write counts before its writeback, and a file
// removed before writeback still counts). ok is false if it cannot be read
// (a kernel without task I/O accounting).
func procWriteBytes() (n int64, ok bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "write_bytes: 12345"
		name, rest, found := strings.Cut(sc.Text(), ":")
		if !found || name != "write_bytes" {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		return v, err == nil
	}
	return 0, false
}
