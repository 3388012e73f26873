//go:build !linux

package hostinfo

import "io/fs"

func FSDescription(string) string { return "unknown (not Linux)" }

func DiskUsage(info fs.FileInfo) int64 { return info.Size() }
