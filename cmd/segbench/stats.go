package main

import (
	"slices"
	"strconv"
	"time"
)

// dist summarizes a sample of durations.
type dist struct {
	n                             int
	min, p50, p90, p99, p999, max time.Duration
	mean                          time.Duration
}

// summarize sorts d in place and returns its percentiles (nearest rank).
func summarize(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return dist{
		n: len(d), min: d[0], max: d[len(d)-1], mean: sum / time.Duration(len(d)),
		p50: pct(d, 50), p90: pct(d, 90), p99: pct(d, 99), p999: pct(d, 99.9),
	}
}

// pct is the nearest-rank percentile of sorted d.
func pct(sorted []time.Duration, p float64) time.Duration {
	rank := int(p/100*float64(len(sorted))+0.999999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

func us(d time.Duration) float64 { return round(float64(d)/float64(time.Microsecond), 1) }

// round keeps JSON and tables readable: figures carry no more digits than a
// noisy disk can justify.
func round(x float64, digits int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	return v
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 2)
}

func ftoa(x float64, digits int) string { return strconv.FormatFloat(x, 'f', digits, 64) }
func itoa[T ~int | ~int64 | ~uint64](x T) string {
	return strconv.FormatInt(int64(x), 10)
}
