package workload

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values
// at or below it. It returns 0 for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps float error (99.9/100*1000 = 999.0000000000001)
	// from moving the rank up by one.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// LatencySummary is what the reports show of a set of latencies, in
// milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summarize sorts ds in place and summarizes it.
func Summarize(ds []time.Duration) LatencySummary {
	if len(ds) == 0 {
		return LatencySummary{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return LatencySummary{
		Count: int64(len(ds)),
		P50:   ms(Percentile(ds, 50)),
		P99:   ms(Percentile(ds, 99)),
		P999:  ms(Percentile(ds, 99.9)),
		Max:   ms(ds[len(ds)-1]),
		Mean:  ms(sum / time.Duration(len(ds))),
	}
}

// Latencies collects samples from many goroutines. Every sample is kept,
// so percentiles are exact (a million samples take 8 MB).
type Latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

// Add records samples.
func (l *Latencies) Add(ds ...time.Duration) {
	l.mu.Lock()
	l.ds = append(l.ds, ds...)
	l.mu.Unlock()
}

// Summary summarizes what was recorded so far.
func (l *Latencies) Summary() LatencySummary {
	l.mu.Lock()
	ds := slices.Clone(l.ds)
	l.mu.Unlock()
	return Summarize(ds)
}
