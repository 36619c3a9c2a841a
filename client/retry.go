package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ErrorInfo reasons a node gives when it must not serve a call (see API.md,
// "Redirect").
const (
	ReasonNotLeader = "NOT_LEADER"
	ReasonNoLeader  = "NO_LEADER"
	// ReasonClusterVersion comes with FAILED_PRECONDITION: the request
	// used a field the cluster does not apply yet (metadata "field",
	// "needs_version", "cluster_version"); nothing was done.
	ReasonClusterVersion = "CLUSTER_VERSION"
)

// needsVersion reports whether err refused the request's field (named as
// the node names it, e.g. "DeleteQueue.idempotency_key") because the
// cluster does not apply it yet.
func needsVersion(err error, field string) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == ReasonClusterVersion && info.GetMetadata()["field"] == field {
			return true
		}
	}
	return false
}

// DefaultMaxAttempts bounds retries of a call whose context has no deadline.
const DefaultMaxAttempts = 10

// RetryPolicy says how a call is retried after codes.Unavailable (node down,
// no leader, leader moved). Other codes are returned at once. Zero fields
// take the defaults noted.
type RetryPolicy struct {
	// MaxAttempts caps attempts, redirects included. 0 means: until the
	// context's deadline, or DefaultMaxAttempts if it has none. Negative
	// means until the context ends. 1 disables retries.
	MaxAttempts int
	// InitialBackoff is the cap of the first backoff (default 50ms); each
	// later cap is Multiplier (default 2) times the previous, up to
	// MaxBackoff (default 2s). The wait is uniform in [0, cap) — full jitter,
	// so clients that failed together do not retry together.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
	// AttemptTimeout bounds each attempt (0: only the caller's deadline).
	// An attempt that times out while the caller's context is still live is
	// retried on another node, which gets calls past a hung node.
	AttemptTimeout time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 50 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 2 * time.Second
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = p.InitialBackoff
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	return p
}

// backoff is the full-jitter wait before retry number n (n >= 1).
func (p RetryPolicy) backoff(n int) time.Duration {
	ceiling := float64(p.InitialBackoff)
	for i := 1; i < n && ceiling < float64(p.MaxBackoff); i++ {
		ceiling *= p.Multiplier
	}
	ceiling = min(ceiling, float64(p.MaxBackoff))
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// attempts is the attempt budget for a call under ctx; 0 means unbounded.
func (p RetryPolicy) attempts(ctx context.Context) int {
	switch {
	case p.MaxAttempts > 0:
		return p.MaxAttempts
	case p.MaxAttempts < 0:
		return 0
	}
	if _, ok := ctx.Deadline(); ok {
		return 0
	}
	return DefaultMaxAttempts
}

// action is what to do after a failed attempt.
type action int

const (
	actFail     action = iota // return the error
	actRedirect               // retry at once: the leader is now known
	actBackoff                // wait, then retry
)

// NotLeader reports whether err says the node called is not the leader, and
// if so the leader's address ("" when the node does not know it).
func NotLeader(err error) (leaderAddr string, ok bool) {
	info := errorInfo(err)
	if info == nil || info.GetReason() != ReasonNotLeader {
		return "", false
	}
	return info.GetMetadata()["leader_addr"], true
}

func errorInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// classify decides what a failed attempt at addr means, updating what the
// pool knows about the leader and the seeds on the way.
func (p *pool) classify(ctx context.Context, addr string, err error) action {
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return actFail
	}
	switch status.Code(err) {
	case codes.Unavailable:
		info := errorInfo(err)
		switch info.GetReason() {
		case ReasonNotLeader:
			if leader := info.GetMetadata()["leader_addr"]; leader != "" && leader != addr {
				p.setLeader(leader)
				return actRedirect
			}
			// A follower that does not know the leader yet: same as NO_LEADER.
			p.forgetLeader(addr)
			return actBackoff
		case ReasonNoLeader:
			p.forgetLeader(addr)
			return actBackoff
		}
		// Unreachable node, or one going away: try the next.
		p.unreachable(addr)
		return actBackoff
	case codes.DeadlineExceeded:
		// grpc's timer may fire just before ctx notices its own deadline.
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return actFail
		}
		// The caller's context is live, so only this attempt timed out
		// (RetryPolicy.AttemptTimeout): treat the node as hung.
		p.unreachable(addr)
		return actBackoff
	}
	return actFail
}

// invoke runs one unary RPC with leader following and retries. resp is
// overwritten by each attempt that gets a response.
func (c *Client) invoke(ctx context.Context, op, method string, req, resp proto.Message, pick func() string) error {
	return c.retrying(ctx, op, pick, func(ctx context.Context, _ string, cc *grpc.ClientConn) error {
		return cc.Invoke(ctx, method, req, resp)
	})
}

// retrying runs attempt against the node pick names until it succeeds, the
// retry policy gives up, or an error is final.
func (c *Client) retrying(ctx context.Context, op string, pick func() string, attempt func(ctx context.Context, addr string, cc *grpc.ClientConn) error) error {
	rp := c.retry.withDefaults()
	limit := rp.attempts(ctx)
	var lastErr error
	var refused refusals
	redirects := 0
	for n := 1; ; n++ {
		addr := pick()
		cc, err := c.pool.conn(addr)
		if err != nil {
			return fmt.Errorf("raftq %s: %w", op, err)
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if rp.AttemptTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, rp.AttemptTimeout)
		}
		err = attempt(actx, addr, cc)
		cancel()
		if err == nil {
			return nil
		}
		if c.pool.isClosed() {
			return fmt.Errorf("raftq %s: %w: %w", op, ErrClosed, err)
		}
		act := c.pool.classify(ctx, addr, err)
		if act == actFail {
			if (ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded) && lastErr != nil {
				// The caller's deadline cut a retry short: the failure
				// that caused the retries says more than the deadline.
				return fmt.Errorf("raftq %s: %w (last error: %w)", op, cmp.Or(ctx.Err(), context.DeadlineExceeded), lastErr)
			}
			return fmt.Errorf("raftq %s: %w", op, err)
		}
		lastErr = err
		if c.failFast {
			refused.note(addr, cc, err)
			if refused.all(c.pool.knownAddrs()) {
				return fmt.Errorf("raftq %s: %w", op, refused.err())
			}
		}
		if limit > 0 && n >= limit {
			return fmt.Errorf("raftq %s: giving up after %d attempts: %w", op, n, lastErr)
		}
		// A redirect is followed at once, but two in a row means nodes
		// disagree about the leader (an election in progress): back off.
		var wait time.Duration
		if act == actRedirect && redirects == 0 {
			redirects++
		} else {
			redirects = 0
			wait = rp.backoff(n)
		}
		c.log.Debug("raftq: retrying", "op", op, "addr", addr, "attempt", n,
			"code", status.Code(err).String(), "wait", wait, "next", c.pool.target())
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("raftq %s: %w (last error: %w)", op, err, lastErr)
		}
	}
}

// sleepCtx waits d or until ctx ends, returning ctx's error in that case.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
