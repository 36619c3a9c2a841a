package transport

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/logconv"
	"github.com/raftq/raftq/fsm/state"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/scheduler"
)

// The API edge: the server keeps message ids and lease tokens as numbers
// and configs in the log format; clients see fixed-width hex strings and
// raftq.v1 messages. Every such projection is here.

// FormatID renders a message id or lease token for the API: fixed-width
// hex, so string order is numeric order (logconv.FormatID).
func FormatID(v uint64) string { return logconv.FormatID(v) }

// ParseID parses FormatID's output; anything else is fsm.ErrInvalid.
func ParseID(s string) (uint64, error) { return parseHex("id", s) }

// parseHex is ParseID naming what it parses ("message id", "lease
// token"), so an error says which of the two was wrong.
func parseHex(what, s string) (uint64, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("%w: %s %q is not 16 hex digits", fsm.ErrInvalid, what, s)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not 16 hex digits", fsm.ErrInvalid, what, s)
	}
	return v, nil
}

// formatIDs formats a batch's ids into one string, each id a 16-byte
// slice of it: two allocations for any number of ids instead of one per id
// (an Enqueue of 1,000 messages answers 1,000 ids).
func formatIDs(ids []uint64) []string {
	out := make([]string, len(ids))
	if len(ids) == 1 {
		out[0] = FormatID(ids[0])
		return out
	}
	var all strings.Builder
	all.Grow(16 * len(ids))
	var b [16]byte
	for _, id := range ids {
		all.Write(logconv.AppendID(b[:0], id))
	}
	s := all.String()
	for i := range out {
		out[i] = s[16*i : 16*i+16]
	}
	return out
}

// projectDelivery is a delivery as the API shows it.
func projectDelivery(d *state.Delivery) *raftqv1.Delivery {
	out := &raftqv1.Delivery{
		Id:               FormatID(d.ID),
		Queue:            d.Queue,
		Payload:          d.Payload,
		Headers:          d.Headers,
		Priority:         d.Priority,
		FairnessKey:      d.FairnessKey,
		Weight:           d.Weight,
		ThrottleKeys:     d.ThrottleKeys,
		Attempt:          d.Attempt,
		EnqueuedAtMs:     d.EnqueuedMs,
		OriginQueue:      d.OriginQueue,
		DeadLetterReason: d.DeadLetterReason,
		LastError:        d.LastError,
	}
	if len(d.History) > 0 {
		out.History = make([]*raftqv1.Attempt, len(d.History))
		for i, a := range d.History {
			out.History[i] = &raftqv1.Attempt{Attempt: a.Attempt, Consumer: a.Consumer, LeasedAtMs: a.LeasedAtMs, EndedAtMs: a.EndedAtMs, Outcome: a.Outcome, Reason: a.Reason}
		}
	}
	if d.LeaseToken != 0 {
		out.LeaseToken = FormatID(d.LeaseToken)
		out.LeaseDeadlineMs = d.LeaseDeadlineMs
	}
	return out
}

// projectMessage is GetMessage's answer.
func projectMessage(mi *fsm.MessageInfo) *raftqv1.GetMessageResponse {
	out := &raftqv1.GetMessageResponse{Message: projectDelivery(mi.Delivery), State: mi.State, Events: make([]*raftqv1.MessageEvent, len(mi.Events))}
	for i, e := range mi.Events {
		out.Events[i] = &raftqv1.MessageEvent{AtMs: e.AtMs, Kind: e.Kind, Detail: e.Detail}
	}
	return out
}

func projectDeliveries(ds []*state.Delivery) []*raftqv1.Delivery {
	if ds == nil {
		return nil
	}
	out := make([]*raftqv1.Delivery, len(ds))
	for i, d := range ds {
		out[i] = projectDelivery(d)
	}
	return out
}

// projectQueue is a queue's config and counters as the API shows them
// (consumers are added by the caller from the scheduler).
func projectQueue(q *state.QueueInfo) *raftqv1.QueueInfo {
	if q == nil {
		return nil
	}
	st := q.Stats
	return &raftqv1.QueueInfo{
		Name:              q.Name,
		Config:            logconv.APIQueueConfig(q.Config),
		IsDeadLetterQueue: q.IsDeadLetterQueue,
		Stats: &raftqv1.QueueStats{
			Ready:         st.Ready,
			Delayed:       st.Delayed,
			InFlight:      st.InFlight,
			DeadLettered:  st.DeadLettered,
			EnqueuedTotal: st.EnqueuedTotal,
			AckedTotal:    st.AckedTotal,
			NackedTotal:   st.NackedTotal,
			ExpiredTotal:  st.ExpiredTotal,
			Bytes:         st.Bytes,
			RecentSettled: st.RecentSettled,
			DedupEntries:  st.DedupEntries,
			DedupBytes:    st.DedupBytes,
		},
		Redrives:      projectRedrives(q.Redrives),
		Paused:        q.Paused,
		PausedUntilMs: q.PausedUntilMs,
		PausedKeys:    projectPausedKeys(q.PausedKeys),
	}
}

// projectRedrives is a queue's rate-limited redrives in progress as the
// API shows them.
func projectRedrives(js []state.RedriveJobInfo) []*raftqv1.RedriveJob {
	var out []*raftqv1.RedriveJob
	for _, j := range js {
		out = append(out, &raftqv1.RedriveJob{
			Id: FormatID(j.ID), Total: j.Total, Moved: j.Moved, RatePerSec: float64(j.RateMilli) / 1000,
			StartedAtMs: j.StartedMs, LastMovedAtMs: j.LastMovedMs,
			FairnessKey: j.FairnessKey, ReasonContains: j.ReasonMatch, OlderThanMs: j.OlderThanMs, MessageIds: j.MessageIDs,
		})
	}
	return out
}

func projectPausedKeys(ks []state.PausedKey) []*raftqv1.PausedKey {
	if len(ks) == 0 {
		return nil
	}
	out := make([]*raftqv1.PausedKey, len(ks))
	for i, k := range ks {
		out[i] = &raftqv1.PausedKey{Key: k.Key, UntilMs: k.UntilMs}
	}
	return out
}

// projectBrokerQueue adds what the leader's scheduler knows (consumers,
// and key stats when asked for) to the replicated view of a queue.
func projectBrokerQueue(q *broker.Queue) *raftqv1.QueueInfo {
	out := projectQueue(q.QueueInfo)
	out.Stats.Consumers = int64(q.Consumers)
	out.FairnessKeys, out.ThrottleKeys = q.FairnessKeys, q.ThrottleKeys
	if e := q.Drain; e != nil {
		out.Drain = &raftqv1.DrainEstimate{
			State:             string(e.State),
			DepthChangePerSec: e.DepthChangePerSec,
			DeliveriesPerSec:  e.DeliveriesPerSec,
			EmptiesInSec:      e.EmptiesIn.Seconds(),
		}
	}
	return out
}

// projectConsumer is a registered consumer as ListConsumers reports it.
func projectConsumer(c scheduler.ConsumerInfo) *raftqv1.ConsumerInfo {
	return &raftqv1.ConsumerInfo{
		Id: c.ID, Name: c.Name, Address: c.Address, Identity: c.Identity,
		ConnectedSinceMs: c.Connected.UnixMilli(),
		MaxInFlight:      int32(min(c.MaxInFlight, math.MaxInt32)), //nolint:gosec // bounded
		InFlight:         int64(c.InFlight),
		Delivered:        int64(c.Delivered),
		Acked:            int64(c.Acked),
		Credit:           int64(c.Credit),
	}
}
