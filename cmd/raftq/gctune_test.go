package main

import (
	"runtime"
	"testing"
)

// TestGCLimit: the limit is the runtime's other memory plus the live heap
// plus a quarter of it, at least 64 MiB of headroom, never above the
// cgroup's cap.
func TestGCLimit(t *testing.T) {
	const mib = 1 << 20
	big := gcReading{live: 1000 * mib, total: 2600 * mib, released: 100 * mib, objects: 1400 * mib, free: 900 * mib}
	// other = 2600 - 100 - 1400 - 900 = 200 MiB; headroom 250 MiB.
	if got, want := gcLimit(big, 0), int64(200+1000+250)*mib; got != want {
		t.Errorf("large heap: limit %d MiB, want %d", got/mib, want/mib)
	}
	if got, want := gcLimit(big, 1200*mib), int64(1200*mib); got != want {
		t.Errorf("capped: limit %d MiB, want %d", got/mib, want/mib)
	}
	small := gcReading{live: 10 * mib, total: 40 * mib, released: 5 * mib, objects: 15 * mib, free: 5 * mib}
	if got, want := gcLimit(small, 0), int64(15+10+64)*mib; got != want {
		t.Errorf("small heap: limit %d MiB, want %d (the 64 MiB floor)", got/mib, want/mib)
	}
	odd := gcReading{live: 10 * mib, total: 10 * mib, objects: 20 * mib}
	if got, want := gcLimit(odd, 0), int64(10+64)*mib; got != want {
		t.Errorf("inconsistent reading: limit %d MiB, want %d (other counted as 0)", got/mib, want/mib)
	}
}

// TestGCStep: a step after a collection reads real figures and asks for a
// limit above the live heap; a step asks for a limit exactly when a
// collection has ended since the last one.
func TestGCStep(t *testing.T) {
	samples := gcSamples()
	var seen uint64
	runtime.GC()
	r, limit, ok := gcStep(samples, &seen, 0)
	if !ok || r.cycles == 0 || r.live == 0 || r.total == 0 {
		t.Fatalf("after a collection: reading %+v ok %v", r, ok)
	}
	if limit < int64(r.live)+gcHeadroomFloor {
		t.Errorf("limit %d below live %d + floor", limit, r.live)
	}
	// Another step asks for a limit only if a collection ended since
	// (one may have: the test does not stop the collector).
	before := seen
	r2, _, ok := gcStep(samples, &seen, 0)
	if ok != (r2.cycles != before) {
		t.Errorf("step after cycle %d at cycle %d: ok %v", before, r2.cycles, ok)
	}
}

// TestGCTunerEnabled: GOGC or GOMEMLIMIT set by the operator turns the
// tuner off.
func TestGCTunerEnabled(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	if !gcTunerEnabled(env(nil)) {
		t.Error("off with neither variable set")
	}
	if gcTunerEnabled(env(map[string]string{"GOGC": "200"})) || gcTunerEnabled(env(map[string]string{"GOMEMLIMIT": "1GiB"})) {
		t.Error("on although the operator set GOGC or GOMEMLIMIT")
	}
}
