//go:build !unix

package segstore

import "time"

// cpuTime has no getrusage to read here: the scan benchmarks report no
// cpu-ns/op rather than a made-up one.
func cpuTime() (time.Duration, bool) { return 0, false }
