// Package hostinfo describes the machine a benchmark runs on (Go version,
// CPUs, the file system and device of its directory, the load average) and
// measures files' disk usage, for the bench commands' reports.
package hostinfo

import (
	"os"
	"runtime"
	"strings"
)

// Machine is what a report says about where it was measured.
type Machine struct {
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	CPUs      int    `json:"cpus"`
	FS        string `json:"fs"` // file system type and device of the run directory
	// LoadStart and LoadEnd are /proc/loadavg at the start and end: the
	// machine is shared, and a busy neighbour shows here first.
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// Probe describes this machine, with dir's file system, and the load now.
func Probe(dir string) Machine {
	return Machine{
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:      runtime.NumCPU(),
		FS:        FSDescription(dir),
		LoadStart: LoadAvg(),
	}
}

// LoadAvg is the first three fields of /proc/loadavg, or "" where there is
// none.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// SplitList splits a comma-separated flag value, dropping empty items and
// the spaces around each.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
