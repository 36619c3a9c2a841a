package state

// Result is what Apply returns for a command entry, typed per command:
//
//	CreateQueue, UpdateQueue               *QueueResult
//	Enqueue                                *EnqueueResult
//	LeaseGrant                             *GrantResult
//	LeaseRollback, Ack, Nack, LeaseExpire  *ItemsResult
//	Ack carrying grants (log version 10)   *AckGrantResult
//	Extend                                 *ExtendResult
//	PurgeQueue, Redrive, ReleaseConsumer   *CountResult
//	Checkpoint                             *CheckpointResult
//	DeleteQueue, Tick, SetClusterVersion   *Done
//	RecountQueues                          *RecountResult
//
// An entry that fails before it reaches its command (undecodable, unknown
// command, FSM halted) is a *Done carrying the error. fsm.As gets the
// typed result out of a proposer's answer.
type Result interface {
	// Failure is the whole-command error; nothing changed when it is set.
	Failure() error
}

// Done is the result of a command with nothing to report but success or
// failure; every other result embeds it.
type Done struct {
	Err error
}

// Failure implements Result.
func (d *Done) Failure() error { return d.Err }

func failed(err error) *Done { return &Done{Err: err} }

// QueueResult: the queue after CreateQueue or UpdateQueue.
type QueueResult struct {
	Done
	Queue *QueueInfo
}

// EnqueueResult has one entry per batch of the command, each all-or-nothing.
type EnqueueResult struct {
	Done
	Batches []BatchResult
}

// BatchResult: the ids assigned to one batch's messages (a duplicate gets
// the original's id), or why the whole batch was refused.
type BatchResult struct {
	IDs []uint64
	Err error
}

// ItemsResult has one error per item (nil, ErrMessageNotFound,
// ErrStaleLease, ErrQueueNotFound, or ErrInvalid for a bad value).
type ItemsResult struct {
	Done
	Items []error
}

// GrantResult has per grant an error and the delivery (nil where it failed).
type GrantResult struct {
	Done
	Items      []error
	Deliveries []*Delivery
}

// AckGrantResult is the result of an Ack that carried grants (log
// version 10): the acks' per-ref errors and the grants' results, each as
// its own command would have reported it.
type AckGrantResult struct {
	Done
	Acked   *ItemsResult
	Granted *GrantResult
}

// ExtendResult has per item an error and the new deadline.
type ExtendResult struct {
	Done
	Items     []error
	Deadlines []int64
}

// CountResult: how many messages were purged, redriven or released.
type CountResult struct {
	Done
	Count int64
	// Job is the rate-limited redrive a Redrive started (or, retried,
	// had started), 0 for none (redrive.go).
	Job uint64
}

// CheckpointResult: the log index whose state every replica froze, and
// that frozen state, so the proposer can stream exactly what every replica
// hashes at Index (a backup) without a second freeze at another index.
type CheckpointResult struct {
	Done
	Index  uint64
	Term   uint64 // the Raft term of the entry
	Frozen *Frozen
}

// RecountResult lists what RecountQueues changed on this replica: the
// queues whose counters had drifted, and the node's byte total if it had.
type RecountResult struct {
	Done
	Repairs                           []Repair
	TotalBytesRepaired                bool
	TotalBytesBefore, TotalBytesAfter int64
}
