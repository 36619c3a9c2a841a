package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterBody is the cluster page.
type clusterBody struct {
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
	d.render(w, r, http.StatusOK, "cluster", "Cluster", body)
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
}

type queuesBody struct {
	Queues      []queueRow
	ConsumerErr string
}

func (d *Dashboard) row(q *raftqv1.QueueInfo, consumers map[string]int64) queueRow {
	st := q.GetStats()
	row := queueRow{QueueInfo: q, Depth: st.GetReady() + st.GetDelayed() + st.GetInFlight(), Consumers: "?", Drain: drainText(q.GetDrain())}
	if n, ok := consumers[q.GetName()]; ok {
		row.Consumers = strconv.FormatInt(n, 10)
	}
	samples := d.history.Samples(q.GetName())
	row.Rates = RatesOf(samples)
	depths := make([]string, len(samples))
	for i, s := range samples {
		depths[i] = strconv.FormatInt(s.Depth, 10)
	}
	row.Spark, row.SparkSamples = strings.Join(depths, ","), len(samples)
	return row
}

func (d *Dashboard) queues(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := d.callCtx(r)
	defer cancel()
	qs, err := d.b.LocalQueues(ctx)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	body := queuesBody{}
	consumers := map[string]int64{}
	if lq, err := d.b.LeaderQueues(ctx); err != nil {
		body.ConsumerErr = status.Convert(err).Message()
	} else {
		for _, q := range lq {
			consumers[q.GetName()] = q.GetStats().GetConsumers()
		}
	}
	for _, q := range qs {
		body.Queues = append(body.Queues, d.row(q, consumers))
	}
	d.render(w, r, http.StatusOK, "queues", "Queues", body)
}

// queueBody is the page of one queue.
type queueBody struct {
	queueRow
	Keys         []keyRow
	Throttles    []throttleRow
	KeysErr      string
	ConsumerList []*raftqv1.ConsumerInfo
	ConsumerErr  string
	Peek         []*raftqv1.Delivery
	PeekErr      string
	DLQ          []*raftqv1.Delivery
	DLQErr       string
	Redriven     string
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

func (d *Dashboard) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := d.callCtx(r)
	defer cancel()
	q, err := d.b.LocalQueue(ctx, name)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	body := queueBody{Redriven: r.URL.Query().Get("redriven")}
	consumers := map[string]int64{}
	if lq, err := d.b.LeaderQueue(ctx, name); err != nil {
		body.KeysErr = status.Convert(err).Message()
	} else {
		consumers[name] = lq.GetStats().GetConsumers()
		body.Keys, body.Throttles = keyRows(lq.GetFairnessKeys()), throttleRows(lq.GetThrottleKeys())
	}
	body.queueRow = d.row(q, consumers)
	if body.ConsumerList, err = d.b.ListConsumers(ctx, name); err != nil {
		body.ConsumerErr = status.Convert(err).Message()
	}
	peekN, dlqN := limitParam(r, "peek"), limitParam(r, "dlq")
	if body.Peek, err = d.b.Peek(ctx, name, peekN, false); err != nil {
		body.PeekErr = status.Convert(err).Message()
	}
	if !q.GetIsDeadLetterQueue() {
		if body.DLQ, err = d.b.Peek(ctx, name, dlqN, true); err != nil {
			body.DLQErr = status.Convert(err).Message()
		}
	}
	d.render(w, r, http.StatusOK, "queue", name, body)
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

func (d *Dashboard) redrive(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := r.ParseForm(); err != nil {
		d.fail(w, r, status.Error(codes.InvalidArgument, err.Error()))
		return
	}
	var limit int64
	if s := strings.TrimSpace(r.PostForm.Get("limit")); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			d.fail(w, r, status.Errorf(codes.InvalidArgument, "limit must be a whole number ≥ 0 (0 = all), not %q", s))
			return
		}
		limit = n
	}
	ctx, cancel := d.callCtx(r)
	defer cancel()
	moved, err := d.b.Redrive(ctx, name, limit)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard: redrive", "queue", name, "limit", limit, "moved", moved, "remote", r.RemoteAddr)
	// Post/redirect/get: a reload does not redrive again.
	http.Redirect(w, r, "/queues/"+url.PathEscape(name)+"?redriven="+strconv.FormatInt(moved, 10), http.StatusSeeOther)
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
