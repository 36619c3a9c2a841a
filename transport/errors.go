package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/raftq/raftq/broker"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/diskguard"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/metagroup"
	"github.com/raftq/raftq/scheduler"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/raftgroup"
)

// Redirect reasons carried in google.rpc.ErrorInfo (API.md, Redirect).
const (
	ReasonNotLeader = "NOT_LEADER"
	ReasonNoLeader  = "NO_LEADER"
	// ReasonClusterVersion: the request uses a field the cluster does not
	// apply yet (FAILED_PRECONDITION); metadata field, needs_version and
	// cluster_version say which. A client may resend without the field.
	ReasonClusterVersion = "CLUSTER_VERSION"
	errorDomain          = "raftq"
)

// codeOf maps the FSM's and the cluster's sentinel errors to gRPC codes.
func codeOf(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, fsm.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, fsm.ErrQueueNotFound), errors.Is(err, fsm.ErrMessageNotFound),
		errors.Is(err, fsm.ErrTokenNotFound), errors.Is(err, fsm.ErrGrantNotFound):
		return codes.NotFound
	case errors.Is(err, fsm.ErrQueueExists), errors.Is(err, fsm.ErrTokenExists):
		return codes.AlreadyExists
	case errors.Is(err, broker.ErrAuthNotEnabled), errors.Is(err, broker.ErrSettingsNotReplicated), errors.Is(err, broker.ErrNeedsVersion):
		return codes.FailedPrecondition
	case errors.Is(err, fsm.ErrQueueFull), errors.Is(err, fsm.ErrLimit), errors.Is(err, broker.ErrOverloaded),
		errors.Is(err, diskguard.ErrNoSpace):
		return codes.ResourceExhausted
	case errors.Is(err, meta.ErrConflict):
		return codes.FailedPrecondition
	case errors.Is(err, fsm.ErrMoved), errors.Is(err, metagroup.ErrStarting), errors.Is(err, meta.ErrHalted):
		// The state moved to the meta group, which is starting (or this
		// node stopped applying it): retry, at its leader.
		return codes.Unavailable
	case errors.Is(err, fsm.ErrStaleLease), errors.Is(err, fsm.ErrInUse), errors.Is(err, fsm.ErrNotEmpty), errors.Is(err, fsm.ErrAnswerLost),
		errors.Is(err, fsm.ErrPaused):
		return codes.FailedPrecondition
	case errors.Is(err, raftgroup.ErrUnknownNode):
		return codes.NotFound
	case errors.Is(err, cluster.ErrRemoveLeader), errors.Is(err, cluster.ErrBelowExpect):
		return codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, raftgroup.ErrNotLeader), errors.Is(err, raftgroup.ErrLeadershipLost), errors.Is(err, scheduler.ErrNotLeader),
		errors.Is(err, raftgroup.ErrShutdown), errors.Is(err, broker.ErrStopping), errors.Is(err, broker.ErrNoLeader),
		errors.Is(err, raftgroup.ErrNoTakeover):
		return codes.Unavailable
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Internal
}

// toStatus turns an error into a gRPC status error, keeping existing ones.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if nv := (*broker.NeedsVersionError)(nil); errors.As(err, &nv) {
		st, _ := status.New(codes.FailedPrecondition, err.Error()).WithDetails(&errdetails.ErrorInfo{
			Reason: ReasonClusterVersion,
			Domain: errorDomain,
			Metadata: map[string]string{
				"field":           nv.Field,
				"needs_version":   fmt.Sprint(nv.Needs),
				"cluster_version": fmt.Sprint(nv.Cluster),
			},
		})
		return st.Err()
	}
	return status.Error(codeOf(err), err.Error())
}

func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

// redirectError is the Unavailable status a follower answers a stream with:
// NOT_LEADER naming the leader, or NO_LEADER.
func redirectError(leaderID, leaderAddr string) error {
	if leaderID == "" || leaderAddr == "" {
		st, _ := status.New(codes.Unavailable, "no leader elected yet").WithDetails(&errdetails.ErrorInfo{Reason: ReasonNoLeader, Domain: errorDomain})
		return st.Err()
	}
	st, _ := status.New(codes.Unavailable, fmt.Sprintf("not the leader; the leader is %s at %s", leaderID, leaderAddr)).WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonNotLeader,
		Domain:   errorDomain,
		Metadata: map[string]string{"leader_id": leaderID, "leader_addr": leaderAddr},
	})
	return st.Err()
}
