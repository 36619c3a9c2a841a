package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterBody is the cluster page.
type clusterBody struct {
	Totals    totals
	TotalsErr string
	Status    *raftqv1.StatusResponse
	StatusErr string
	Nodes     []nodeRow
	Verify    *raftqv1.VerifyResponse
	VerifyAt  string
	VerifyErr string
}

type nodeRow struct {
	*raftqv1.Node
	Lag      uint64
	LagKnown bool
	Self     bool
	Digest   *raftqv1.NodeDigest
	Agrees   bool
	Uptime   string // "" when the node did not say when it started
}

func (d *Dashboard) cluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	body := clusterBody{}
	// Replicas first, then status: the applied indexes shown are then at
	// or past the index the digests were compared at.
	v := d.verify(r)
	if v.err != nil {
		body.VerifyErr = status.Convert(v.err).Message()
	} else {
		body.Verify = v.resp
		body.VerifyAt = v.at.UTC().Format(time.RFC3339)
	}
	st, err := d.b.Status(ctx)
	if err != nil {
		body.StatusErr = status.Convert(err).Message()
	}
	body.Status = st
	var leaderApplied uint64
	for _, n := range st.GetNodes() {
		if n.GetId() == st.GetLeaderId() {
			leaderApplied = n.GetAppliedIndex()
		}
	}
	bad := map[string]bool{}
	for _, id := range v.resp.GetInconsistentIds() {
		bad[id] = true
	}
	for _, n := range st.GetNodes() {
		row := nodeRow{Node: n, Self: n.GetId() == d.b.NodeID()}
		if ms := n.GetStartedAtMs(); ms > 0 {
			row.Uptime = humanDuration(max(d.cfg.Now().Sub(time.UnixMilli(ms)), 0).Round(time.Second))
		}
		if leaderApplied > 0 && n.GetAppliedIndex() > 0 {
			row.LagKnown = true
			if leaderApplied > n.GetAppliedIndex() {
				row.Lag = leaderApplied - n.GetAppliedIndex()
			}
		}
		for _, nd := range v.resp.GetNodes() {
			if nd.GetId() == n.GetId() {
				row.Digest = nd
				row.Agrees = nd.GetDigest() != "" && nd.GetCountersOk() && !bad[nd.GetId()]
			}
		}
		body.Nodes = append(body.Nodes, row)
	}
	body.Totals, err = d.totals(ctx)
	if err != nil {
		body.TotalsErr = status.Convert(err).Message()
	}
	d.render(w, r, http.StatusOK, "cluster", "Cluster", body)
}

// totals is the overview's sum over the queues the caller may see.
type totals struct {
	Queues, DLQs                   int
	Ready, Delayed, InFlight, Held int64 // Held: in dead-letter queues
	DeadLettered                   int64
	Bytes                          int64
	Consumers                      string // "?" when the leader did not answer
	Enqueued, Acked, Deliveries    float64
	RatesKnown                     bool
	NoConsumers, Stalled           []string // flagged queues
}

func (d *Dashboard) totals(ctx context.Context) (totals, error) {
	t := totals{Consumers: "?"}
	qs, err := d.b.LocalQueues(ctx)
	if err != nil {
		return t, err
	}
	consumers := map[string]int64{}
	if lq, err := d.b.LeaderQueues(ctx); err == nil {
		var n int64
		for _, q := range lq {
			consumers[q.GetName()] = q.GetStats().GetConsumers()
			n += q.GetStats().GetConsumers()
		}
		t.Consumers = strconv.FormatInt(n, 10)
	}
	stalled := d.scanStalls(ctx, qs, consumers)
	for _, q := range qs {
		st := q.GetStats()
		t.Queues++
		t.Ready += st.GetReady()
		t.Delayed += st.GetDelayed()
		t.InFlight += st.GetInFlight()
		t.Bytes += st.GetBytes()
		if q.GetIsDeadLetterQueue() {
			t.DLQs++
			t.Held += st.GetReady() + st.GetDelayed() + st.GetInFlight()
		}
		row := d.row(q, consumers)
		if row.Rates.Known {
			t.RatesKnown = true
			t.Enqueued += row.Rates.Enqueued
			t.Acked += row.Rates.Acked
		}
		t.Deliveries += q.GetDrain().GetDeliveriesPerSec()
		if row.NoConsumers {
			t.NoConsumers = append(t.NoConsumers, q.GetName())
		}
		if stalled[q.GetName()] > 0 {
			t.Stalled = append(t.Stalled, q.GetName())
		}
	}
	return t, nil
}

// verify returns a replica comparison no older than VerifyTTL, asking
// for a new one when the last is older (or failed).
func (d *Dashboard) verify(r *http.Request) *verifyResult {
	d.verifyMu.Lock()
	defer d.verifyMu.Unlock()
	now := d.cfg.Now()
	if v := d.verified; v != nil && v.err == nil && now.Sub(v.at) < d.cfg.VerifyTTL {
		return v
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	resp, err := d.b.Verify(ctx)
	d.verified = &verifyResult{at: now, resp: resp, err: err}
	return d.verified
}

// queueRow is one queue on the queues page and the head of the queue page.
type queueRow struct {
	*raftqv1.QueueInfo
	Depth        int64
	Consumers    string // from the leader; "?" when it could not be asked
	Rates        Rates
	Drain        string
	Spark        string // depths, comma-separated, oldest first
	SparkSamples int
	SparkMin     int64 // the scale the sparkline is drawn on
	SparkMax     int64
	SparkSpan    string // the time its samples cover, "" with fewer than two
	// NoConsumers: messages are ready and the leader knows no consumer
	// (the drain estimate says "steady" then, which reads as fine).
	NoConsumers bool
	// Stalled counts the queue's consumers that hold leases, have no
	// credit and have acked nothing for the dashboard's StallAfter.
	Stalled int
}

type queuesBody struct {
	Queues      []queueRow
	ConsumerErr string
	Note        string
	ActionErr   string
	Form        url.Values // the create form as it was posted, after an error
	StallAfter  string
}

func (d *Dashboard) row(q *raftqv1.QueueInfo, consumers map[string]int64) queueRow {
	st := q.GetStats()
	row := queueRow{QueueInfo: q, Depth: st.GetReady() + st.GetDelayed() + st.GetInFlight(), Consumers: "?", Drain: drainText(q.GetDrain())}
	if n, ok := consumers[q.GetName()]; ok {
		row.Consumers = strconv.FormatInt(n, 10)
		// A dead-letter queue is not consumed as a rule: no flag there.
		row.NoConsumers = n == 0 && st.GetReady() > 0 && !q.GetIsDeadLetterQueue()
	}
	samples := d.history.Samples(q.GetName())
	row.Rates = RatesOf(samples)
	depths := make([]string, len(samples))
	for i, s := range samples {
		depths[i] = strconv.FormatInt(s.Depth, 10)
		if i == 0 || s.Depth < row.SparkMin {
			row.SparkMin = s.Depth
		}
		row.SparkMax = max(row.SparkMax, s.Depth)
	}
	row.Spark, row.SparkSamples = strings.Join(depths, ","), len(samples)
	if len(samples) >= 2 {
		row.SparkSpan = humanDuration(samples[len(samples)-1].At.Sub(samples[0].At).Round(time.Second))
	}
	return row
}

// stallScanLimit bounds the queues whose consumers the queues page asks
// the leader for (one ListConsumers each) to find stalled ones.
const stallScanLimit = 20

func (d *Dashboard) queues(w http.ResponseWriter, r *http.Request) {
	d.renderQueues(w, r, http.StatusOK, "")
}

func (d *Dashboard) renderQueues(w http.ResponseWriter, r *http.Request, code int, actionErr string) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	qs, err := d.b.LocalQueues(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	body := queuesBody{Note: doneNote(r), ActionErr: actionErr, StallAfter: humanDuration(d.cfg.StallAfter)}
	if actionErr != "" {
		body.Form = r.PostForm
	}
	consumers := map[string]int64{}
	if lq, err := d.b.LeaderQueues(ctx); err != nil {
		body.ConsumerErr = status.Convert(err).Message()
	} else {
		for _, q := range lq {
			consumers[q.GetName()] = q.GetStats().GetConsumers()
		}
	}
	stalled := d.scanStalls(ctx, qs, consumers)
	for _, q := range qs {
		row := d.row(q, consumers)
		row.Stalled = stalled[q.GetName()]
		body.Queues = append(body.Queues, row)
	}
	d.render(w, r, code, "queues", "Queues", body)
}

// scanStalls asks the leader for the consumers of the queues that have
// messages in flight and consumers (at most stallScanLimit of them) and
// counts the stalled ones of each.
func (d *Dashboard) scanStalls(ctx context.Context, qs []*raftqv1.QueueInfo, consumers map[string]int64) map[string]int {
	out := map[string]int{}
	scanned := 0
	for _, q := range qs {
		if q.GetStats().GetInFlight() == 0 || consumers[q.GetName()] == 0 || scanned >= stallScanLimit {
			continue
		}
		scanned++
		cs, err := d.b.ListConsumers(ctx, q.GetName())
		if err != nil {
			continue
		}
		for _, c := range d.stalls.observe(d.cfg.Now(), q.GetName(), cs) {
			if c.Stalled {
				out[q.GetName()]++
			}
		}
	}
	return out
}

// queueBody is the page of one queue.
type queueBody struct {
	queueRow
	Keys         []keyRow
	Throttles    []throttleRow
	KeysErr      string
	ConsumerList []consumerRow
	ConsumerErr  string
	Peek         []messageRow
	PeekErr      string
	DLQ          []messageRow
	DLQErr       string
	// DLQFilter is the dead letters' filter as the page's form shows it
	// (log version 14), and Redrives the queue's redrive jobs in progress.
	DLQFilter dlqFilter
	Redrives  []*raftqv1.RedriveJob
	// Origins are the queues whose dead-letter queue this one is, each
	// with a redrive button (a DLQ's page).
	Origins []*raftqv1.QueueInfo
	Config  configView
	queueExtras
	RedriveKey string
	StallAfter string
}

// queueExtras is what an action adds to the queue page it renders.
type queueExtras struct {
	Note       string
	ActionErr  string
	Leased     *raftqv1.Delivery // what Get leased
	GotNothing bool              // Get found nothing to deliver
	Lagging    bool              // this node does not know the queue yet: the leader's numbers
}

// messageRow is one message in a table: its age against this node's clock.
type messageRow struct {
	*raftqv1.Delivery
	Age string
}

// configView is a queue's config as the page and its update form show
// it: durations as the CLI writes them.
type configView struct {
	VisibilityTimeout, MessageTTL, DedupWindow string
	MaxDeliveries, MaxDepth                    int64
	DeadLetterQueue                            string
	FairnessQuantum                            int32
}

func viewConfig(c *raftqv1.QueueConfig) configView {
	return configView{
		VisibilityTimeout: humanMs(c.GetVisibilityTimeoutMs()), MessageTTL: humanMs(c.GetMessageTtlMs()), DedupWindow: humanMs(c.GetDedupWindowMs()),
		MaxDeliveries: int64(c.GetMaxDeliveries()), MaxDepth: c.GetMaxDepth(), DeadLetterQueue: c.GetDeadLetterQueue(), FairnessQuantum: c.GetFairnessQuantum(),
	}
}

func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) {
	d.renderQueue(w, r, http.StatusOK, r.PathValue("name"), queueExtras{})
}

func (d *Dashboard) messageRows(ds []*raftqv1.Delivery) []messageRow {
	now := d.cfg.Now()
	rows := make([]messageRow, len(ds))
	for i, m := range ds {
		rows[i] = messageRow{Delivery: m, Age: "-"}
		if m.GetEnqueuedAtMs() > 0 {
			rows[i].Age = humanDuration(max(now.Sub(time.UnixMilli(m.GetEnqueuedAtMs())), 0).Round(time.Second))
		}
	}
	return rows
}

func (d *Dashboard) renderQueue(w http.ResponseWriter, r *http.Request, code int, name string, extras queueExtras) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	q, err := d.b.LocalQueue(ctx, name)
	if status.Code(err) == codes.NotFound {
		// Just created through this node, which has not applied it yet
		// (or it lags): the leader decides whether a queue exists.
		if lq, lerr := d.b.LeaderQueue(ctx, name); lerr == nil {
			q, err = lq, nil
			extras.Lagging = true
		}
	}
	if err != nil {
		if extras.ActionErr != "" {
			// The action's error says more than the page's.
			d.renderError(w, r, code, extras.ActionErr)
			return
		}
		d.fail(w, r, err)
		return
	}
	if extras.Note == "" {
		extras.Note = doneNote(r)
	}
	body := queueBody{queueExtras: extras, Config: viewConfig(q.GetConfig()), RedriveKey: idempotencyKey(), StallAfter: humanDuration(d.cfg.StallAfter)}
	consumers := map[string]int64{}
	if lq, err := d.b.LeaderQueue(ctx, name); err != nil {
		body.KeysErr = status.Convert(err).Message()
	} else {
		consumers[name] = lq.GetStats().GetConsumers()
		body.Keys, body.Throttles = keyRows(lq.GetFairnessKeys()), throttleRows(lq.GetThrottleKeys())
	}
	body.queueRow = d.row(q, consumers)
	if cs, err := d.b.ListConsumers(ctx, name); err != nil {
		body.ConsumerErr = status.Convert(err).Message()
	} else {
		body.ConsumerList = d.stalls.observe(d.cfg.Now(), name, cs)
		for _, c := range body.ConsumerList {
			if c.Stalled {
				body.Stalled++
			}
		}
	}
	peekN, dlqN := limitParam(r, "peek"), limitParam(r, "dlq")
	if peek, err := d.b.Peek(ctx, &raftqv1.PeekRequest{Queue: name, Limit: peekN}); err != nil {
		body.PeekErr = status.Convert(err).Message()
	} else {
		body.Peek = d.messageRows(peek)
	}
	if q.GetIsDeadLetterQueue() {
		if all, err := d.b.LocalQueues(ctx); err == nil {
			for _, o := range all {
				if o.GetConfig().GetDeadLetterQueue() == name {
					body.Origins = append(body.Origins, o)
				}
			}
		}
	} else {
		body.Redrives = q.GetRedrives()
		req, f, ferr := dlqPeekRequest(r, name, dlqN)
		body.DLQFilter = f
		if ferr != nil {
			body.DLQErr = status.Convert(ferr).Message()
		} else if dlq, err := d.b.Peek(ctx, req); err != nil {
			body.DLQErr = status.Convert(err).Message()
		} else {
			body.DLQ = d.messageRows(dlq)
		}
	}
	d.render(w, r, code, "queue", name, body)
}

type keyRow struct {
	*raftqv1.FairnessKeyStats
	Share   float64 // of delivery capacity while backlogged: weight / Σ backlogged weights
	Backlog float64 // of the queue's pending messages
}

type throttleRow struct {
	*raftqv1.ThrottleKeyStats
	Fill float64 // tokens / burst
}

// limitParam reads a peek limit from the query: 10 unless given, at most 100.
func limitParam(r *http.Request, key string) int32 {
	n, err := strconv.Atoi(r.URL.Query().Get(key))
	if err != nil || n <= 0 {
		return 10
	}
	return int32(min(n, 100))
}

func keyRows(keys []*raftqv1.FairnessKeyStats) []keyRow {
	var weights, pending float64
	for _, k := range keys {
		if k.GetPending() > 0 {
			weights += float64(max(k.GetWeight(), 1))
			pending += float64(k.GetPending())
		}
	}
	rows := make([]keyRow, len(keys))
	for i, k := range keys {
		rows[i] = keyRow{FairnessKeyStats: k}
		if k.GetPending() > 0 {
			rows[i].Share = float64(max(k.GetWeight(), 1)) / weights
			rows[i].Backlog = float64(k.GetPending()) / pending
		}
	}
	// Largest backlog first: the keys an operator looks for.
	slices.SortStableFunc(rows, func(a, b keyRow) int {
		switch {
		case a.GetPending() > b.GetPending():
			return -1
		case a.GetPending() < b.GetPending():
			return 1
		}
		return strings.Compare(a.GetKey(), b.GetKey())
	})
	return rows
}

func throttleRows(keys []*raftqv1.ThrottleKeyStats) []throttleRow {
	rows := make([]throttleRow, len(keys))
	for i, k := range keys {
		rows[i] = throttleRow{ThrottleKeyStats: k}
		if b := max(k.GetBurst(), 1); b > 0 {
			rows[i].Fill = min(k.GetTokens()/float64(b), 1)
		}
	}
	return rows
}

func drainText(e *raftqv1.DrainEstimate) string {
	switch e.GetState() {
	case "":
		return "not sampled yet"
	case "draining":
		return fmt.Sprintf("empties in ~%s", time.Duration(e.GetEmptiesInSec()*float64(time.Second)).Round(time.Second).String())
	default:
		return e.GetState()
	}
}

// humanMs is a duration in milliseconds as the CLI writes it ("10m",
// "30s"); 0 is "-" (the default or none).
func humanMs(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return fsm.HumanMs(ms)
}

func humanDuration(d time.Duration) string { return fsm.HumanMs(d.Milliseconds()) }

func formatMs(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// preview shows the start of a payload: text as it is, anything else as
// its size.
func preview(b []byte) string {
	const max = 120
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, binary)", len(b))
	}
	if len(b) <= max {
		return string(b)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "…"
}

// dlqFilter is the dead letters' filter (log version 14) as the query
// (dlq_key, dlq_reason, dlq_older, dlq_after) and the page's forms carry
// it: the redrive form sends the same filter, so what the page lists is
// what a redrive moves.
type dlqFilter struct {
	Key, Reason, OlderThan, After string
}

// Set reports whether any filter is given.
func (f dlqFilter) Set() bool { return f != dlqFilter{} }

// dlqPeekRequest is the Peek of the queue's dead letters the page's query
// asks for.
func dlqPeekRequest(r *http.Request, name string, limit int32) (*raftqv1.PeekRequest, dlqFilter, error) {
	q := r.URL.Query()
	f := dlqFilter{Key: q.Get("dlq_key"), Reason: q.Get("dlq_reason"), OlderThan: strings.TrimSpace(q.Get("dlq_older")), After: q.Get("dlq_after")}
	req := &raftqv1.PeekRequest{Queue: name, Limit: limit, DeadLetter: true, FairnessKey: f.Key, ReasonContains: f.Reason, AfterId: f.After}
	older, _, err := durationField(url.Values{"older": {f.OlderThan}}, "older", "older than")
	req.OlderThanMs = older
	return req, f, err
}
