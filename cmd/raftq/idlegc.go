package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory to the OS when idle (issue 24: memory near the
// payload). With the runtime's default GOGC a heap of L live bytes grows
// to about 2L before it is collected, and the runtime keeps the pages it
// collected for the next growth: a node that took in a backlog and went
// quiet kept ~2× its live heap resident (2.2–3.1× the payload at 1M ×
// 1 KiB), and its next collection came only from the runtime's
// two-minute forced GC, which returns no pages. So a node that has
// allocated little for a whole idleTick, and has garbage or free pages
// worth returning, collects and returns them at once
// (debug.FreeOSMemory): its resident size falls to its live heap.
//
// It costs one collection per quiet period after some allocation, off
// the request path (the runtime's forced GC would have marked the same
// heap within two minutes), and nothing while the node is busy: GOGC and
// GOMEMLIMIT stay as shipped, so enqueue throughput under load is what it
// was. After a release it waits for a real amount of new allocation
// before it may release again, so an idle node does not collect in a
// loop.
const (
	idleTick = 5 * time.Second
	// idleAlloc is what a tick may allocate and still count as quiet
	// (gossip, metrics scrapes and timers allocate well under it; a
	// trickle of 200 × 1 KiB enqueues a second allocates a few MiB).
	idleAlloc = 16 << 20
	// idleMinReturn is the least worth a collection: unreleased heap
	// beyond the live bytes of the last collection, and new allocation
	// since the last release.
	idleMinReturn = 64 << 20
)

// heapReading is what the release decision reads from runtime/metrics
// (no stop-the-world, unlike runtime.ReadMemStats).
type heapReading struct {
	allocs   uint64 // bytes allocated since the process started
	live     uint64 // live heap bytes marked by the last collection
	retained uint64 // heap memory the process holds: objects, unused slots and free pages not returned
}

func readHeap() heapReading {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return heapReading{allocs: u(0), live: u(1), retained: u(2) + u(3) + u(4)}
}

// idleRelease decides, one reading per tick, when to release.
type idleRelease struct {
	prev      heapReading
	released  uint64 // allocs at the last release
	started   bool
	read      func() heapReading
	release   func()
	log       *slog.Logger
	releases  int
	lastTaken time.Duration
}

// tick takes one reading and releases if the last tick was quiet and
// enough is held beyond the live heap. It reports whether it released.
func (r *idleRelease) tick() bool {
	now := r.read()
	prev, started := r.prev, r.started
	r.prev, r.started = now, true
	if !started {
		r.released = now.allocs
		return false
	}
	quiet := now.allocs-prev.allocs < idleAlloc
	grown := now.allocs-r.released >= max(idleMinReturn, now.live/8)
	held := now.retained > now.live && now.retained-now.live >= max(idleMinReturn, now.live/8)
	if !quiet || !grown || !held {
		return false
	}
	start := time.Now()
	r.release()
	r.lastTaken = time.Since(start)
	r.releases++
	after := r.read()
	r.prev, r.released = after, after.allocs
	r.log.Debug("idle: returned memory to the OS", "held_before_bytes", now.retained, "held_after_bytes", after.retained,
		"live_bytes", after.live, "took", r.lastTaken.Round(time.Millisecond))
	return true
}

// releaseWhenIdle runs idleRelease every idleTick until ctx ends.
func releaseWhenIdle(ctx context.Context, log *slog.Logger) {
	r := &idleRelease{read: readHeap, release: debug.FreeOSMemory, log: log}
	t := time.NewTicker(idleTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.tick()
		}
	}
}
