// Package scheduler is raftq's leader-only delivery engine: the consumer
// registry, priority, fairness (deficit round-robin across fairness keys),
// throttles (token buckets), flow control (per-consumer credit) and the
// lease-expiry sweeper.
//
// It never changes replicated state itself: it reads the state machine
// (fsm.Reader.Read) and changes it only by proposing commands (LeaseGrant,
// LeaseRollback, LeaseExpire, ReleaseConsumer, Tick) through a Proposer;
// from log version 10 it fills the data group's Ack entries with the
// grants of the credit they free (CarryAck), which the group proposes.
// One loop goroutine runs while the node leads (RunLeader); it wakes on
// applied changes (QueuesChanged), consumer churn, grant completions and a
// single timer for the next delayed message, throttle token or lease
// deadline. Which messages go to which consumers is decided by one pure
// function of the state, the cursors and the buckets (pickQueue); the
// consumer registry and the grant pipeline are types of their own. See
// DESIGN.md in this directory for the files and the choices made.
package scheduler
