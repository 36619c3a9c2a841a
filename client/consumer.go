package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// ErrLeaseLost is the cause (context.Cause) of a handler's context when the
// broker refused to extend its lease: the message may already be delivered
// elsewhere, and its ack would be refused.
var ErrLeaseLost = errors.New("raftq consumer: lease lost")

// Handler processes one delivery. Returning nil acks it; an error nacks it
// (DeadLetter(err) sends it straight to the dead-letter queue). ctx is
// cancelled when Run's context is, or with cause ErrLeaseLost.
type Handler func(ctx context.Context, d *raftqv1.Delivery) error

// ConsumerOptions tune a Consumer. Zero values take the defaults noted.
type ConsumerOptions struct {
	// Name labels the consumer in ListConsumers (raftq consumers; default host-pid).
	Name string
	// MaxInFlight is how many unsettled deliveries the broker may push to
	// this consumer (default 64).
	MaxInFlight int
	// Concurrency is how many handlers run at once (default MaxInFlight).
	Concurrency int
	// VisibilityTimeout is the lease length asked for (default: the queue's
	// own). Extensions ask for the same length.
	VisibilityTimeout time.Duration
	// NackDelay is how long a nacked message waits before redelivery.
	NackDelay time.Duration
	// ShutdownTimeout bounds sending the last acks after Run's context is
	// cancelled and the handlers have returned (default 10s).
	ShutdownTimeout time.Duration
	// Limit is the most deliveries to take in all (0 = no limit). The
	// broker then sends no extras, which would otherwise cost attempts
	// when handed back. Run keeps going until its context ends.
	Limit int64
	// Unsettled, when set, is called for each delivery whose ack or nack
	// did not take effect: the call failed, the broker refused the item,
	// or the lease was lost before the handler returned; hand-backs (of
	// ErrHandBack, or of deliveries no handler started) that failed are
	// reported too. The message will be delivered again. It is called from the consumer's goroutines and
	// must not block; a tool that must not report success for work it
	// could not ack (raftq consume) counts these.
	Unsettled func(messageID string, err error)
}

// Consumer leases messages from one queue and runs a Handler on each. It
// keeps leases alive while handlers run, settles results in batches, and
// follows the leader across failovers without dropping what it holds.
type Consumer struct {
	c       *Client
	rpc     *Client // c with attempt timeouts, for acks and extensions
	queue   string
	handler Handler
	opts    ConsumerOptions
	log     *slog.Logger
}

// NewConsumer returns a Consumer of queue; Run starts it.
func NewConsumer(c *Client, queue string, handler func(ctx context.Context, d *raftqv1.Delivery) error, opts ConsumerOptions) *Consumer {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 64
	}
	opts.MaxInFlight = min(opts.MaxInFlight, math.MaxInt32)
	if opts.Concurrency <= 0 {
		opts.Concurrency = opts.MaxInFlight
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	if opts.Name == "" {
		host, _ := os.Hostname()
		opts.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	con := &Consumer{c: c, queue: queue, handler: handler, opts: opts}
	if c != nil {
		con.log = c.log.With("queue", queue, "consumer", opts.Name)
		// A node that stops answering (paused, partitioned) would hold an
		// ack or an extension until its deadline; time out each attempt so
		// the retry moves to another node well before leases run out.
		p := c.retry
		if p.AttemptTimeout <= 0 {
			p.AttemptTimeout = attemptTimeout
		}
		con.rpc = c.WithRetryPolicy(p)
	}
	return con
}

// ErrHandBack, returned by a handler (possibly wrapped), gives the
// delivery back untouched: it is redelivered at once and the delivery does
// not count as an attempt. For a handler that decides not to take work
// (shutting down, over a quota) - not for failures, which must count.
var ErrHandBack = errors.New("raftq: delivery handed back unprocessed")

// deadLetterError marks a handler error that should dead-letter the message.
type deadLetterError struct{ err error }

func (e deadLetterError) Error() string { return e.err.Error() }
func (e deadLetterError) Unwrap() error { return e.err }

// DeadLetter wraps a handler error so that the message goes straight to the
// dead-letter queue instead of being retried.
func DeadLetter(err error) error {
	if err == nil {
		err = errors.New("dead-lettered by handler")
	}
	return deadLetterError{err}
}

// outcome is a settled delivery on its way to the broker: an ack, or a nack.
type outcome struct {
	ack  *raftqv1.LeaseRef
	nack *raftqv1.NackItem
}

// Run consumes until ctx is cancelled (then it returns nil) or the broker
// refuses the stream for good (queue not found, bad arguments: then it
// returns that error). On the way out it stops taking deliveries, waits
// for running handlers (their context is cancelled), sends their acks and
// nacks, hands back deliveries no handler started, and only then closes
// the stream — closing it first would make the broker release leases whose
// acks are still on the way.
func (con *Consumer) Run(ctx context.Context) error {
	switch {
	case con.c == nil:
		return errors.New("raftq consumer: nil client")
	case con.handler == nil:
		return errors.New("raftq consumer: nil handler")
	case con.queue == "":
		return errors.New("raftq consumer: empty queue name")
	}
	// The stream, keeper and settler outlive ctx during shutdown; each has
	// its own cancel, called in order below.
	base := context.WithoutCancel(ctx)
	dispatchCtx, stopDispatch := context.WithCancel(ctx)
	defer stopDispatch()
	streamCtx, stopStream := context.WithCancel(base)
	defer stopStream()
	keepCtx, stopKeep := context.WithCancel(base)
	defer stopKeep()
	settleCtx, stopSettle := context.WithCancel(base)
	defer stopSettle()

	tracked := newLeases(con.opts.VisibilityTimeout)
	work := make(chan *held, con.opts.MaxInFlight)
	settled := make(chan outcome, con.opts.MaxInFlight)

	streamDone := make(chan error, 1)
	go func() { streamDone <- con.receive(dispatchCtx, streamCtx, tracked, work) }()

	var workers sync.WaitGroup
	for range con.opts.Concurrency {
		workers.Go(func() { con.work(dispatchCtx, tracked, work, settled) })
	}
	settlerDone := make(chan struct{})
	go func() {
		defer close(settlerDone)
		con.settle(settleCtx, settled)
	}()
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		con.keep(keepCtx, tracked)
	}()

	var fatal error
	streamExited := false
	select {
	case <-ctx.Done():
	case fatal = <-streamDone:
		streamExited = true
	}
	stopDispatch()
	queued := tracked.closeQueued()
	workers.Wait()
	for _, h := range queued {
		settled <- outcome{nack: &raftqv1.NackItem{
			MessageId: h.ref.MessageId, LeaseToken: h.ref.LeaseToken, Reason: "consumer stopped", Unprocessed: true,
		}}
	}
	flushDeadline := time.AfterFunc(con.opts.ShutdownTimeout, stopSettle)
	close(settled)
	<-settlerDone
	flushDeadline.Stop()
	stopKeep()
	<-keeperDone
	stopStream()
	if !streamExited {
		<-streamDone
	}
	return fatal
}

// work runs handlers on deliveries until dispatch stops.
func (con *Consumer) work(ctx context.Context, leases *leases, work <-chan *held, settled chan<- outcome) {
	for {
		var h *held
		select {
		case <-ctx.Done():
			return
		case h = <-work:
		}
		// Shutdown may have begun while both cases were ready; a delivery
		// not started is handed back by Run.
		if ctx.Err() != nil {
			return
		}
		hctx, cancel := context.WithCancelCause(ctx)
		if !leases.start(h, cancel) {
			cancel(nil)
			continue
		}
		err := con.handler(hctx, h.d)
		cancel(nil)
		if !leases.finish(h) {
			con.log.Warn("raftq: lease lost before the handler finished; not settling",
				"message_id", h.ref.MessageId)
			con.unsettled(h.ref.MessageId, ErrLeaseLost)
			continue
		}
		if err == nil {
			settled <- outcome{ack: h.ref}
			continue
		}
		var dl deadLetterError
		unprocessed := errors.Is(err, ErrHandBack)
		delay := con.opts.NackDelay.Milliseconds()
		if unprocessed {
			delay = 0
		}
		settled <- outcome{nack: &raftqv1.NackItem{
			MessageId:   h.ref.MessageId,
			LeaseToken:  h.ref.LeaseToken,
			DelayMs:     delay,
			Reason:      truncate(err.Error(), 256),
			DeadLetter:  errors.As(err, &dl),
			Unprocessed: unprocessed,
		}}
	}
}

const (
	// maxSettleBatch caps acks (and nacks) per call.
	maxSettleBatch = 256
	// settleTimeout bounds one batch of acks or nacks, retries included;
	// past it the batch is given up and its messages are redelivered.
	settleTimeout = 30 * time.Second
	// attemptTimeout is the consumer's per-attempt timeout for its calls
	// unless the Client's retry policy sets one.
	attemptTimeout = 5 * time.Second
)

// settle sends acks and nacks in batches: whatever accumulated while the
// previous call was in flight goes in the next, so batches grow with load
// and no timer adds latency. It returns when settled is closed and drained.
func (con *Consumer) settle(ctx context.Context, settled <-chan outcome) {
	for {
		first, ok := <-settled
		if !ok {
			return
		}
		var acks []*raftqv1.LeaseRef
		var nacks []*raftqv1.NackItem
		add := func(o outcome) {
			if o.ack != nil {
				acks = append(acks, o.ack)
			} else {
				nacks = append(nacks, o.nack)
			}
		}
		add(first)
	drain:
		for len(acks)+len(nacks) < maxSettleBatch {
			select {
			case o, ok := <-settled:
				if !ok {
					break drain
				}
				add(o)
			default:
				break drain
			}
		}
		cctx, cancel := context.WithTimeout(ctx, settleTimeout)
		if len(acks) > 0 {
			ids := make([]string, len(acks))
			for i, a := range acks {
				ids[i] = a.GetMessageId()
			}
			res, err := con.rpc.Ack(cctx, con.queue, acks...)
			con.report("ack", ids, res, err)
		}
		if len(nacks) > 0 {
			ids := make([]string, len(nacks))
			for i, n := range nacks {
				ids[i] = n.GetMessageId()
			}
			res, err := con.rpc.Nack(cctx, con.queue, nacks...)
			con.report("nack", ids, res, err)
		}
		cancel()
	}
}

// report logs what went wrong settling a batch of the messages ids. A
// failed ack is not fatal: the lease expires and the message is delivered
// again (at-least-once).
func (con *Consumer) report(op string, ids []string, res []*raftqv1.ItemResult, err error) {
	if err != nil {
		con.log.Warn("raftq: settling failed; messages will be redelivered", "op", op, "count", len(ids), "err", err)
		for _, id := range ids {
			con.unsettled(id, err)
		}
		return
	}
	for i, r := range res {
		if err := ItemError(r); err != nil {
			con.log.Warn("raftq: item not settled", "op", op, "code", status.Code(err).String(), "err", r.GetError())
			if i < len(ids) {
				con.unsettled(ids[i], err)
			}
		}
	}
}

func (con *Consumer) unsettled(id string, err error) {
	if con.opts.Unsettled != nil {
		con.opts.Unsettled(id, err)
	}
}

// keep extends leases before they run out, in batches, until ctx ends.
func (con *Consumer) keep(ctx context.Context, leases *leases) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		refs, soonest, next := leases.due(now)
		if len(refs) > 0 {
			con.extend(ctx, leases, refs, soonest)
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-leases.wake:
		case <-timer.C:
		}
	}
}

func (con *Consumer) extend(ctx context.Context, leases *leases, refs []*raftqv1.LeaseRef, soonest time.Duration) {
	// Past the soonest expiry the call is pointless; at least 1s so a slow
	// broker still gets a chance.
	cctx, cancel := context.WithTimeout(ctx, min(max(soonest, time.Second), 10*time.Second))
	resp, err := con.rpc.ExtendLease(cctx, con.queue, con.opts.VisibilityTimeout, refs...)
	cancel()
	now := time.Now()
	tokens := make([]string, len(refs))
	for i, r := range refs {
		tokens[i] = r.LeaseToken
	}
	if err != nil {
		if ctx.Err() == nil {
			con.log.Warn("raftq: extending leases failed; will retry", "count", len(refs), "err", err)
		}
		leases.retryLater(tokens, now)
		return
	}
	results, deadlines, remaining := resp.GetResults(), resp.GetDeadlinesMs(), resp.GetRemainingMs()
	for i, tok := range tokens {
		if i >= len(results) {
			leases.retryLater(tokens[i:i+1], now)
			continue
		}
		if err := ItemError(results[i]); err != nil {
			switch status.Code(err) {
			case codes.FailedPrecondition, codes.NotFound:
				con.log.Warn("raftq: lease lost", "message_id", refs[i].MessageId, "err", results[i].GetError())
				leases.lost(tok)
			default:
				leases.retryLater(tokens[i:i+1], now)
			}
			continue
		}
		var deadline, left int64
		if i < len(deadlines) {
			deadline = deadlines[i]
		}
		if i < len(remaining) {
			left = remaining[i]
		}
		leases.extended(tok, deadline, left, now)
	}
}

// receive keeps a Lease stream open on the leader and hands deliveries to
// the workers. It reconnects, following redirects and backing off, until
// dispatch stops (then it returns nil once streamCtx is cancelled) or the
// broker refuses the stream for a reason retrying cannot fix.
func (con *Consumer) receive(dispatchCtx, streamCtx context.Context, leases *leases, work chan<- *held) error {
	rp := con.c.retry.withDefaults()
	req := &raftqv1.LeaseRequest{
		Queue:               con.queue,
		ConsumerName:        con.opts.Name,
		MaxInFlight:         int32(con.opts.MaxInFlight),
		VisibilityTimeoutMs: con.opts.VisibilityTimeout.Milliseconds(),
		// Responses as large as the client accepts, no larger.
		MaxBatchBytes: MaxReceiveBytes,
	}
	failures, redirects := 0, 0
	var received int64
	var refused refusals
	for {
		if dispatchCtx.Err() != nil {
			return nil
		}
		if con.opts.Limit > 0 {
			left := con.opts.Limit - received
			if left <= 0 {
				<-dispatchCtx.Done()
				return nil
			}
			req.Limit = left
		}
		if failures == 0 {
			con.learnMembers(dispatchCtx)
		}
		addr := con.c.pool.target()
		started := time.Now()
		got, err := con.stream(streamCtx, dispatchCtx, addr, req, leases, work, &received)
		if dispatchCtx.Err() != nil || streamCtx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("raftq consumer: %w", err)
		}
		if got || time.Since(started) > rp.MaxBackoff {
			// The stream worked for a while: start backoff afresh.
			failures, redirects = 0, 0
			refused = refusals{}
		}
		if con.c.failFast && err != nil {
			if cc, cerr := con.c.pool.conn(addr); cerr == nil {
				refused.note(addr, cc, err)
			}
			if refused.all(con.c.pool.knownAddrs()) {
				return fmt.Errorf("raftq consumer %s: %w", con.queue, refused.err())
			}
		}
		act := actBackoff
		if !errors.Is(err, io.EOF) {
			act = con.c.pool.classify(streamCtx, addr, err)
			if act == actFail && retryableStreamCode(status.Code(err)) {
				act = actBackoff
			}
		}
		if act == actFail {
			return fmt.Errorf("raftq consumer %s: %w", con.queue, err)
		}
		// A redirect is followed at once, but being redirected again before
		// a stream worked means nodes disagree (an election): back off.
		var wait time.Duration
		if act == actRedirect {
			redirects++
		}
		if act == actBackoff || redirects > 1 {
			failures++
			wait = rp.backoff(failures)
		}
		level := slog.LevelInfo
		if act == actRedirect {
			level = slog.LevelDebug // routine: the seed was a follower
		}
		con.log.Log(streamCtx, level, "raftq: lease stream ended; reconnecting", "addr", addr,
			"code", status.Code(err).String(), "err", err, "wait", wait)
		if sleepCtx(dispatchCtx, wait) != nil {
			return nil
		}
	}
}

// learnMembers adds every node's address to the client's seeds while the
// cluster is healthy, so that the stream can fail over even if the node it
// was given as a seed is the one that dies. Best effort.
func (con *Consumer) learnMembers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := con.c.WithRetryPolicy(RetryPolicy{MaxAttempts: 1}).ClusterStatus(ctx)
	if err != nil {
		con.log.Debug("raftq: cluster status unavailable; using known nodes only", "err", err)
		return
	}
	addrs := []string{st.GetLeaderAddr()}
	for _, n := range st.GetNodes() {
		addrs = append(addrs, n.GetGrpcAddr())
	}
	con.c.pool.learn(addrs...)
}

// retryableStreamCode lists codes that end a stream but say nothing about
// whether a new one would work (a node shutting down, a proxy hiccup).
func retryableStreamCode(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.Internal, codes.Aborted, codes.Canceled, codes.ResourceExhausted:
		return true
	}
	return false
}

// stream runs one Lease stream on addr until it fails; got reports whether
// it delivered anything. After dispatch stops it keeps the stream open
// (dropping further deliveries, which the broker releases when the stream
// closes) until streamCtx is cancelled.
func (con *Consumer) stream(streamCtx, dispatchCtx context.Context, addr string, req *raftqv1.LeaseRequest,
	leases *leases, work chan<- *held, received *int64) (got bool, err error) {
	cc, err := con.c.pool.conn(addr)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(streamCtx)
	defer cancel()
	s, err := raftqv1.NewBrokerClient(cc).Lease(ctx, req)
	if err != nil {
		return false, err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			con.log.Debug("raftq: lease stream open", "addr", addr)
		}
		got = true
		now := time.Now()
		var late []*raftqv1.NackItem
		*received += int64(len(resp.GetMessages()))
		for _, d := range resp.GetMessages() {
			h, ok := leases.add(d, now)
			if !ok {
				// Shutting down: hand it straight back, uncounted, rather
				// than let the stream's close release it as an attempt.
				late = append(late, &raftqv1.NackItem{MessageId: d.GetId(), LeaseToken: d.GetLeaseToken(), Reason: "consumer stopped", Unprocessed: true})
				continue
			}
			select {
			case work <- h:
			case <-dispatchCtx.Done():
				// Run hands back what it still tracks.
			}
		}
		if len(late) > 0 {
			con.handBack(streamCtx, late)
		}
	}
}

// handBack returns deliveries no handler will see (best effort: if it
// fails, closing the stream releases them anyway, counted).
func (con *Consumer) handBack(ctx context.Context, items []*raftqv1.NackItem) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := con.c.WithRetryPolicy(RetryPolicy{MaxAttempts: 2}).Nack(ctx, con.queue, items...)
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.GetMessageId()
	}
	con.report("hand back", ids, res, err)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
