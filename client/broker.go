package client

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// broker runs a Broker RPC with leader following and retries.
func (c *Client) broker(ctx context.Context, method string, req, resp proto.Message) error {
	return c.invoke(ctx, path.Base(method), method, req, resp, c.pool.target)
}

// Enqueue adds msgs to queue as one all-or-nothing batch and returns their
// ids in order. Every message without a DedupId gets a random one, written
// into the message, before the first attempt: a retry after a lost response
// is then recognised by the broker and creates no duplicate, and so does the
// caller passing the same messages again.
func (c *Client) Enqueue(ctx context.Context, queue string, msgs ...*raftqv1.EnqueueMessage) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	for i, m := range msgs {
		if m == nil {
			return nil, status.Errorf(codes.InvalidArgument, "raftq Enqueue: message %d is nil", i)
		}
		if m.DedupId == "" {
			m.DedupId = NewDedupID()
		}
	}
	req := &raftqv1.EnqueueRequest{Queue: queue, Messages: msgs}
	if err := checkSizes(req); err != nil {
		return nil, err
	}
	resp := &raftqv1.EnqueueResponse{}
	if c.unaryEnqueue {
		if err := c.broker(ctx, raftqv1.Broker_Enqueue_FullMethodName, req, resp); err != nil {
			return nil, err
		}
		return resp.GetMessageIds(), nil
	}
	err := c.retrying(ctx, "Enqueue", c.pool.target, func(ctx context.Context, addr string, cc *grpc.ClientConn) error {
		m, err := c.pool.enqueuer(addr, cc)
		if err != nil {
			return err
		}
		return m.enqueue(ctx, req, resp)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetMessageIds(), nil
}

// checkSizes refuses, before anything is sent, what no node would take:
// a node would refuse it too, but a request over its read limit gets
// gRPC's "received message larger than max (N vs. M)", which says neither
// which message nor what to do.
func checkSizes(req *raftqv1.EnqueueRequest) error {
	for i, m := range req.Messages {
		if n := len(m.GetPayload()); n > MaxPayloadBytes {
			return status.Errorf(codes.InvalidArgument,
				"raftq Enqueue: message %d's payload is %s (%d bytes); no queue accepts a payload over %s (a queue takes at most its max_message_bytes, 1 MiB by default)",
				i, mib(n), n, mib0(MaxPayloadBytes))
		}
	}
	// The larger of the two forms the request travels in (unary, or in a
	// stream's envelope).
	if n := proto.Size(&raftqv1.EnqueueStreamRequest{Seq: math.MaxUint64, Request: req}); n > MaxRequestBytes {
		return status.Errorf(codes.InvalidArgument,
			"raftq Enqueue: a batch of %d messages is %s encoded, over the %s a node reads in one request; send fewer messages per call",
			len(req.Messages), mib(n), mib0(MaxRequestBytes))
	}
	return nil
}

func mib(n int) string  { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
func mib0(n int) string { return fmt.Sprintf("%d MiB", n>>20) }

// EnqueuePayloads enqueues one message per payload, with default options.
func (c *Client) EnqueuePayloads(ctx context.Context, queue string, payloads ...[]byte) ([]string, error) {
	msgs := make([]*raftqv1.EnqueueMessage, len(payloads))
	for i, p := range payloads {
		msgs[i] = &raftqv1.EnqueueMessage{Payload: p}
	}
	return c.Enqueue(ctx, queue, msgs...)
}

// NewDedupID returns a random id (128 bits) of the kind Enqueue assigns.
func NewDedupID() string {
	return rand.Text()
}

// keyed sends a write that carries a random idempotency key, chosen before
// the first attempt, so the retries after a lost answer change nothing
// more, whatever others changed in between (docs/api.md, Retries). set
// puts the key in the request. A cluster that does not apply the key yet
// (some voter runs a build before it) refuses it, naming field; the write
// is then sent once more without a key, as before, and a retry of that
// one is not protected.
func (c *Client) keyed(field string, set func(key string), send func() error) error {
	set(NewDedupID())
	err := send()
	if needsVersion(err, field) {
		c.log.Warn("raftq: the cluster does not apply idempotency keys on this write yet; sending it without one (a retry after a lost answer could undo a change made in between)",
			"field", field, "error", err)
		set("")
		err = send()
	}
	return err
}

// CreateQueue creates a queue; a nil cfg takes every default. The call
// carries an idempotency key: a retry after a lost answer answers OK and
// creates nothing, not even the queue if someone deleted it in between.
func (c *Client) CreateQueue(ctx context.Context, name string, cfg *raftqv1.QueueConfig) (*raftqv1.QueueInfo, error) {
	return c.CreateQueueIn(ctx, "", name, cfg)
}

// CreateQueueIn is CreateQueue placing the queue on data group group
// ("" = the cluster chooses: the least loaded group, or the group of
// the existing queue cfg names as its dead-letter queue); QueueInfo.group
// says where it went. A group the cluster does not run is
// codes.NotFound; one that conflicts with the dead-letter queue's is
// codes.FailedPrecondition.
func (c *Client) CreateQueueIn(ctx context.Context, group, name string, cfg *raftqv1.QueueConfig) (*raftqv1.QueueInfo, error) {
	resp := &raftqv1.CreateQueueResponse{}
	req := &raftqv1.CreateQueueRequest{Name: name, Config: cfg, Group: group}
	err := c.keyed("CreateQueue.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.broker(ctx, raftqv1.Broker_CreateQueue_FullMethodName, req, resp)
	})
	return resp.GetQueue(), err
}

// UpdateQueue changes the QueueConfig fields named by maskPaths (field
// names such as "visibility_timeout_ms"). With no paths every field is
// replaced, zero meaning the default. The call carries an idempotency
// key: a retry after a lost answer changes nothing more, so it never sets
// back what another update changed in between.
func (c *Client) UpdateQueue(ctx context.Context, name string, cfg *raftqv1.QueueConfig, maskPaths ...string) (*raftqv1.QueueInfo, error) {
	if cfg == nil {
		cfg = &raftqv1.QueueConfig{}
	}
	// Validating the paths here turns a typo into a clear local error.
	mask, err := fieldmaskpb.New(cfg, maskPaths...)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "raftq UpdateQueue: update mask: %v", err)
	}
	resp := &raftqv1.UpdateQueueResponse{}
	req := &raftqv1.UpdateQueueRequest{Name: name, Config: cfg, UpdateMask: mask}
	err = c.keyed("UpdateQueue.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.broker(ctx, raftqv1.Broker_UpdateQueue_FullMethodName, req, resp)
	})
	return resp.GetQueue(), err
}

// DeleteCondition makes DeleteQueue refuse, with codes.FailedPrecondition,
// a queue that is in use.
type DeleteCondition int

const (
	// IfEmpty refuses a queue that holds messages (ready, delayed or
	// leased) or has messages in its dead-letter queue.
	IfEmpty DeleteCondition = iota + 1
	// IfUnused refuses a queue that has consumers attached.
	IfUnused
)

// DeleteQueue deletes a queue (and its auto-created dead-letter queue when
// no other queue uses it), and everything in it, unless one of conds
// refuses. The call carries a random idempotency key, chosen before the
// first attempt, so a retry after a lost answer answers OK and deletes
// nothing more, not even the queue if someone created it again in between.
// A cluster that does not apply keyed deletes yet (some voter runs a build
// before log version 11) refuses the key; the delete is then sent once
// more without it, as before, and a retry of that one is not protected.
func (c *Client) DeleteQueue(ctx context.Context, name string, conds ...DeleteCondition) error {
	req := &raftqv1.DeleteQueueRequest{Name: name, IdempotencyKey: NewDedupID()}
	for _, cond := range conds {
		switch cond {
		case IfEmpty:
			req.IfEmpty = true
		case IfUnused:
			req.IfUnused = true
		}
	}
	err := c.broker(ctx, raftqv1.Broker_DeleteQueue_FullMethodName, req, &raftqv1.DeleteQueueResponse{})
	if needsVersion(err, "DeleteQueue.idempotency_key") {
		c.log.Warn("raftq: the cluster does not apply keyed deletes yet; deleting without an idempotency key (a retry after a lost answer could delete a queue created in between)",
			"queue", name, "error", err)
		req.IdempotencyKey = ""
		err = c.broker(ctx, raftqv1.Broker_DeleteQueue_FullMethodName, req, &raftqv1.DeleteQueueResponse{})
	}
	return err
}

// readConsistencyKey is the metadata header a read chooses its
// consistency with (docs/api.md, Read consistency).
const readConsistencyKey = "raftq-read-consistency"

// StaleRead returns ctx for reads (GetQueue, ListQueues, Peek,
// ListConsumers) that the node called answers from its own state at
// once, without confirming that it leads: cheaper, but the answer may
// miss recent writes (a follower's replication lag, or everything since a
// deposed leader lost leadership). Without it those reads are
// linearizable. ListConsumers still goes to the leader (only it has
// consumers). Writes made with ctx are not affected.
func StaleRead(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(readConsistencyKey, "stale")
	return metadata.NewOutgoingContext(ctx, md)
}

// GetQueue returns a queue's effective config and stats; includeKeys adds
// per-fairness-key and per-throttle-key stats.
func (c *Client) GetQueue(ctx context.Context, name string, includeKeys bool) (*raftqv1.QueueInfo, error) {
	resp := &raftqv1.GetQueueResponse{}
	err := c.broker(ctx, raftqv1.Broker_GetQueue_FullMethodName, &raftqv1.GetQueueRequest{Name: name, IncludeKeys: includeKeys}, resp)
	return resp.GetQueue(), err
}

// ListConsumers describes the consumers (Lease streams) registered on a
// queue, as the leader sees them.
func (c *Client) ListConsumers(ctx context.Context, queue string) ([]*raftqv1.ConsumerInfo, error) {
	resp := &raftqv1.ListConsumersResponse{}
	err := c.broker(ctx, raftqv1.Broker_ListConsumers_FullMethodName, &raftqv1.ListConsumersRequest{Queue: queue}, resp)
	return resp.GetConsumers(), err
}

// ListQueues returns the queues whose names start with prefix.
func (c *Client) ListQueues(ctx context.Context, prefix string) ([]*raftqv1.QueueInfo, error) {
	resp := &raftqv1.ListQueuesResponse{}
	err := c.broker(ctx, raftqv1.Broker_ListQueues_FullMethodName, &raftqv1.ListQueuesRequest{Prefix: prefix}, resp)
	return resp.GetQueues(), err
}

// PurgeQueue removes a queue's ready and delayed messages and returns how
// many were removed. The call carries a random idempotency key, chosen
// before the first attempt, so a retry after a lost answer purges nothing
// more (it answers the first attempt's count).
func (c *Client) PurgeQueue(ctx context.Context, name string) (int64, error) {
	resp := &raftqv1.PurgeQueueResponse{}
	err := c.broker(ctx, raftqv1.Broker_PurgeQueue_FullMethodName, &raftqv1.PurgeQueueRequest{Name: name, IdempotencyKey: NewDedupID()}, resp)
	return resp.GetPurged(), err
}

// Peek returns up to limit ready messages (0 = 10) in delivery order
// without leasing them; deadLetter browses the queue's dead-letter queue.
func (c *Client) Peek(ctx context.Context, queue string, limit int32, deadLetter bool) ([]*raftqv1.Delivery, error) {
	resp := &raftqv1.PeekResponse{}
	err := c.broker(ctx, raftqv1.Broker_Peek_FullMethodName, &raftqv1.PeekRequest{Queue: queue, Limit: limit, DeadLetter: deadLetter}, resp)
	return resp.GetMessages(), err
}

// Redrive moves up to limit (0 = all) messages that came from queue back
// from its dead-letter queue, and returns how many moved. Like PurgeQueue
// it carries a random idempotency key, so a retry moves nothing twice.
func (c *Client) Redrive(ctx context.Context, queue string, limit int64) (int64, error) {
	resp := &raftqv1.RedriveResponse{}
	err := c.broker(ctx, raftqv1.Broker_Redrive_FullMethodName, &raftqv1.RedriveRequest{Queue: queue, Limit: limit, IdempotencyKey: NewDedupID()}, resp)
	return resp.GetMoved(), err
}

// PeekWith lists messages as req asks: with any filter (fairness_key,
// reason_contains, older_than_ms) or after_id, in id order, so a caller
// pages by passing the last id it got as the next after_id.
func (c *Client) PeekWith(ctx context.Context, req *raftqv1.PeekRequest) ([]*raftqv1.Delivery, error) {
	resp := &raftqv1.PeekResponse{}
	err := c.broker(ctx, raftqv1.Broker_Peek_FullMethodName, req, resp)
	return resp.GetMessages(), err
}

// RedriveWith redrives as req asks: filters, message_ids, dry_run (count
// only) or rate_per_sec (a job the leader runs; the response says how many
// it will move and names the job, which GetQueue shows until it is done).
// Without an idempotency key it carries a random one, as Redrive does, so
// a retry moves nothing twice (a dry run records none).
func (c *Client) RedriveWith(ctx context.Context, req *raftqv1.RedriveRequest) (*raftqv1.RedriveResponse, error) {
	if req.IdempotencyKey == "" {
		r := proto.CloneOf(req)
		r.IdempotencyKey = NewDedupID()
		req = r
	}
	resp := &raftqv1.RedriveResponse{}
	err := c.broker(ctx, raftqv1.Broker_Redrive_FullMethodName, req, resp)
	return resp, err
}

// Ack settles leased messages. The error covers the call; each item has its
// own result (ItemError turns a failed one into an error).
func (c *Client) Ack(ctx context.Context, queue string, refs ...*raftqv1.LeaseRef) ([]*raftqv1.ItemResult, error) {
	resp := &raftqv1.AckResponse{}
	err := c.broker(ctx, raftqv1.Broker_Ack_FullMethodName, &raftqv1.AckRequest{Queue: queue, Acks: refs}, resp)
	return resp.GetResults(), err
}

// Nack returns leased messages for redelivery (after each item's delay) or
// sends them to the dead-letter queue.
func (c *Client) Nack(ctx context.Context, queue string, items ...*raftqv1.NackItem) ([]*raftqv1.ItemResult, error) {
	resp := &raftqv1.NackResponse{}
	err := c.broker(ctx, raftqv1.Broker_Nack_FullMethodName, &raftqv1.NackRequest{Queue: queue, Nacks: items}, resp)
	return resp.GetResults(), err
}

// ExtendLease moves the deadlines of leases to now + extendBy (0 = the
// queue's visibility timeout). The response holds per-item results and the
// new deadlines.
func (c *Client) ExtendLease(ctx context.Context, queue string, extendBy time.Duration, refs ...*raftqv1.LeaseRef) (*raftqv1.ExtendLeaseResponse, error) {
	resp := &raftqv1.ExtendLeaseResponse{}
	err := c.broker(ctx, raftqv1.Broker_ExtendLease_FullMethodName, &raftqv1.ExtendLeaseRequest{Queue: queue, Leases: refs, ExtendByMs: extendBy.Milliseconds()}, resp)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ItemError returns nil for a successful item result, otherwise an error
// carrying the item's gRPC code (status.Code works on it).
func ItemError(r *raftqv1.ItemResult) error {
	if r.GetOk() {
		return nil
	}
	code := codes.Code(r.GetCode())
	if code == codes.OK {
		code = codes.Unknown
	}
	return status.Error(code, r.GetError())
}

// cluster runs a Cluster RPC. local calls are answered by the node asked,
// so they go to the seed the user named rather than to the leader.
func (c *Client) cluster(ctx context.Context, method string, local bool, req, resp proto.Message) error {
	pick := c.pool.target
	if local {
		pick = c.pool.seedTarget
	}
	return c.invoke(ctx, path.Base(method), method, req, resp, pick)
}

// ClusterStatus returns the view of the cluster held by the node reached
// (the first reachable seed).
func (c *Client) ClusterStatus(ctx context.Context) (*raftqv1.StatusResponse, error) {
	resp := &raftqv1.StatusResponse{}
	if err := c.cluster(ctx, raftqv1.Cluster_Status_FullMethodName, true, &raftqv1.StatusRequest{}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// RemoveNode removes a node from the Raft configuration. Without force, a
// removal that would leave fewer voters than the cluster's
// --bootstrap-expect fails with FAILED_PRECONDITION. It is sent once, never
// retried by the SDK: a membership change is no state-machine entry that
// could carry an idempotency key, and a retry after a lost answer would
// remove the node again if it rejoined in between. The node called
// forwards it to the leader; after UNAVAILABLE, check ClusterStatus and
// call again if the node is still a member.
func (c *Client) RemoveNode(ctx context.Context, id string, force bool) error {
	return c.once().cluster(ctx, raftqv1.Cluster_RemoveNode_FullMethodName, false, &raftqv1.RemoveNodeRequest{Id: id, Force: force}, &raftqv1.RemoveNodeResponse{})
}

// once is c with one attempt per call (same pool, same attempt timeout).
func (c *Client) once() *Client {
	p := c.retry
	p.MaxAttempts = 1
	return c.WithRetryPolicy(p)
}

// Leave asks the node reached (the first reachable seed: dial exactly
// the node meant) to leave the cluster: it hands leadership over if it
// leads, is removed from the voters, answers with its id, and stops.
// Without force, a leave that would leave fewer voters than the cluster's
// --bootstrap-expect fails with FAILED_PRECONDITION and changes nothing.
func (c *Client) Leave(ctx context.Context, force bool) (string, error) {
	resp := &raftqv1.LeaveResponse{}
	err := c.cluster(ctx, raftqv1.Cluster_Leave_FullMethodName, true, &raftqv1.LeaveRequest{Force: force}, resp)
	return resp.GetId(), err
}

// TransferLeadership asks the leader to hand over to toID ("" = any voter)
// and returns the new leader's id.
func (c *Client) TransferLeadership(ctx context.Context, toID string) (string, error) {
	return c.TransferGroupLeadership(ctx, "", toID)
}

// TransferGroupLeadership hands leadership of group ("" or "data": the
// data group, as TransferLeadership; "meta": the meta group, from log
// version 21) to node toID, or to any other voter when toID is "".
func (c *Client) TransferGroupLeadership(ctx context.Context, group, toID string) (string, error) {
	resp := &raftqv1.TransferLeadershipResponse{}
	err := c.cluster(ctx, raftqv1.Cluster_TransferLeadership_FullMethodName, false, &raftqv1.TransferLeadershipRequest{ToId: toID, Group: group}, resp)
	if err == nil {
		// The old leader hint is now wrong; the next call will be redirected.
		c.pool.setLeader("")
	}
	return resp.GetNewLeaderId(), err
}

// SetClusterSettings changes the replicated cluster settings (admin):
// maxQueuedBytes bounds what the whole cluster holds (0 = unlimited; nil
// leaves it). It returns the settings as committed. Retried with an
// idempotency key, as ChangeClusterSettings.
func (c *Client) SetClusterSettings(ctx context.Context, maxQueuedBytes *int64) (*raftqv1.ClusterSettings, error) {
	return c.ChangeClusterSettings(ctx, &raftqv1.SetClusterSettingsRequest{MaxQueuedBytes: maxQueuedBytes})
}

// ChangeClusterSettings changes the cluster settings req sets (admin),
// leaving absent fields as they are, and returns the settings as
// committed: max_queued_bytes, and max_queues (the number of queues,
// dead-letter queues included; needs every voter at log version 12).
// The call carries an idempotency key (set in req): a retry after a lost
// answer changes nothing more, so it never undoes a setting another
// operator made in between; it answers with the settings as they are.
func (c *Client) ChangeClusterSettings(ctx context.Context, req *raftqv1.SetClusterSettingsRequest) (*raftqv1.ClusterSettings, error) {
	resp := &raftqv1.SetClusterSettingsResponse{}
	err := c.keyed("SetClusterSettings.idempotency_key", func(k string) { req.IdempotencyKey = k }, func() error {
		return c.cluster(ctx, raftqv1.Cluster_SetClusterSettings_FullMethodName, false, req, resp)
	})
	return resp.GetSettings(), err
}

// Snapshot makes the node reached take a Raft snapshot and returns its index.
func (c *Client) Snapshot(ctx context.Context) (uint64, error) {
	resp := &raftqv1.SnapshotResponse{}
	err := c.cluster(ctx, raftqv1.Cluster_Snapshot_FullMethodName, true, &raftqv1.SnapshotRequest{}, resp)
	return resp.GetIndex(), err
}

// Verify compares the replicas' state digests at one index.
func (c *Client) Verify(ctx context.Context) (*raftqv1.VerifyResponse, error) {
	resp := &raftqv1.VerifyResponse{}
	if err := c.cluster(ctx, raftqv1.Cluster_Verify_FullMethodName, true, &raftqv1.VerifyRequest{}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// GetMessage tells one message's life story: its state (ready, delayed,
// in_flight, dead_lettered, or acked while its ack is remembered), its
// last attempts and last_error (in the delivery), and its events, oldest
// first. A cluster below log version 18 refuses it (FAILED_PRECONDITION).
func (c *Client) GetMessage(ctx context.Context, queue, messageID string) (*raftqv1.GetMessageResponse, error) {
	resp := &raftqv1.GetMessageResponse{}
	if err := c.broker(ctx, raftqv1.Broker_GetMessage_FullMethodName, &raftqv1.GetMessageRequest{Queue: queue, MessageId: messageID}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}
