package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// printJSON writes m as one line of protobuf JSON, with field names as in
// the .proto and API.md and zero values present, so scripts need not
// special-case missing fields.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func ms(v int64) string {
	return (time.Duration(v) * time.Millisecond).String()
}

// limit renders a limit whose zero means "none".
func limit(v int64, zero string, format func(int64) string) string {
	if v == 0 {
		return zero
	}
	return format(v)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// printQueue shows one queue; origins names the queues whose dead-letter
// queue q is (looked up by the caller only when q is one).
func printQueue(w io.Writer, q *raftqv1.QueueInfo, origins []string) error {
	cfg, st := q.GetConfig(), q.GetStats()
	tw := table(w)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("name", q.GetName())
	if g := q.GetGroup(); g != "" {
		line("group", g)
	}
	if q.GetIsDeadLetterQueue() {
		of := "another queue (this is a DLQ)"
		if len(origins) > 0 {
			of = strings.Join(origins, ", ")
		}
		line("dead-letter queue of", of)
	} else {
		line("dead letter queue", cfg.GetDeadLetterQueue())
	}
	line("visibility timeout", ms(cfg.GetVisibilityTimeoutMs()))
	line("max deliveries", strconv.Itoa(int(cfg.GetMaxDeliveries())))
	line("max depth", limit(cfg.GetMaxDepth(), "unlimited", itoa))
	line("max bytes", limit(cfg.GetMaxBytes(), "unlimited", itoa))
	line("max message bytes", limit(cfg.GetMaxMessageBytes(), "default", itoa))
	line("message ttl", limit(cfg.GetMessageTtlMs(), "none", ms))
	line("dedup window", ms(cfg.GetDedupWindowMs()))
	line("fairness quantum", strconv.Itoa(int(cfg.GetFairnessQuantum())))
	line("throttles", formatThrottles(cfg.GetThrottles()))
	line("concurrency", formatConcurrency(cfg.GetConcurrencyLimit(), cfg.GetConcurrencyLimits()))
	line("retry", formatRetry(cfg.GetRetry()))
	line("ready", itoa(st.GetReady()))
	line("delayed", itoa(st.GetDelayed()))
	line("in flight", itoa(st.GetInFlight()))
	line("dead lettered", itoa(st.GetDeadLettered()))
	line("consumers", itoa(st.GetConsumers()))
	line("bytes", itoa(st.GetBytes()))
	if q.GetIsDeadLetterQueue() && st.GetEnqueuedTotal() == 0 {
		// Dead-lettering is not an enqueue: a DLQ's messages arrive
		// uncounted here, so 0 would read as "empty".
		line("enqueued total", "- (messages arrive by dead-lettering, counted as dead lettered in their queue)")
	} else {
		line("enqueued total", itoa(st.GetEnqueuedTotal()))
	}
	line("acked total", itoa(st.GetAckedTotal()))
	line("nacked total", itoa(st.GetNackedTotal()))
	line("expired total", itoa(st.GetExpiredTotal()))
	if d := q.GetDrain(); d != nil {
		line("drain", formatDrain(d))
	}
	if q.GetPaused() {
		line("paused", formatPause(q.GetPausedUntilMs()))
	} else {
		line("paused", "no")
	}
	if len(q.GetPausedKeys()) > 0 {
		line("paused keys", strconv.Itoa(len(q.GetPausedKeys())))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(q.GetRedrives()) > 0 {
		fmt.Fprintln(w, "\nredrives in progress:")
		tw = table(w)
		fmt.Fprintln(tw, "JOB\tMOVED\tOF\tRATE/S\tSTARTED\tFILTERS")
		for _, j := range q.GetRedrives() {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%g\t%s\t%s\n", j.GetId(), j.GetMoved(), j.GetTotal(), j.GetRatePerSec(),
				time.UnixMilli(j.GetStartedAtMs()).UTC().Format(time.RFC3339), redriveFilters(j))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(q.GetPausedKeys()) > 0 {
		fmt.Fprintln(w, "\npaused fairness keys:")
		tw = table(w)
		fmt.Fprintln(tw, "KEY\tPAUSED")
		for _, k := range q.GetPausedKeys() {
			fmt.Fprintf(tw, "%s\t%s\n", k.GetKey(), formatPause(k.GetUntilMs()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(q.GetFairnessKeys()) > 0 {
		fmt.Fprintln(w, "\nfairness keys:")
		tw = table(w)
		fmt.Fprintln(tw, "KEY\tPENDING\tWEIGHT\tDEFICIT")
		for _, k := range q.GetFairnessKeys() {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", displayKey(k.GetKey()), k.GetPending(), k.GetWeight(), k.GetDeficit())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(q.GetThrottleKeys()) > 0 {
		fmt.Fprintln(w, "\nthrottle keys:")
		tw = table(w)
		fmt.Fprintln(tw, "KEY\tTOKENS\tRATE/S\tBURST")
		for _, k := range q.GetThrottleKeys() {
			fmt.Fprintf(tw, "%s\t%.2f\t%g\t%d\n", k.GetKey(), k.GetTokens(), k.GetRatePerSec(), k.GetBurst())
		}
		return tw.Flush()
	}
	return nil
}

// formatDrain says where a queue's depth is heading, from its moving
// averages.
func formatDrain(d *raftqv1.DrainEstimate) string {
	switch d.GetState() {
	case "draining":
		eta := time.Duration(d.GetEmptiesInSec() * float64(time.Second)).Round(time.Second)
		return fmt.Sprintf("empties in ~%s at the current rate (%.2f/s net, %.2f deliveries/s)", eta, d.GetDepthChangePerSec(), d.GetDeliveriesPerSec())
	case "growing":
		return fmt.Sprintf("growing (+%.2f/s net, %.2f deliveries/s)", d.GetDepthChangePerSec(), d.GetDeliveriesPerSec())
	case "steady":
		return fmt.Sprintf("steady (%.2f deliveries/s)", d.GetDeliveriesPerSec())
	case "unknown":
		return "estimating (needs two samples)"
	}
	return d.GetState()
}

func displayKey(k string) string {
	if k == "" {
		return `""`
	}
	return k
}

// formatConcurrency is the default cap per concurrency key and the
// per-key overrides.
func formatConcurrency(def int32, keys map[string]int32) string {
	out := "no cap"
	if def > 0 {
		out = fmt.Sprintf("%d per key", def)
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		v := strconv.Itoa(int(keys[k]))
		if keys[k] == 0 {
			v = "uncapped"
		}
		parts = append(parts, k+"="+v)
	}
	if len(parts) > 0 {
		out += "; " + strings.Join(parts, ", ")
	}
	return out
}

func formatThrottles(m map[string]*raftqv1.ThrottleRule) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		r := m[k]
		parts = append(parts, fmt.Sprintf("%s=%g/s burst %d", k, r.GetRatePerSec(), max(r.GetBurst(), 1)))
	}
	return strings.Join(parts, ", ")
}

// deadLetterOrigins maps each dead-letter queue named in qs's configs to
// the queues (of qs, sorted) that dead-letter into it.
func deadLetterOrigins(qs []*raftqv1.QueueInfo) map[string][]string {
	of := make(map[string][]string)
	for _, q := range qs {
		if d := q.GetConfig().GetDeadLetterQueue(); d != "" {
			of[d] = append(of[d], q.GetName())
		}
	}
	for _, names := range of {
		slices.Sort(names)
	}
	return of
}

func printQueueTable(w io.Writer, qs []*raftqv1.QueueInfo) error {
	origins := deadLetterOrigins(qs)
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tREADY\tDELAYED\tIN_FLIGHT\tDEAD_LETTERED\tCONSUMERS\tENQUEUED\tACKED\tDLQ")
	for _, q := range qs {
		st := q.GetStats()
		dlq := q.GetConfig().GetDeadLetterQueue()
		enqueued := itoa(st.GetEnqueuedTotal())
		if q.GetIsDeadLetterQueue() {
			dlq = "(is a DLQ)"
			if of := origins[q.GetName()]; len(of) > 0 {
				dlq = "(DLQ of " + strings.Join(of, ", ") + ")"
			}
			if st.GetEnqueuedTotal() == 0 {
				// Its messages arrive by dead-lettering, which is not
				// an enqueue: 0 here would read as "never received any".
				enqueued = "-"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", q.GetName(), st.GetReady(), st.GetDelayed(),
			st.GetInFlight(), st.GetDeadLettered(), st.GetConsumers(), enqueued, st.GetAckedTotal(), dlq)
	}
	return tw.Flush()
}

// payloadText shows a payload as-is when it is printable text, quoted
// otherwise, cut to n bytes (0: no cut).
func payloadText(p []byte, n int) string {
	cut := false
	if n > 0 && len(p) > n {
		p, cut = p[:n], true
		for len(p) > 0 && !utf8.Valid(p) {
			p = p[:len(p)-1]
		}
	}
	s := string(p)
	printable := utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) && r != ' '
	}) < 0
	if !printable {
		s = strconv.Quote(s)
	}
	if cut {
		s += "…"
	}
	return s
}

func printDeliveryTable(w io.Writer, ds []*raftqv1.Delivery, deadLetter bool) error {
	tw := table(w)
	if deadLetter {
		fmt.Fprintln(tw, "ID\tATTEMPT\tORIGIN\tREASON\tENQUEUED\tPAYLOAD")
	} else {
		fmt.Fprintln(tw, "ID\tATTEMPT\tPRIORITY\tKEY\tENQUEUED\tPAYLOAD")
	}
	for _, d := range ds {
		enq := time.UnixMilli(d.GetEnqueuedAtMs()).UTC().Format(time.RFC3339)
		if deadLetter {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", d.GetId(), d.GetAttempt(), d.GetOriginQueue(),
				d.GetDeadLetterReason(), enq, payloadText(d.GetPayload(), 60))
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", d.GetId(), d.GetAttempt(), d.GetPriority(),
				displayKey(d.GetFairnessKey()), enq, payloadText(d.GetPayload(), 60))
		}
	}
	return tw.Flush()
}

// adminOnly stands for a field the node withheld from a caller who is not
// an admin (StatusResponse.withheld): a zero there would read as a broken
// cluster.
const adminOnly = "(admin only)"

func printStatus(w io.Writer, st *raftqv1.StatusResponse) error {
	tw := table(w)
	leader := st.GetLeaderId()
	if leader == "" {
		leader = "(none)"
	} else if st.GetLeaderAddr() != "" {
		leader += " (" + st.GetLeaderAddr() + ")"
	}
	fmt.Fprintf(tw, "leader:\t%s\n", leader)
	if st.GetWithheld() {
		for _, k := range []string{"term", "commit index", "applied index", "log version", "held"} {
			fmt.Fprintf(tw, "%s:\t%s\n", k, adminOnly)
		}
	} else {
		fmt.Fprintf(tw, "term:\t%d\n", st.GetTerm())
		fmt.Fprintf(tw, "commit index:\t%d\n", st.GetCommitIndex())
		fmt.Fprintf(tw, "applied index:\t%d\n", st.GetAppliedIndex())
		fmt.Fprintf(tw, "log version:\t%d\n", st.GetClusterVersion())
		held := fsm.HumanBytes(st.GetHeldBytes())
		if set := st.GetSettings(); set != nil {
			limit := "unlimited"
			if set.GetMaxQueuedBytes() > 0 {
				limit = fsm.HumanBytes(set.GetMaxQueuedBytes())
			}
			fmt.Fprintf(tw, "held:\t%s of max-queued-bytes %s\n", held, limit)
			if st.GetClusterVersion() >= fsm.GuardVersion {
				queues := "unlimited"
				if set.GetMaxQueues() > 0 {
					queues = strconv.FormatInt(set.GetMaxQueues(), 10)
				}
				fmt.Fprintf(tw, "max-queues:\t%s\n", queues)
			}
			if set.GetGroups() > 0 {
				// Only the meta group has them (0 before the handover).
				fmt.Fprintf(tw, "groups:\t%d, %d replicas each\n", set.GetGroups(), set.GetReplicas())
			}
		} else {
			fmt.Fprintf(tw, "held:\t%s\n", held)
		}
		if m := st.GetMeta(); m != nil {
			state := "seeded"
			if !m.GetSeeded() {
				state = "starting"
			}
			fmt.Fprintf(tw, "meta group:\t%s, leader %s, voters %s, nonvoters %s, %d queues placed\n", state,
				cmp.Or(m.GetLeaderId(), "(none)"), cmp.Or(strings.Join(m.GetVoters(), ","), "-"), cmp.Or(strings.Join(m.GetNonvoters(), ","), "-"), m.GetPlacedQueues())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = table(w)
	if st.GetWithheld() {
		fmt.Fprintln(tw, "ID\tSTATE\tSUFFRAGE\tHEALTHY\tGRPC")
		for _, n := range st.GetNodes() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\n", n.GetId(), n.GetState(), n.GetSuffrage(), n.GetHealthy(), n.GetGrpcAddr())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintln(w, "(admin only: each node's APPLIED, LAST_CONTACT, DISK, MAX_LOG_VERSION, VERSION, ZONE and its RAFT and HTTP addresses)")
		return err
	}
	// ZONE last: scripts that read the columns before it by position
	// keep working.
	fmt.Fprintln(tw, "ID\tSTATE\tSUFFRAGE\tHEALTHY\tAPPLIED\tLAST_CONTACT\tDISK\tMAX_LOG_VERSION\tVERSION\tGRPC\tRAFT\tHTTP\tZONE")
	for _, n := range st.GetNodes() {
		contact := "-"
		if n.GetLastContactMs() > 0 {
			contact = ms(n.GetLastContactMs())
		}
		version := n.GetVersion()
		if version == "" {
			version = "-"
		}
		// low: below --min-free-disk-bytes (plus room for a snapshot),
		// so writes that add data may be refused.
		disk := "ok"
		if n.GetDiskLow() {
			disk = "low"
		}
		zone := n.GetZone()
		if zone == "" {
			zone = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", n.GetId(), n.GetState(), n.GetSuffrage(),
			n.GetHealthy(), n.GetAppliedIndex(), contact, disk, n.GetMaxLogVersion(), version, n.GetGrpcAddr(), n.GetRaftAddr(), n.GetHttpAddr(), zone)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printIdentity(w, st)
}

// printIdentity prints the cluster id and the gossip members kept out of
// the cluster (cluster/DESIGN.md, "Cluster identity").
func printIdentity(w io.Writer, st *raftqv1.StatusResponse) error {
	if st.GetClusterId() != "" {
		fmt.Fprintf(w, "\ncluster id: %s\n", st.GetClusterId())
	}
	if len(st.GetRefusedMembers()) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nNOT ADMITTED (seen in gossip, kept out of the cluster):")
	tw := table(w)
	fmt.Fprintln(tw, "ID\tGOSSIP\tCLUSTER_ID\tWHY")
	for _, r := range st.GetRefusedMembers() {
		cid := r.GetClusterId()
		if cid == "" {
			cid = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.GetId(), r.GetGossipAddr(), cid, r.GetReason())
	}
	return tw.Flush()
}

func printVerify(w io.Writer, v *raftqv1.VerifyResponse) error {
	tw := table(w)
	fmt.Fprintln(tw, "ID\tAPPLIED\tDIGEST\tCOUNTERS_OK\tERROR")
	for _, n := range v.GetNodes() {
		digest := n.GetDigest()
		if digest == "" {
			digest = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%t\t%s\n", n.GetId(), n.GetAppliedIndex(), digest, n.GetCountersOk(), n.GetError())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "consistent: %t\n", v.GetConsistent()); err != nil {
		return err
	}
	if ids := v.GetInconsistentIds(); len(ids) > 0 {
		_, err := fmt.Fprintf(w, "inconsistent: %s\n", strings.Join(ids, " "))
		return err
	}
	return nil
}

// plural is "1 message", "2 messages": what the CLI counts, in words.
func plural[N int | int32 | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(int64(n), 10) + " " + noun + "s"
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

func itThem(n int) string {
	if n == 1 {
		return "it will be"
	}
	return "they will be"
}

// redriveFilters says what a redrive job selects ("-" for everything).
func redriveFilters(j *raftqv1.RedriveJob) string {
	var fs []string
	if k := j.GetFairnessKey(); k != "" {
		fs = append(fs, "key="+k)
	}
	if r := j.GetReasonContains(); r != "" {
		fs = append(fs, fmt.Sprintf("reason~%q", r))
	}
	if o := j.GetOlderThanMs(); o > 0 {
		fs = append(fs, "older-than="+ms(o))
	}
	if n := j.GetMessageIds(); n > 0 {
		fs = append(fs, fmt.Sprintf("%d ids left", n))
	}
	if len(fs) == 0 {
		return "-"
	}
	return strings.Join(fs, " ")
}

// formatRetry is a queue's retry policy as a person reads it.
func formatRetry(p *raftqv1.RetryPolicy) string {
	if p == nil {
		return "none (redelivered at once)"
	}
	return fmt.Sprintf("%s, ×%g per attempt, at most %s, ±%g%% jitter",
		ms(p.GetInitialDelayMs()), p.GetMultiplier(), ms(p.GetMaxDelayMs()), p.GetJitter()*100)
}
