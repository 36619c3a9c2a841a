package main

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The Go runtime's default (GOGC=100) lets the heap grow to twice what is
// live before it collects. raftq's live heap is mostly queued messages, so
// that doubles the node's resident memory per queued byte (issue 15: RSS
// with 1M × 1 KiB queued measured 2.76× the payload with 1.55× live). The
// tuner keeps the headroom proportional to a fraction of the live heap
// instead: after every collection it sets the runtime's soft memory limit
// to what the runtime holds besides heap objects, plus the live heap, plus
// gcHeadroom of it (at least gcHeadroomFloor, so a small heap keeps
// GOGC's pace and does not collect at every allocation burst). A limit
// only ever makes the collector run sooner; GOGC still applies below it.
// The collector's CPU cost grows as the headroom shrinks: a quarter of the
// live heap means about four times as many collections as GOGC=100 once
// the heap is large, each marking what is live (payloads are not scanned).
const (
	gcHeadroom      = 0.25
	gcHeadroomFloor = 64 << 20
	gcTunerInterval = 250 * time.Millisecond
)

// gcReading is what the tuner reads from runtime/metrics.
type gcReading struct {
	cycles   uint64
	live     uint64 // heap marked live by the last collection
	total    uint64 // all memory the runtime mapped
	released uint64 // heap returned to the OS
	objects  uint64 // heap occupied by objects, live or not yet swept
	free     uint64 // heap spans free and not yet returned
}

// gcSamples are the runtime/metrics samples readGC reads, in its order.
func gcSamples() []metrics.Sample {
	names := []string{
		"/gc/cycles/total:gc-cycles",
		"/gc/heap/live:bytes",
		"/memory/classes/total:bytes",
		"/memory/classes/heap/released:bytes",
		"/memory/classes/heap/objects:bytes",
		"/memory/classes/heap/free:bytes",
	}
	samples := make([]metrics.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	return samples
}

func readGC(samples []metrics.Sample) gcReading {
	metrics.Read(samples)
	v := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	return gcReading{cycles: v(0), live: v(1), total: v(2), released: v(3), objects: v(4), free: v(5)}
}

// gcLimit is the soft memory limit for a reading: the runtime's memory
// that is not heap objects or free spans (stacks, metadata, the unused
// part of spans in use), plus the live heap and its headroom, capped at
// hard (0 = no cap).
func gcLimit(r gcReading, hard int64) int64 {
	other := int64(r.total) - int64(r.released) - int64(r.objects) - int64(r.free)
	other = max(other, 0)
	live := int64(r.live)
	limit := other + live + max(int64(float64(live)*gcHeadroom), gcHeadroomFloor)
	if hard > 0 {
		limit = min(limit, hard)
	}
	return limit
}

// gcStep reads the runtime's figures and, when a collection has ended
// since seen, returns the limit they call for and records the cycle.
func gcStep(samples []metrics.Sample, seen *uint64, hard int64) (gcReading, int64, bool) {
	r := readGC(samples)
	if r.cycles == *seen {
		return r, 0, false
	}
	*seen = r.cycles
	return r, gcLimit(r, hard), true
}

// gcTunerEnabled: the tuner stands aside when the operator chose the
// collector's behaviour with GOGC or GOMEMLIMIT.
func gcTunerEnabled(getenv func(string) string) bool {
	return getenv("GOGC") == "" && getenv("GOMEMLIMIT") == ""
}

// runGCTuner sets the soft memory limit after each collection until ctx
// ends, then restores hard (or no limit). hard is the cgroup-derived cap
// (goMemoryLimit), 0 for none.
func runGCTuner(ctx context.Context, log *slog.Logger, hard int64) {
	samples := gcSamples()
	defer func() {
		if hard > 0 {
			debug.SetMemoryLimit(hard)
		} else {
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}()
	t := time.NewTicker(gcTunerInterval)
	defer t.Stop()
	var seen uint64
	logged := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, limit, ok := gcStep(samples, &seen, hard)
		if !ok {
			continue
		}
		debug.SetMemoryLimit(limit)
		if !logged && r.live > gcHeadroomFloor*4 {
			// Once, when the headroom starts to bind, so an operator
			// who sees more collections than usual knows why.
			log.Info("memory limit follows the live heap", "live_bytes", r.live, "limit_bytes", limit, "headroom", gcHeadroom, "opt_out", "set GOGC or GOMEMLIMIT")
			logged = true
		}
	}
}
