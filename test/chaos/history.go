package chaos

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// History is everything one chaos run observed, in the form the checker
// reads. Local times come from the test process's clock; lease deadlines
// (DeadlineMs) from the leader's. All processes run on one machine, so the
// two clocks are the same clock.
type History struct {
	Seed  int64 `json:"seed"`
	Nodes int   `json:"nodes"`
	// Queues are the work queues of the run with their limits.
	Queues []QueueSpec `json:"queues"`
	// WorkloadStart/End bound the time producers ran (for unavailability).
	WorkloadStart time.Time `json:"workload_start"`
	WorkloadEnd   time.Time `json:"workload_end"`

	Enqueues   []EnqueueOp  `json:"enqueues"`
	Deliveries []Delivery   `json:"deliveries"`
	Settles    []Settle     `json:"settles"`
	Drops      []StreamDrop `json:"drops"`
	Ends       []StreamEnd  `json:"stream_ends,omitempty"`
	Faults     []FaultEvent `json:"faults"`
	Crashes    []NodeCrash  `json:"crashes,omitempty"`
	// Registers are the calls on each queue's config register (register.go).
	Registers []RegisterOp `json:"registers,omitempty"`
	// Clocks are the changes of a node's broker clock offset (clock-jump);
	// a node not named runs on the true clock.
	Clocks []ClockChange `json:"clocks,omitempty"`
	// Reads are the writes and reads of the pause-read register.
	Reads []PauseReadOp `json:"reads,omitempty"`
	// Rejoins are the nodes removed and started again (membership).
	Rejoins []Rejoin `json:"rejoins,omitempty"`
	// Pauses are the pauses of one fairness key of a keyed queue.
	Pauses []PauseOp `json:"pauses,omitempty"`
	// Lookups are GetMessage calls made after a change of leader, of
	// messages the old leader had leased (their story must list the lease).
	Lookups []LeaseLookup `json:"lookups,omitempty"`

	Drain    DrainResult  `json:"drain"`
	Recovery Recovery     `json:"recovery"`
	Verify   VerifyResult `json:"verify"`
	// Repairs the nodes made (read from every node's log and metrics at
	// the end of the run); the chaos binary injects no fault that calls
	// for one.
	Repairs []Repair `json:"repairs,omitempty"`
}

// QueueSpec describes a queue the workload uses and its dead-letter queue.
type QueueSpec struct {
	Name          string `json:"name"`
	DeadLetter    string `json:"dead_letter"`
	MaxDeliveries int32  `json:"max_deliveries"`
	// Keys, when set, are the concurrency keys the producers give this
	// queue's messages (each message's fairness key is its concurrency
	// key; "" is a message without a key). ConcurrencyLimit is the
	// queue's default cap per key and ConcurrencyLimits the per-key caps
	// (0: uncapped); the checker holds every key to its cap and keys
	// capped at 1 to enqueue order (checker_flow.go).
	Keys              []string         `json:"keys,omitempty"`
	ConcurrencyLimit  int32            `json:"concurrency_limit,omitempty"`
	ConcurrencyLimits map[string]int32 `json:"concurrency_limits,omitempty"`
}

// capOf is the cap of key in q (0: uncapped); a message without a key is
// never capped.
func (q QueueSpec) capOf(key string) int32 {
	if key == "" {
		return 0
	}
	if c, ok := q.ConcurrencyLimits[key]; ok {
		return c
	}
	return q.ConcurrencyLimit
}

// Outcome of a call as the caller knows it.
type Outcome string

const (
	// OK: the broker answered success.
	OK Outcome = "ok"
	// Failed: the broker answered that it did not do it.
	Failed Outcome = "failed"
	// Unknown: no answer (timeout, connection lost, leadership lost): it
	// may or may not have happened.
	Unknown Outcome = "unknown"
)

// EnqueueOp is one Enqueue call (one all-or-nothing batch).
type EnqueueOp struct {
	Producer string    `json:"producer"`
	Queue    string    `json:"queue"`
	Payloads []string  `json:"payloads"`
	DedupIDs []string  `json:"dedup_ids"`
	Retry    bool      `json:"retry,omitempty"` // a user-level retry of an unknown outcome, same dedup ids
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Outcome  Outcome   `json:"outcome"`
	IDs      []string  `json:"ids,omitempty"`
	Err      string    `json:"err,omitempty"`
	// Keys are the payloads' concurrency (and fairness) keys, in a keyed
	// queue.
	Keys []string `json:"keys,omitempty"`
}

// PauseOp is one PauseQueue call of one fairness key, with a duration.
type PauseOp struct {
	Queue      string    `json:"queue"`
	Key        string    `json:"key"`
	DurationMs int64     `json:"duration_ms"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Outcome    Outcome   `json:"outcome"`
	Code       string    `json:"code,omitempty"`
	// UntilMs is the key's pause end the answer gave (the answering
	// leader's clock).
	UntilMs int64 `json:"until_ms,omitempty"`
	// Node answered the call (whose clock UntilMs is on), when known.
	Node string `json:"node,omitempty"`
}

// LeaseLookup is a GetMessage of a message whose lease (Token, Attempt,
// Consumer) was granted by OldLeader, asked after NewLeader took over.
type LeaseLookup struct {
	Queue     string    `json:"queue"`
	MessageID string    `json:"message_id"`
	Token     string    `json:"token"`
	Attempt   int32     `json:"attempt"`
	Consumer  string    `json:"consumer"`
	OldLeader string    `json:"old_leader"`
	NewLeader string    `json:"new_leader"`
	At        time.Time `json:"at"`
	Outcome   Outcome   `json:"outcome"`
	Code      string    `json:"code,omitempty"`
	// AskedQueue is the queue the answer came from (the message's DLQ
	// when its queue no longer knew it); State is the answer's state.
	AskedQueue string `json:"asked_queue,omitempty"`
	State      string `json:"state,omitempty"`
	// Attempts are the answer's ended attempts, Leased the details of its
	// leased events, Events how many events it listed.
	Attempts []LookupAttempt `json:"attempts,omitempty"`
	Leased   []string        `json:"leased,omitempty"`
	Events   int             `json:"events"`
}

// LookupAttempt is one ended attempt a GetMessage listed.
type LookupAttempt struct {
	Attempt  int32  `json:"attempt"`
	Consumer string `json:"consumer"`
	Outcome  string `json:"outcome"`
}

// Delivery is one message pushed on a Lease stream.
type Delivery struct {
	Consumer     string    `json:"consumer"`
	Stream       int64     `json:"stream"`
	Queue        string    `json:"queue"`
	MessageID    string    `json:"message_id"`
	Payload      string    `json:"payload"`
	Token        string    `json:"token"`
	Attempt      int32     `json:"attempt"`
	DeadlineMs   int64     `json:"deadline_ms"`
	VisibilityMs int64     `json:"visibility_ms"` // what the stream asked for
	Recv         time.Time `json:"recv"`
	// Node served the stream (the leader that granted the lease): its
	// clock is the one DeadlineMs is on. Empty in old histories.
	Node string `json:"node,omitempty"`
}

// grantMs is when the lease was granted, by the leader's clock (at the
// latest: when it was received, if the stream's timeout is not known).
func (d Delivery) grantMs() int64 {
	if d.VisibilityMs <= 0 {
		return d.Recv.UnixMilli()
	}
	return d.DeadlineMs - d.VisibilityMs
}

// SettleKind names a call on a lease.
type SettleKind string

// Calls on a lease.
const (
	Ack    SettleKind = "ack"
	Nack   SettleKind = "nack"
	Extend SettleKind = "extend"
)

// Settle is one attempt of an Ack, Nack or ExtendLease of one lease.
type Settle struct {
	Kind       SettleKind `json:"kind"`
	Consumer   string     `json:"consumer"`
	Queue      string     `json:"queue"`
	MessageID  string     `json:"message_id"`
	Token      string     `json:"token"`
	DeadLetter bool       `json:"dead_letter,omitempty"`
	Start      time.Time  `json:"start"`
	End        time.Time  `json:"end"`
	Outcome    Outcome    `json:"outcome"`
	Code       string     `json:"code,omitempty"`
	// NewDeadlineMs is the deadline a successful extension returned.
	NewDeadlineMs int64 `json:"new_deadline_ms,omitempty"`
	// VisibilityMs is the lease time an extension asked for.
	VisibilityMs int64 `json:"visibility_ms,omitempty"`
}

// ClockChange is a node's broker clock running OffsetMs ahead of the true
// clock (negative: behind) from At: the node was started with its wall
// clock offset (the broker reads the wall clock once, at start, and then
// counts monotonic time, so only a start changes it). Runtime is true
// for a jump of the running node's clock, which changes nothing the
// broker hands out and is recorded for the report only.
type ClockChange struct {
	Node     string    `json:"node"`
	At       time.Time `json:"at"`
	OffsetMs int64     `json:"offset_ms"`
	Runtime  bool      `json:"runtime,omitempty"`
}

// PauseReadOp is one write or read of the pause-read register (a queue's
// max_depth, written only by the nemesis, always higher).
type PauseReadOp struct {
	Write bool   `json:"write,omitempty"`
	Node  string `json:"node"`
	// Stale is a read with raftq-read-consistency: stale, which may miss
	// writes (recorded to show the window the fault opened).
	Stale   bool      `json:"stale,omitempty"`
	Value   int64     `json:"value"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Outcome Outcome   `json:"outcome"`
	Code    string    `json:"code,omitempty"`
}

// Rejoin is a node removed from the cluster during a fault and started
// again (on its old data dir unless FreshDir).
type Rejoin struct {
	Node     string `json:"node"`
	During   string `json:"during"`
	FreshDir bool   `json:"fresh_dir,omitempty"`
	Removed  bool   `json:"removed"` // the RemoveNode call answered success
	// OutOfConfig: a remaining node's configuration no longer named it
	// (the removal was appended, committed or not).
	OutOfConfig bool      `json:"out_of_config"`
	RemoveAt    time.Time `json:"remove_at"`
	// Voter: every node, this one included, was a healthy voter within
	// the bound after the fault healed.
	Voter bool   `json:"voter"`
	Err   string `json:"err,omitempty"`
}

// StreamDrop is a consumer closing its Lease stream on purpose without
// settling what it holds (the broker then releases those leases).
type StreamDrop struct {
	Consumer string    `json:"consumer"`
	Stream   int64     `json:"stream"`
	Queue    string    `json:"queue,omitempty"` // empty in old histories: any queue
	At       time.Time `json:"at"`
}

// StreamEnd is a Lease stream that ended with an error the consumer did
// not ask for (the server ended it, or the connection broke). Grants the
// broker pushed just before may never have reached the consumer.
type StreamEnd struct {
	Consumer string    `json:"consumer"`
	Stream   int64     `json:"stream"`
	Queue    string    `json:"queue"`
	At       time.Time `json:"at"`
	Code     string    `json:"code"`
}

// FaultEvent is one nemesis action, from injection to heal.
type FaultEvent struct {
	Kind    FaultKind `json:"kind"`
	Targets []string  `json:"targets,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Err     string    `json:"err,omitempty"`
}

// NodeCrash is a node process that exited without being told to.
type NodeCrash struct {
	Node   string    `json:"node"`
	At     time.Time `json:"at"`
	Status string    `json:"status"`
	Log    string    `json:"log_tail,omitempty"`
}

// DrainResult is the final drain of every queue after the faults stopped.
type DrainResult struct {
	Complete bool `json:"complete"`
	// Leftover describes what was still in the queues when the drain gave
	// up (empty when complete).
	Leftover string `json:"leftover,omitempty"`
	// DataRaces counts race detector reports found in node logs.
	DataRaces []string `json:"data_races,omitempty"`
}

// Recovery is the cluster coming back after the last fault was healed.
type Recovery struct {
	HealedAt time.Time `json:"healed_at"`
	LeaderAt time.Time `json:"leader_at"`
	Leader   string    `json:"leader"`
	OK       bool      `json:"ok"`
	Err      string    `json:"err,omitempty"`
}

// VerifyResult is the last answer of Cluster.Verify after the drain.
type VerifyResult struct {
	Consistent bool         `json:"consistent"`
	Nodes      []NodeDigest `json:"nodes"`
	Err        string       `json:"err,omitempty"`
}

// NodeDigest is one replica's state digest.
type NodeDigest struct {
	ID           string `json:"id"`
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
	CountersOK   bool   `json:"counters_ok"`
	Err          string `json:"err,omitempty"`
}

// Recorder collects a History from many goroutines.
type Recorder struct {
	mu sync.Mutex
	h  History
}

// NewRecorder starts a history for a run.
func NewRecorder(seed int64, nodes int, queues []QueueSpec) *Recorder {
	return &Recorder{h: History{Seed: seed, Nodes: nodes, Queues: queues}}
}

func (r *Recorder) with(f func(h *History)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.h)
}

// Enqueue records an Enqueue call.
func (r *Recorder) Enqueue(op EnqueueOp) {
	r.with(func(h *History) { h.Enqueues = append(h.Enqueues, op) })
}

// Delivery records a delivery.
func (r *Recorder) Delivery(d Delivery) {
	r.with(func(h *History) { h.Deliveries = append(h.Deliveries, d) })
}

// Settle records an ack, nack or extension attempt.
func (r *Recorder) Settle(s Settle) { r.with(func(h *History) { h.Settles = append(h.Settles, s) }) }

// Drop records a stream closed on purpose.
func (r *Recorder) Drop(d StreamDrop) { r.with(func(h *History) { h.Drops = append(h.Drops, d) }) }

// End records a stream that ended without the consumer asking.
func (r *Recorder) End(e StreamEnd) { r.with(func(h *History) { h.Ends = append(h.Ends, e) }) }

// Register records a call on a queue's config register.
func (r *Recorder) Register(op RegisterOp) {
	r.with(func(h *History) { h.Registers = append(h.Registers, op) })
}

// Fault records a nemesis action.
func (r *Recorder) Fault(f FaultEvent) { r.with(func(h *History) { h.Faults = append(h.Faults, f) }) }

// Crash records a node that died on its own.
func (r *Recorder) Crash(c NodeCrash) { r.with(func(h *History) { h.Crashes = append(h.Crashes, c) }) }

// Clock records a change of a node's clock offset.
func (r *Recorder) Clock(c ClockChange) { r.with(func(h *History) { h.Clocks = append(h.Clocks, c) }) }

// Read records a write or read of the pause-read register.
func (r *Recorder) Read(o PauseReadOp) { r.with(func(h *History) { h.Reads = append(h.Reads, o) }) }

// Rejoin records a membership step's removed node.
func (r *Recorder) Rejoin(j Rejoin) { r.with(func(h *History) { h.Rejoins = append(h.Rejoins, j) }) }

// Pause records a PauseQueue call.
func (r *Recorder) Pause(p PauseOp) { r.with(func(h *History) { h.Pauses = append(h.Pauses, p) }) }

// Lookup records a GetMessage of a lease after a change of leader.
func (r *Recorder) Lookup(l LeaseLookup) {
	r.with(func(h *History) { h.Lookups = append(h.Lookups, l) })
}

// RecentDeliveries returns up to n deliveries granted by node and
// received at or after since, newest first, one per message.
func (r *Recorder) RecentDeliveries(node string, since time.Time, n int) []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Delivery
	seen := map[string]bool{}
	for i := len(r.h.Deliveries) - 1; i >= 0 && len(out) < n; i-- {
		d := r.h.Deliveries[i]
		if d.Recv.Before(since) {
			break
		}
		if d.Node == node && !seen[d.MessageID] {
			seen[d.MessageID] = true
			out = append(out, d)
		}
	}
	return out
}

// Update changes the history's scalar parts (drain, recovery, ...).
func (r *Recorder) Update(f func(h *History)) { r.with(f) }

// Snapshot returns a copy of the history so far.
func (r *Recorder) Snapshot() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Queues = append([]QueueSpec(nil), r.h.Queues...)
	h.Enqueues = append([]EnqueueOp(nil), r.h.Enqueues...)
	h.Deliveries = append([]Delivery(nil), r.h.Deliveries...)
	h.Settles = append([]Settle(nil), r.h.Settles...)
	h.Drops = append([]StreamDrop(nil), r.h.Drops...)
	h.Ends = append([]StreamEnd(nil), r.h.Ends...)
	h.Faults = append([]FaultEvent(nil), r.h.Faults...)
	h.Crashes = append([]NodeCrash(nil), r.h.Crashes...)
	h.Registers = append([]RegisterOp(nil), r.h.Registers...)
	h.Clocks = append([]ClockChange(nil), r.h.Clocks...)
	h.Reads = append([]PauseReadOp(nil), r.h.Reads...)
	h.Rejoins = append([]Rejoin(nil), r.h.Rejoins...)
	h.Pauses = append([]PauseOp(nil), r.h.Pauses...)
	h.Lookups = append([]LeaseLookup(nil), r.h.Lookups...)
	return h
}

// WriteJSON writes v, indented, to path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadHistory loads a history written by WriteJSON (to re-check it).
func ReadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
