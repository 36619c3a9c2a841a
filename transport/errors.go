package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
	// ReasonNotOwner: the node's queue placement is older than the
	// caller's (Unavailable); metadata placement_version is the node's.
	ReasonNotOwner = "NOT_OWNER"
	errorDomain    = "raftq"
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
	case errors.Is(err, meta.ErrNotFound):
		return codes.NotFound
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
	return groupRedirect("", leaderID, leaderAddr)
}

// groupRedirect is redirectError for the leader of a data group: its
// ErrorInfo also names the group (metadata group), so a client that
// follows redirects per queue knows whose leader it was told of.
func groupRedirect(group, leaderID, leaderAddr string) error {
	if leaderID == "" || leaderAddr == "" {
		info := &errdetails.ErrorInfo{Reason: ReasonNoLeader, Domain: errorDomain}
		if group != "" {
			info.Metadata = map[string]string{"group": group}
		}
		st, _ := status.New(codes.Unavailable, "no leader elected yet").WithDetails(info)
		return st.Err()
	}
	md := map[string]string{"leader_id": leaderID, "leader_addr": leaderAddr}
	msg := fmt.Sprintf("not the leader; the leader is %s at %s", leaderID, leaderAddr)
	if group != "" {
		md["group"] = group
		msg = fmt.Sprintf("not the leader of group %s; its leader is %s at %s", group, leaderID, leaderAddr)
	}
	st, _ := status.New(codes.Unavailable, msg).WithDetails(&errdetails.ErrorInfo{
		Reason:   ReasonNotLeader,
		Domain:   errorDomain,
		Metadata: md,
	})
	return st.Err()
}

// notOwnerError is the Unavailable status of a node whose placement is
// older than the caller's (or that holds no replica of the group a call
// was sent to it for): NOT_OWNER with this node's placement_version, so
// the caller retries elsewhere or later instead of trusting a stale map.
func notOwnerError(msg, group string, version uint64) error {
	md := map[string]string{"placement_version": strconv.FormatUint(version, 10)}
	if group != "" {
		md["group"] = group
	}
	st, _ := status.New(codes.Unavailable, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonNotOwner, Domain: errorDomain, Metadata: md,
	})
	return st.Err()
}
