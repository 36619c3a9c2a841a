// Package workload is the broker-neutral half of the raftq benchmark: the
// workload definition, the phases that run it against any Driver, the
// exactly-once ledger, latency percentiles, process CPU and memory readings
// from /proc, and the table and JSON reports.
package workload

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limit bounds a phase by wall time or by a number of messages. The zero
// Limit turns the phase off.
type Limit struct {
	Duration time.Duration `json:"duration_ns,omitempty"`
	Messages int64         `json:"messages,omitempty"`
}

// ParseLimit reads "10s" (a duration), "50000" (a message count) or "0"
// (off).
func ParseLimit(s string) (Limit, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return Limit{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return Limit{}, fmt.Errorf("limit %q: negative message count", s)
		}
		return Limit{Messages: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q: want a duration (10s) or a message count (50000)", s)
	}
	if d < 0 {
		return Limit{}, fmt.Errorf("limit %q: negative duration", s)
	}
	return Limit{Duration: d}, nil
}

// Off reports whether the phase is disabled.
func (l Limit) Off() bool { return l.Duration <= 0 && l.Messages <= 0 }

func (l Limit) String() string {
	switch {
	case l.Messages > 0:
		return strconv.FormatInt(l.Messages, 10)
	case l.Duration > 0:
		return l.Duration.String()
	}
	return "0"
}

// Set and the String method make a Limit usable as a flag.Value.
func (l *Limit) Set(s string) error {
	v, err := ParseLimit(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Client kinds: how the load generator calls a broker. Every kind runs
// its own phases on its own queues, so one run measures them side by side.
const (
	// ClientUnary is one message per call over the broker's plain API,
	// waiting for each call, and one acknowledgement per delivery: what a
	// Python, Java or grpcurl user does. For raftq that is a grpc-go client
	// on the generated stubs (unary Enqueue, the Lease stream, one unary
	// Ack per message); for NATS and RabbitMQ it is their ordinary client.
	ClientUnary = "unary"
	// ClientBatch sends BatchSize messages per call (raftq: one Enqueue of
	// BatchSize messages, one Ack per Lease response; the peers: BatchSize
	// publishes whose acknowledgements are awaited together).
	ClientBatch = "batch"
	// ClientSDK is the system's own client library as its users would use
	// it (raftq: the Go SDK, whose Enqueue rides EnqueueStream and whose
	// consumer acks in batches). For the peers it is the unary client, so
	// its phases are not run twice (SystemResult.SameClient).
	ClientSDK = "sdk"
)

// ClientKinds lists the client kinds in the order a run performs them.
var ClientKinds = []string{ClientUnary, ClientBatch, ClientSDK}

// ParseClients reads a comma-separated list of client kinds.
func ParseClients(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if !slices.Contains(ClientKinds, k) {
			return nil, fmt.Errorf("client kind %q: want one of %s", k, strings.Join(ClientKinds, ", "))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no client kind given")
	}
	return out, nil
}

// Config is one workload definition, applied identically to every system.
type Config struct {
	// Clients are the client kinds to run, in this order.
	Clients     []string `json:"clients"`
	PayloadSize int      `json:"payload_size"`
	// Producers each keep Window enqueue calls outstanding (one message
	// per call) in the enqueue and lifecycle phases.
	Producers int `json:"producers"`
	Window    int `json:"window"`
	// BatchSize messages go in one call in the batch client's enqueue and
	// lifecycle phases, with BatchWindow calls outstanding per producer.
	BatchSize   int `json:"batch_size"`
	BatchWindow int `json:"batch_window"`
	// Consumers each allow MaxInFlight unsettled deliveries.
	Consumers   int `json:"consumers"`
	MaxInFlight int `json:"max_in_flight"`

	Enqueue Limit `json:"enqueue"`
	// EnqueueHalf runs the enqueue workload again, paced to half the rate
	// the enqueue phase reached: latency under load short of saturation.
	EnqueueHalf Limit `json:"enqueue_half"`
	EnqueueSync Limit `json:"enqueue_sync"`
	// EnqueueBatch limits the batch client's enqueue phase.
	EnqueueBatch Limit `json:"enqueue_batch"`
	Lifecycle    Limit `json:"lifecycle"`
	// Paced runs producers and consumers together at PacedRate messages
	// per second in all, far below any system's peak: the latency from
	// send to delivery when nothing queues.
	Paced     Limit   `json:"paced"`
	PacedRate float64 `json:"paced_rate"`
	// LifecycleRate paces the lifecycle producers to this many messages
	// per second in all (0: as fast as the window allows). Unpaced, the
	// end-to-end latency mostly measures the backlog that builds when
	// delivery is slower than enqueue.
	LifecycleRate float64 `json:"lifecycle_rate,omitempty"`
	// Drain has no limit of its own: it runs until the backlog is consumed,
	// or until no delivery arrived for IdleTimeout.
	Drain bool `json:"drain"`

	// CallTimeout bounds one enqueue call; IdleTimeout ends a drain (or
	// the tail of the lifecycle phase) that stopped making progress.
	CallTimeout time.Duration `json:"call_timeout_ns"`
	IdleTimeout time.Duration `json:"idle_timeout_ns"`
	// MaxErrors aborts a phase after this many failed calls.
	MaxErrors int64 `json:"max_errors"`
}

// DefaultConfig is the workload `make bench` runs.
func DefaultConfig() Config {
	return Config{
		Clients:      slices.Clone(ClientKinds),
		PayloadSize:  1024,
		Producers:    4,
		Window:       256,
		BatchSize:    64,
		BatchWindow:  16,
		Consumers:    4,
		MaxInFlight:  64,
		Enqueue:      Limit{Duration: 10 * time.Second},
		EnqueueHalf:  Limit{Duration: 5 * time.Second},
		EnqueueSync:  Limit{Duration: 5 * time.Second},
		EnqueueBatch: Limit{Duration: 10 * time.Second},
		Lifecycle:    Limit{Duration: 10 * time.Second},
		Paced:        Limit{Duration: 10 * time.Second},
		PacedRate:    100,
		Drain:        true,
		CallTimeout:  30 * time.Second,
		IdleTimeout:  15 * time.Second,
		MaxErrors:    1000,
	}
}

// Validate reports the first setting that cannot run.
func (c Config) Validate() error {
	var errs []error
	if c.PayloadSize < HeaderSize {
		errs = append(errs, fmt.Errorf("payload size %d: at least %d bytes (message key and timestamp)", c.PayloadSize, HeaderSize))
	}
	for name, v := range map[string]int{"producers": c.Producers, "window": c.Window, "batch size": c.BatchSize,
		"batch window": c.BatchWindow, "consumers": c.Consumers, "max in flight": c.MaxInFlight} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: must be at least 1", name, v))
		}
	}
	if c.Producers > 1<<maxProducerBits-1 {
		errs = append(errs, fmt.Errorf("producers %d: at most %d", c.Producers, 1<<maxProducerBits-1))
	}
	if len(c.Clients) == 0 {
		errs = append(errs, errors.New("no client kind to run"))
	}
	for _, k := range c.Clients {
		if !slices.Contains(ClientKinds, k) {
			errs = append(errs, fmt.Errorf("client kind %q: want one of %s", k, strings.Join(ClientKinds, ", ")))
		}
	}
	if c.PacedRate <= 0 && !c.Paced.Off() {
		errs = append(errs, fmt.Errorf("paced rate %v: must be positive", c.PacedRate))
	}
	if c.LifecycleRate < 0 {
		errs = append(errs, fmt.Errorf("lifecycle rate %v: must not be negative", c.LifecycleRate))
	}
	if c.CallTimeout <= 0 || c.IdleTimeout <= 0 {
		errs = append(errs, errors.New("call and idle timeouts must be positive"))
	}
	return errors.Join(errs...)
}
