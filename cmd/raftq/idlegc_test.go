package main

import (
	"io"
	"log/slog"
	"testing"
)

// TestIdleRelease: a node releases once the tick after a busy one is
// quiet and it holds enough beyond its live heap; not while busy, not
// with little to return, and not again until it has allocated anew.
func TestIdleRelease(t *testing.T) {
	const mib = 1 << 20
	var cur heapReading
	releases := 0
	r := &idleRelease{read: func() heapReading { return cur }, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		release: func() {
			releases++
			cur.retained = cur.live + 8*mib // what FreeOSMemory leaves
		}}
	step := func(alloc, live, retained uint64, want bool) {
		t.Helper()
		cur.allocs += alloc
		cur.live, cur.retained = live, retained
		if got := r.tick(); got != want {
			t.Fatalf("tick after %d MiB allocated (live %d MiB, held %d MiB): released %v, want %v", alloc/mib, live/mib, retained/mib, got, want)
		}
	}
	step(0, 10*mib, 20*mib, false)            // first reading: nothing to compare
	step(2000*mib, 1400*mib, 2800*mib, false) // busy: a fill
	step(1000*mib, 1400*mib, 2900*mib, false) // still busy
	step(4*mib, 1400*mib, 2900*mib, true)     // quiet, 1.5 GiB beyond live
	if releases != 1 {
		t.Fatalf("releases = %d", releases)
	}
	step(4*mib, 1400*mib, 1408*mib, false)   // quiet, nothing allocated since
	step(4*mib, 1400*mib, 1800*mib, false)   // quiet, but too little allocated since the release
	step(300*mib, 1400*mib, 2000*mib, false) // busy again
	step(1*mib, 1400*mib, 2000*mib, true)    // quiet after enough new allocation
	step(200*mib, 100*mib, 130*mib, false)   // busy
	step(1*mib, 100*mib, 130*mib, false)     // quiet, but only 30 MiB to return
	if releases != 2 {
		t.Fatalf("releases = %d, want 2", releases)
	}
}

func TestReadHeap(t *testing.T) {
	h := readHeap()
	if h.allocs == 0 || h.retained == 0 {
		t.Fatalf("heap reading %+v", h)
	}
}
