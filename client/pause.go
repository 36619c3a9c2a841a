package client

import (
	"context"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// PauseQueue stops new deliveries of a queue (key "") or of one fairness
// key of it, for d (0: until ResumeQueue), and returns the queue as it then
// stands. Enqueues are accepted and leases already out run to completion;
// other keys keep flowing. A new pause replaces the old one's end, so a
// retry after a lost answer only moves the end by the retry's delay. A key
// the queue has not seen may be paused. A cluster below the log version
// that applies pauses refuses it (FAILED_PRECONDITION naming the version).
func (c *Client) PauseQueue(ctx context.Context, name, key string, d time.Duration) (*raftqv1.QueueInfo, error) {
	resp := &raftqv1.PauseQueueResponse{}
	err := c.broker(ctx, raftqv1.Broker_PauseQueue_FullMethodName, &raftqv1.PauseQueueRequest{Name: name, FairnessKey: key, DurationMs: d.Milliseconds()}, resp)
	return resp.GetQueue(), err
}

// ResumeQueue ends the pause of a queue (key "": the whole-queue pause;
// keys paused on their own stay paused) or of one fairness key. Resuming
// what is not paused is OK.
func (c *Client) ResumeQueue(ctx context.Context, name, key string) (*raftqv1.QueueInfo, error) {
	resp := &raftqv1.ResumeQueueResponse{}
	err := c.broker(ctx, raftqv1.Broker_ResumeQueue_FullMethodName, &raftqv1.ResumeQueueRequest{Name: name, FairnessKey: key}, resp)
	return resp.GetQueue(), err
}
