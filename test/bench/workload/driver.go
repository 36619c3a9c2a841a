package workload

import "context"

// ClientDriver returns the driver t uses for a client kind, and, for
// ClientSDK on a system whose ordinary client is its unary client, the
// kind whose phases the SDK phases would repeat (ClientUnary), else "".
func (t Target) ClientDriver(kind string) (d Driver, same string) {
	if d, ok := t.Clients[kind]; ok {
		return d, ""
	}
	if _, ok := t.Clients[ClientUnary]; kind == ClientSDK && !ok {
		return t.Driver, ClientUnary
	}
	return t.Driver, ""
}

// Driver runs the workload's operations against one broker. A Driver and
// its Producers and Consumers are used from many goroutines at once.
type Driver interface {
	// CreateQueue makes a new, empty, durable and replicated queue.
	CreateQueue(ctx context.Context, q QueueSpec) error
	// NewProducer opens a producer (its own connection) for queue.
	NewProducer(ctx context.Context, queue string) (Producer, error)
	// StartConsumer opens a consumer (its own connection) that allows
	// maxInFlight unsettled deliveries and calls handle for each delivery,
	// from any goroutine; when handle returns the delivery is acked.
	StartConsumer(ctx context.Context, queue string, maxInFlight int, handle func(payload []byte)) (Consumer, error)
	// Depth is how many messages the broker still holds in queue, ready or
	// delivered but not acknowledged.
	Depth(ctx context.Context, queue string) (int64, error)
}

// QueueSpec describes a queue and how it will be consumed (some brokers
// size their consumer objects up front).
type QueueSpec struct {
	Name        string
	Consumers   int
	MaxInFlight int
}

// Producer enqueues. Enqueue is called concurrently (Window calls at once
// per producer) and returns nil once the broker acknowledged every payload
// as durably stored.
type Producer interface {
	Enqueue(ctx context.Context, payloads [][]byte) error
	Close() error
}

// Consumer is a running consumer. Stop stops taking deliveries, settles
// what was handled and closes the connection.
type Consumer interface {
	Stop(ctx context.Context) error
}

// Target is one broker deployment under test.
type Target struct {
	// Name labels the system in reports ("raftq-3", "nats-sync", ...).
	Name  string
	Nodes int
	// Driver is the system's ordinary client, used the way its users
	// would (the ClientSDK kind).
	Driver Driver
	// Clients drive the other client kinds where they differ from Driver
	// (raftq: a plain grpc-go client for ClientUnary and ClientBatch). A
	// kind missing here is driven by Driver; if ClientUnary is missing,
	// Driver is the unary client and the ClientSDK phases, which would
	// repeat the unary ones, are not run.
	Clients map[string]Driver
	// Procs lists the server processes whose CPU time is recorded.
	Procs func() []Proc
	// Notes are printed under the table (deviations, settings).
	Notes []string
	// LogIndex, if set, reads the broker's replicated-log position (the
	// leader's applied index): a phase reports the entries it took.
	LogIndex func(ctx context.Context) (uint64, error)
}
