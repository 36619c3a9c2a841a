package state

// MaxLogVersion is the newest log version this build applies. Version 1 is
// the format before versioning (entries carry no version); version 2 adds
// only SetClusterVersion; version 3 makes the order and weights of
// fairness keys replicated state (keyorder.go); version 4 measures time by
// the time elapsed within each leader's term (clock.go); version 5 adds
// identities, tokens and grants (auth.go) and random lease tokens; version 6
// adds DeleteQueue.if_empty (IfEmptyVersion); version 7 answers a retried
// ack, nack, purge or redrive as the first (recent.go).
// Version 8 adds RecountQueues (recount.go); version 9 enforces admission
// at apply and adds SetClusterSettings (admit.go); version 10 lets an Ack
// carry lease grants (AckGrantVersion); version 11 answers a retried
// DeleteQueue as the first (DeleteKeyVersion); version 12 guards
// dead-letter queues and the number of queues, and keeps a nack's delay
// and a redriven message's TTL (GuardVersion); version 13 bounds the
// time-driven sweep per entry (SweepBudgetVersion, sweep.go); version 14
// adds Peek/Redrive filters, dry runs, ids and rate-limited redrive jobs,
// and records when messages are dead-lettered (RedriveVersion,
// redrive.go); version 15 answers a retried CreateQueue, UpdateQueue,
// CreateToken, RevokeToken, grant, ungrant or SetClusterSettings as the
// first (WriteKeyVersion, writekeys.go); version 16 lets a Redrive
// cancel a redrive job (RedriveCancelVersion, redrive.go); version 17
// adds pausing a queue or a fairness key (PauseVersion, pause.go);
// version 18 records each message's attempts and life events
// (HistoryVersion, history.go); version 19 caps messages in flight per
// concurrency key (ConcurrencyVersion, concurrency.go); version 20 lets a queue carry a
// retry policy whose delays the leader writes into Nack and LeaseExpire
// entries (RetryVersion, retry.go); version 21 hands the cluster-wide
// state over to the meta group (HandoverVersion, handover.go). fsm/DESIGN.md lists every
// version; a rule that changes in version N is
// written `if tx.version >= N`.
const MaxLogVersion uint32 = 21

// keyOrderVersion is the cluster version from which fairness keys'
// activation order and weights are kept in snapshots and digests; the
// entry that raises the cluster to it makes them canonical on every
// replica (canonicalKeyOrder).
const keyOrderVersion uint32 = 3

// elapsedTimeVersion is the log version from which an entry moves the
// state's clock by the time its leader measured since its previous entry,
// never to the leader's clock reading itself (clock.go).
const elapsedTimeVersion uint32 = 4

// IfEmptyVersion is the log version from which DeleteQueue.if_empty is
// honoured: the queue must hold no messages when the entry applies, so no
// enqueue committed between a check and the delete can be lost.
const IfEmptyVersion uint32 = 6

// RecountVersion is the log version that introduces RecountQueues: the
// leader's counter audit proposes repairs only once the cluster version
// has reached it.
const RecountVersion uint32 = 8

// AckGrantVersion is the log version from which an Ack may carry grants
// (Ack.grants), applied after its refs in the same entry: the scheduler
// hands the credit an ack frees to the consumer's next messages in the
// ack's own entry, so a delivery cycle costs one entry, not two. Earlier
// entries ignore the field, as older builds do.
const AckGrantVersion uint32 = 10

// DeleteKeyVersion is the log version from which DeleteQueue.idempotency_key
// is honoured: a repeat of a delete that succeeded answers OK and deletes
// nothing, even a queue created again since (deletekeys.go). The proposer
// refuses a key before the cluster reaches it.
const DeleteKeyVersion uint32 = 11

// GuardVersion is the log version from which (fsm/DESIGN.md, version 12):
// an existing ordinary queue that holds messages, has some in its own
// dead-letter queue, or is named only by default is not turned into a
// dead-letter queue (ErrInUse); CreateQueue is refused past the cluster
// setting max_queues (ErrLimit), which the entry raising the cluster to
// it starts at DefaultMaxQueues; Nack{uncounted, delay_ms} keeps its
// delay; and a redriven message gets its queue's message_ttl_ms afresh.
const GuardVersion uint32 = 12
