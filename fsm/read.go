package fsm

import (
	"github.com/raftq/raftq/fsm/state"
	fsmv1 "github.com/raftq/raftq/proto/raftq/fsm/v1"
	"io"
)

// Read-side names callers use; the store defines them.
type (
	View         = state.View
	QueueView    = state.QueueView
	KeyInfo      = state.KeyInfo
	ReadyMessage = state.ReadyMessage
)

// Reader is the state machine's read side: every query of the replicated
// state, each under the read lock (Auth under none), for the edge, the
// scheduler, metrics and the data group's own checks before proposing.
// It changes nothing. A part of FSM (FSM.Reader) apart from the raft
// hooks and Apply, so that each type has one job; it is a value holding
// the FSM, cheap to copy and to keep.
type Reader struct{ f *FSM }

// Reader returns the read side of the state machine.
func (f *FSM) Reader() Reader { return Reader{f: f} }

// Read runs fn under the read lock with a view of the state. fn must not
// block or call back into the FSM's locking methods.
func (r Reader) Read(fn func(v View)) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	fn(r.f.store.View())
}

// GetQueue reports a queue's effective config and stats (consumers are the
// scheduler's to fill in).
func (r Reader) GetQueue(name string) (*state.QueueInfo, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().GetQueue(name)
}

// ListQueues lists queues whose name starts with prefix, sorted by name.
func (r Reader) ListQueues(prefix string) []*state.QueueInfo {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().ListQueues(prefix)
}

// HasQueue reports ErrQueueNotFound for an unknown queue; a cheap check
// for hot paths that need no config.
func (r Reader) HasQueue(name string) error {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().HasQueue(name)
}

// CheckEmpty reports ErrNotEmpty for a queue that holds messages or has
// messages in its dead-letter queue: the leader's check of a conditional
// delete on a cluster below IfEmptyVersion.
func (r Reader) CheckEmpty(name string) error {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().CheckEmpty(name)
}

// QueueConfig returns a queue's effective config (a copy).
func (r Reader) QueueConfig(name string) (*fsmv1.QueueConfig, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().QueueConfig(name)
}

// CheckEnqueue is the leader's check before proposing an enqueue: every
// message against the queue's limits, then admission by max_depth,
// max_bytes and the node-wide maxTotalBytes (0 = unlimited).
func (r Reader) CheckEnqueue(name string, msgs []*fsmv1.EnqueueMessage, maxTotalBytes int64) error {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().CheckEnqueue(name, msgs, maxTotalBytes)
}

// TotalBytes is what the messages held across all queues cost
// (state.MessageCost).
func (r Reader) TotalBytes() int64 {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().TotalBytes()
}

// Held is what the state counts against max_queued_bytes (messages,
// dedup entries, recent outcomes), and Settings the replicated cluster
// settings.
func (r Reader) Held() (int64, state.Settings) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	v := r.f.store.View()
	return v.Held(), v.Settings()
}

// Peek lists up to limit ready messages in the order a fresh scheduler
// would deliver them (see state.View.Peek); with deadLetter it browses the
// queue's DLQ.
func (r Reader) Peek(name string, limit int, deadLetter bool) ([]*state.Delivery, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().Peek(name, limit, deadLetter)
}

// AppliedIndex is the index of the last applied entry.
func (r Reader) AppliedIndex() uint64 {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.AppliedIndex()
}

// Auth is the replicated identities, tokens and grants as of the last
// applied batch. The value is immutable; reading it takes no lock.
func (r Reader) Auth() *state.Auth { return r.f.auth.Load() }

// ClusterVersion is the replicated cluster version: the newest log version
// every voter supported when it was last raised (1 until the first
// SetClusterVersion). The leader proposes entries under this version, and
// proposes SetClusterVersion once every voter advertises a newer one.
func (r Reader) ClusterVersion() uint32 {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.ClusterVersion()
}

// Now is the FSM's clock (fsm/state/clock.go): up to log version 3 the
// largest now_ms of any applied entry, from version 4 elapsed time.
func (r Reader) Now() int64 {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.Now()
}

// Auth names callers use; the store defines them.
type (
	Auth         = state.Auth
	Perm         = state.Perm
	Token        = state.Token
	PatternGrant = state.PatternGrant
	IdentityInfo = state.IdentityInfo
	MetaServer   = state.MetaServer
	Handover     = state.Handover
)

// The queue permissions (state.Perm).
const (
	PermProduce = state.PermProduce
	PermConsume = state.PermConsume
	PermBrowse  = state.PermBrowse
	PermManage  = state.PermManage
	AllPerms    = state.AllPerms
	// AuthVersion is the log version from which auth commands and random
	// lease tokens exist; the leader proposes them only from it on.
	AuthVersion = state.AuthVersion
	// IfEmptyVersion is the log version from which DeleteQueue.if_empty
	// is checked at apply; the leader sets it only from then on.
	IfEmptyVersion = state.IfEmptyVersion
	// AdmitVersion is the log version from which admission is an apply
	// rule and max_queued_bytes a replicated setting.
	AdmitVersion = state.AdmitVersion
	// AckGrantVersion is the log version from which an Ack may carry
	// lease grants (applied after its acks, in the same entry); the
	// scheduler proposes such acks only from it on.
	AckGrantVersion = state.AckGrantVersion
	// DeleteKeyVersion is the log version from which
	// DeleteQueue.idempotency_key is honoured.
	DeleteKeyVersion = state.DeleteKeyVersion
	// WriteKeyVersion is the log version from which the idempotency_key
	// of CreateQueue, UpdateQueue, CreateToken, RevokeToken, Grant,
	// Ungrant and SetClusterSettings is honoured (state/writekeys.go).
	WriteKeyVersion = state.WriteKeyVersion
	// GuardVersion is the log version from which an ordinary queue in
	// use is never turned into a dead-letter queue, max_queues bounds the
	// queues, an uncounted nack keeps its delay and a redriven message
	// gets its queue's TTL afresh; the edge refuses requests that need
	// it before then.
	GuardVersion = state.GuardVersion
	// DefaultMaxQueues is max_queues from cluster version GuardVersion
	// until an operator changes it.
	DefaultMaxQueues = state.DefaultMaxQueues
	// SweepBudgetVersion is the log version from which one entry does at
	// most state.SweepBudget of each time-driven sweep.
	SweepBudgetVersion = state.SweepBudgetVersion
	// RedriveVersion is the log version from which Peek and Redrive take
	// filters, Redrive dry_run, message ids and a rate (a job, stepped by
	// RedriveStep), and dead-lettering records its time; the edge refuses
	// those fields before then.
	RedriveVersion = state.RedriveVersion
	// RedriveCancelVersion is the log version from which
	// Redrive.cancel_job cancels a redrive job.
	RedriveCancelVersion = state.RedriveCancelVersion
	// HandoverVersion is the log version from which the cluster-wide
	// state (identities, tokens, grants, settings) lives in the meta
	// group; the entry raising the cluster to it names meta's founders.
	HandoverVersion = state.HandoverVersion
	// Bounds of the filtered Peek and Redrive (state/redrive.go).
	MaxReasonFilterLen  = state.MaxReasonFilterLen
	MaxRedriveIDs       = state.MaxRedriveIDs
	MaxRedriveJobs      = state.MaxRedriveJobs
	MaxRedriveRateMilli = state.MaxRedriveRateMilli
	MaxStepJobs         = state.MaxStepJobs
	// PauseVersion is the log version that introduces PauseQueue and
	// ResumeQueue and refuses grants of a paused queue or key; the edge
	// refuses the RPCs before then.
	PauseVersion = state.PauseVersion
	// MaxPausedKeys bounds the fairness keys paused per queue.
	MaxPausedKeys = state.MaxPausedKeys
	// HistoryVersion is the log version from which messages record their
	// attempts and life events (GetMessage, Delivery.history) and a nack's
	// reason is bounded by MaxNackReasonBytes.
	HistoryVersion     = state.HistoryVersion
	MaxNackReasonBytes = state.MaxNackReasonBytes
	// ConcurrencyVersion is the log version of concurrency keys and
	// their caps (fsm/state/concurrency.go); requests carrying them are
	// refused below it.
	ConcurrencyVersion = state.ConcurrencyVersion
	// RetryVersion is the log version from which a queue may carry a
	// retry policy and Nack / LeaseExpire entries carry the delays the
	// leader computed from it; the edge refuses the policy before it.
	RetryVersion = state.RetryVersion
)

// PeekFilter is a filtered Peek's filter (state.PeekFilter).
type PeekFilter = state.PeekFilter

// PeekFiltered lists up to limit messages matching pf in id order (see
// state.View.PeekFiltered).
func (r Reader) PeekFiltered(name string, limit int, deadLetter bool, pf PeekFilter) ([]*state.Delivery, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().PeekFiltered(name, limit, deadLetter, pf)
}

// MessageInfo is one message's story (GetMessage).
type MessageInfo = state.MessageInfo

// GetMessage tells the story of one message as queue sees it (the queue,
// its dead-letter queue, or its recent acks).
func (r Reader) GetMessage(queue string, id uint64) (*MessageInfo, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().Message(queue, id)
}

// Handover is what the meta group's seed copies from this state, read
// at one applied index (state.View.Handover); ok is false below
// HandoverVersion.
func (r Reader) Handover() (state.Handover, bool) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().Handover()
}

// MetaFounders are the meta group's founding voters (nil below
// HandoverVersion).
func (r Reader) MetaFounders() []state.MetaServer {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	return r.f.store.View().MetaFounders()
}

// RefoundMeta rewrites a snapshot stream's meta founders for an offline
// restore (state.RefoundMeta).
func RefoundMeta(r io.Reader, founders []MetaServer) (io.Reader, error) {
	return state.RefoundMeta(r, founders)
}
