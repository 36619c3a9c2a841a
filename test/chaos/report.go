package chaos

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Table renders a report as the table a run prints.
func (r *Report) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	fmt.Fprintf(&b, "chaos run: %d nodes, seed %d\n", r.Nodes, r.Seed)
	row("operations", fmt.Sprintf("%d enqueue calls, %d deliveries, %d ack / %d nack / %d extend calls, %d stream drops",
		r.EnqueueCalls, r.Deliveries, r.AckCalls, r.NackCalls, r.ExtendCalls, r.StreamDrops))
	kinds := make([]string, 0, len(r.FaultsByKind))
	total := 0
	for k, n := range r.FaultsByKind {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
		total += n
	}
	sort.Strings(kinds)
	row("faults", fmt.Sprintf("%d (%s), %d with errors", total, strings.Join(kinds, " "), r.FaultErrors))
	row("acked enqueues (messages)", r.AckedEnqueues)
	row("failed enqueues", r.FailedEnqueue)
	row("lost", r.Lost)
	row("duplicate acks", r.DuplicateAcks)
	row("redeliveries", r.Redeliveries)
	row("dead-lettered", r.DeadLettered)
	row("unknown enqueue outcomes", fmt.Sprintf("%d (present %d, absent %d)", r.UnknownEnqueues, r.UnknownResolvedPresent, r.UnknownResolvedAbsent))
	row("settled by an unanswered ack", r.SettledByUnknownAck)
	row("attempts never seen", fmt.Sprintf("%d (%d explained by a fault or a stream end)", r.UnseenAttempts, r.UnseenExcused))
	fl := r.Flow
	row("concurrency caps", fmt.Sprintf("%d leases of capped keys; most in flight at once %s (caps %s); %d messages of cap-1 keys in order, %d times across a change of leader",
		fl.CappedLeases, keyCounts(fl.MaxInFlight), keyCaps(fl.Caps), fl.OrderedMessages, fl.OrderedAcrossLeaders))
	row("pauses", fmt.Sprintf("%d timed key pauses (%d across a change of leader), %d judged for their end; grant after the end p50 %v, max %v",
		fl.Pauses, fl.PausesAcrossLeaders, fl.PausesJudgedEnd, pct(fl.PauseLatenessMs, 50), pct(fl.PauseLatenessMs, 100)))
	row("message stories after failover", fmt.Sprintf("%d GetMessage answers, %d listing the old leader's lease", fl.Lookups, fl.LookupsFound))
	row("longest write unavailability", fmt.Sprintf("%v (from +%v)", time.Duration(r.LongestUnavailabilityMs)*time.Millisecond,
		time.Duration(r.UnavailableFromMs)*time.Millisecond))
	row("recovery after healing", time.Duration(r.RecoveryMs)*time.Millisecond)
	row("replicas consistent", r.Consistent)
	if l := r.Linearizability; l != nil {
		row("config registers (porcupine)", fmt.Sprintf("%s in %v: %d writes (%d unknown, %d of them seen by no read; %d refused), %d reads (%d unanswered)",
			l.Result, time.Duration(l.CheckMs)*time.Millisecond, l.Writes+l.UnknownWrites, l.UnknownWrites, l.UnknownUnseen, l.FailedWrites, l.Reads, l.FailedReads))
	}
	row("pause-read register", fmt.Sprintf("%d linearizable reads answered, %d refused or redirected; %d stale-header reads, %d of them missed a write",
		r.RegisterReads, r.RegisterReadsRefused, r.RegisterStaleReads, r.RegisterStaleMissed))
	row("membership, clocks", fmt.Sprintf("%d nodes removed (%d seen out of the configuration) and rejoined, %d node starts on a clock minutes off",
		r.Rejoins, r.RemovedFromConfig, r.ClockedStarts))
	row("violations", len(r.Violations))
	inv := make([]string, 0, len(r.ViolationsByInvariant))
	for k, n := range r.ViolationsByInvariant {
		inv = append(inv, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(inv)
	if len(inv) > 0 {
		row("violations by invariant", strings.Join(inv, " "))
	}
	tw.Flush()
	if r.Soak != nil {
		b.WriteString("resources (soak):\n")
		b.WriteString(r.Soak.Table())
	}
	return b.String()
}

func keyCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func keyCaps(m map[string]int32) string {
	parts := make([]string, 0, len(m))
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// pct is the p-th percentile of sorted ms figures, as a duration ("-" for none).
func pct(sorted []int64, p int) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := (len(sorted) - 1) * p / 100
	return (time.Duration(sorted[i]) * time.Millisecond).String()
}
