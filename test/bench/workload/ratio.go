package workload

import (
	"fmt"
	"io"
	"strings"
)

// ratioFigures are the figures WriteRatio divides: each phase's rate and
// call latency, and for lifecycle also deliveries and enqueue→delivery.
var ratioFigures = []struct {
	phase, label string
	get          func(*PhaseResult) float64
}{
	{PhaseEnqueue, "msgs/s", func(p *PhaseResult) float64 { return p.Rate }},
	{PhaseEnqueue, "p50", func(p *PhaseResult) float64 { return latOf(p.Latency).P50 }},
	{PhaseEnqueue, "p99", func(p *PhaseResult) float64 { return latOf(p.Latency).P99 }},
	{PhaseLifecycle, "msgs/s", func(p *PhaseResult) float64 { return p.Rate }},
	{PhaseLifecycle, "deliv/s", func(p *PhaseResult) float64 { return p.DeliveryRate }},
	{PhaseLifecycle, "p50", func(p *PhaseResult) float64 { return latOf(p.Latency).P50 }},
	{PhaseLifecycle, "p99", func(p *PhaseResult) float64 { return latOf(p.Latency).P99 }},
	{PhaseLifecycle, "e2e p50", func(p *PhaseResult) float64 { return latOf(p.EndToEnd).P50 }},
	{PhaseLifecycle, "e2e p99", func(p *PhaseResult) float64 { return latOf(p.EndToEnd).P99 }},
}

// WriteRatio prints one line per client kind and phase (enqueue,
// lifecycle) that either system ran, with the
// figures of system num over those of system den, both from the same run:
// below 1x num is slower for a rate, above 1x it takes longer for a
// latency; then the servers' CPU per message over all phases. A figure
// either system lacks is "-". It prints nothing and
// returns false when either system is missing or did not run.
func WriteRatio(w io.Writer, systems []SystemResult, num, den string) bool {
	var a, b *SystemResult
	for i := range systems {
		switch systems[i].System {
		case num:
			a = &systems[i]
		case den:
			b = &systems[i]
		}
	}
	if a == nil || b == nil || len(a.Phases) == 0 || len(b.Phases) == 0 {
		return false
	}
	hasKind := func(s *SystemResult, kind string) bool {
		for _, p := range s.Phases {
			if p.Client == kind {
				return true
			}
		}
		return false
	}
	for _, kind := range ClientKinds {
		if !hasKind(a, kind) && !hasKind(b, kind) {
			continue
		}
		for _, phase := range []string{PhaseEnqueue, PhaseLifecycle} {
			pa, pb := a.Phase(kind, phase), b.Phase(kind, phase)
			var parts []string
			for _, f := range ratioFigures {
				if f.phase != phase {
					continue
				}
				cell := "-"
				if pa != nil && pb != nil {
					if va, vb := f.get(pa), f.get(pb); va != 0 && vb != 0 {
						cell = fmt.Sprintf("%.2fx", va/vb)
					}
				}
				parts = append(parts, f.label+" "+cell)
			}
			fmt.Fprintf(w, "%s/%s %s %s: %s\n", num, den, kind, phase, strings.Join(parts, ", "))
		}
	}
	// CPU per message moved is the figure least bent by other work on a
	// shared machine (rates and latencies move with the load).
	cell := "-"
	if ca, cb := serverCPUPerK(a), serverCPUPerK(b); ca != 0 && cb != 0 {
		cell = fmt.Sprintf("%.2fx", ca/cb)
	}
	fmt.Fprintf(w, "%s/%s all phases: server CPU s / 1k msgs %s\n", num, den, cell)
	return true
}
