package transport

import (
	"math"
	"strconv"

	"github.com/raftq/raftq/fsm"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// The DLQ workbench's edge (log version fsm.RedriveVersion): Peek and
// Redrive filters, dry_run, message ids and rates are checked here, with
// a clear INVALID_ARGUMENT before anything is proposed; the state machine
// checks them again as the entry applies.

// checkDLQFilters validates the filters Peek and Redrive share.
func checkDLQFilters(reason string, olderThanMs int64) error {
	switch {
	case len(reason) > fsm.MaxReasonFilterLen:
		return invalid("reason_contains is %d bytes, at most %d", len(reason), fsm.MaxReasonFilterLen)
	case olderThanMs < 0 || olderThanMs > fsm.MaxDurationMs:
		return invalid("older_than_ms is %d, it must be in [0, %d] (0 to %s)", olderThanMs, int64(fsm.MaxDurationMs), fsm.HumanMs(fsm.MaxDurationMs))
	}
	return nil
}

// peekFilter is a Peek's filter; filtered says whether it asks for one
// (any filter or after_id: then messages come in id order).
func peekFilter(req *raftqv1.PeekRequest) (pf fsm.PeekFilter, filtered bool, err error) {
	if err := checkDLQFilters(req.ReasonContains, req.OlderThanMs); err != nil {
		return pf, false, err
	}
	if req.OlderThanMs > 0 && !req.DeadLetter {
		return pf, false, invalid("older_than_ms counts from when a message was dead-lettered: it needs dead_letter")
	}
	pf = fsm.PeekFilter{FairnessKey: req.FairnessKey, ReasonContains: req.ReasonContains, OlderThanMs: req.OlderThanMs}
	if req.AfterId != "" {
		id, err := parseHex("after_id", req.AfterId)
		if err != nil {
			return pf, false, invalid("%v", err)
		}
		pf.AfterID = id
	}
	return pf, pf != (fsm.PeekFilter{}) || req.AfterId != "", nil
}

// redriveCommand is a RedriveRequest as the log carries it: the rate in
// messages per 1000 s (no floating point reaches apply), ids as numbers.
func redriveCommand(req *raftqv1.RedriveRequest) (*fsmv1.Redrive, error) {
	if err := checkDLQFilters(req.ReasonContains, req.OlderThanMs); err != nil {
		return nil, err
	}
	maxRate := float64(fsm.MaxRedriveRateMilli) / 1000
	switch r := req.RatePerSec; {
	case math.IsNaN(r) || r < 0 || r > maxRate:
		return nil, invalid("rate_per_sec is %v, it must be in [0, %v] (0: all at once)", r, maxRate)
	case r > 0 && r < 0.001:
		return nil, invalid("rate_per_sec is %v, the smallest rate is 0.001 (one message every 1000 s)", r)
	}
	if req.CancelJob != "" {
		id, err := parseHex("cancel_job", req.CancelJob)
		if err != nil {
			return nil, invalid("%v", err)
		}
		if req.Limit != 0 || req.FairnessKey != "" || req.ReasonContains != "" || req.OlderThanMs != 0 || req.DryRun || req.RatePerSec != 0 || len(req.MessageIds) > 0 {
			return nil, invalid("cancel_job cancels a job: give no other field but queue (and idempotency_key)")
		}
		return &fsmv1.Redrive{Queue: req.Queue, CancelJob: id, IdempotencyKey: req.IdempotencyKey}, nil
	}
	if len(req.MessageIds) > fsm.MaxRedriveIDs {
		return nil, invalid("%d message_ids, at most %d in one redrive", len(req.MessageIds), fsm.MaxRedriveIDs)
	}
	out := &fsmv1.Redrive{
		Queue: req.Queue, Limit: req.Limit, IdempotencyKey: req.IdempotencyKey,
		FairnessKey: req.FairnessKey, ReasonContains: req.ReasonContains, OlderThanMs: req.OlderThanMs,
		DryRun: req.DryRun, RateMilli: int64(math.Round(req.RatePerSec * 1000)),
	}
	for i, s := range req.MessageIds {
		id, err := parseHex("message_ids["+strconv.Itoa(i)+"]", s)
		if err != nil {
			return nil, invalid("%v", err)
		}
		out.MessageIds = append(out.MessageIds, id)
	}
	return out, nil
}
