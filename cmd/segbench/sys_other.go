//go:build !linux

package main

import (
	"context"
	"fmt"
	"runtime"
)

// fsType would name the file system holding dir from statfs(2)'s magic
// number, which only Linux has; elsewhere the table says it does not know.
func fsType(string) string {
	return "file system not identified on " + runtime.GOOS
}

// runFsync is the device probe (fsync_linux.go). It times fdatasync,
// fallocate and the other Linux barriers by their system calls, so that its
// rows name exactly what was measured; there is no such probe for the
// barriers of the other systems (docs/DESIGN.md, "Portability").
func runFsync(context.Context, *env, []string) error {
	return fmt.Errorf("segbench fsync: the device probe times Linux's fdatasync and fallocate and runs on Linux only, not on %s", runtime.GOOS)
}
