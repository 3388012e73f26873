package hostinfo

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// FSDescription names the file system and device holding dir, e.g.
// "ext4 on /dev/vda (mounted at /)", so a report says what disk it measured.
func FSDescription(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "unknown: " + err.Error()
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer f.Close() // read-only: a close error changes nothing
	best, desc := "", "unknown"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// device mountpoint fstype options dump pass
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		mnt := fields[1]
		under := abs == mnt || strings.HasPrefix(abs, strings.TrimSuffix(mnt, "/")+"/")
		if under && len(mnt) >= len(best) {
			best = mnt
			desc = fmt.Sprintf("%s on %s (mounted at %s)", fields[2], fields[0], mnt)
		}
	}
	return desc
}

// DiskUsage is the bytes a file occupies on disk.
func DiskUsage(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
