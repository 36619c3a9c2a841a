//go:build raftqfault

package fsm

import (
	"testing"
)

// TestRecountRepairsEveryCounterIdentically: whichever counter drifted on
// whichever replica, RecountQueues leaves every replica with the counters
// its structures imply, equal across replicas, and only a replica whose
// counters changed reports (and counts) a repair.
func TestRecountRepairsEveryCounterIdentically(t *testing.T) {
	for _, counter := range []string{"ready", "delayed", "in_flight", "bytes", "dead_lettered", "total_bytes"} {
		t.Run(counter, func(t *testing.T) {
			good, bad := newHarness(t), newHarness(t)
			for _, h := range []*harness{good, bad} {
				h.raise(RecountVersion)
				stateWithEveryCounter(h)
			}
			if err := bad.f.Integrity().InjectCounterFault("q", counter, 7); err != nil {
				t.Fatal(err)
			}
			if err := bad.f.Integrity().Verify(); err == nil {
				t.Fatal("Verify missed the injected fault")
			}
			queues := []string{"q"}
			if counter == "total_bytes" {
				queues = nil // the byte total is recounted by every recount
			}
			var results [2]*RecountResult
			for i, h := range []*harness{good, bad} {
				results[i] = as[*RecountResult](t, h.mustOK(recountCmd(queues...))) // mustOK runs Verify
			}
			if len(results[0].Repairs) != 0 || results[0].TotalBytesRepaired {
				t.Fatalf("the right replica repaired: %+v", results[0])
			}
			r := results[1]
			switch {
			case counter == "total_bytes":
				if !r.TotalBytesRepaired || r.TotalBytesBefore != r.TotalBytesAfter+7 {
					t.Fatalf("byte total repair %+v", r)
				}
				if got := bad.f.Integrity().CounterRepairs()[""]; got != 1 {
					t.Fatalf("byte total repairs counted %d", got)
				}
			default:
				if len(r.Repairs) != 1 || r.Repairs[0].Queue != "q" || r.Repairs[0].Before.Equal(r.Repairs[0].After) {
					t.Fatalf("repairs %+v", r.Repairs)
				}
				if got := bad.f.Integrity().CounterRepairs()["q"]; got != 1 {
					t.Fatalf("repairs counted %d", got)
				}
			}
			for _, name := range []string{"q", "q.dlq"} {
				a, b := good.info(name).Stats, bad.info(name).Stats
				if a != b {
					t.Fatalf("%s after repair: right replica %+v, repaired %+v", name, a, b)
				}
			}
			_, d1, _ := good.f.Integrity().Digest()
			_, d2, _ := bad.f.Integrity().Digest()
			if d1 != d2 {
				t.Fatal("digests differ after the repair")
			}
		})
	}
}

// TestAuditCopySeesDrift: the audit's copy reports the injected drift,
// counted from the trees at the moment it was taken.
func TestAuditCopySeesDrift(t *testing.T) {
	h := newHarness(t)
	stateWithEveryCounter(h)
	if err := h.f.Integrity().InjectCounterFault("q", "ready", -2); err != nil {
		t.Fatal(err)
	}
	cs := h.f.Integrity().AuditCopies("", 10)
	if len(cs) != 2 || cs[0].Queue != "q" {
		t.Fatalf("copies %+v", cs)
	}
	have, want := cs[0].Recount()
	if have.Ready != want.Ready-2 || have.Equal(want) {
		t.Fatalf("have %v want %v", have, want)
	}
	if have, want := cs[1].Recount(); !have.Equal(want) {
		t.Fatalf("dlq: have %v want %v", have, want)
	}
}
