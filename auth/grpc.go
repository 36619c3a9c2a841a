package auth

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rule is what one method needs.
type rule struct {
	perm  fsm.Perm
	admin bool
	// queue names the queue a request addresses (perm is checked on it).
	queue func(req any) string
	// others lists the further queues a request names (a dead-letter
	// queue), each with the permission the caller needs on it: a field
	// that names a second queue acts on that queue too, so it is checked
	// against that queue's grants, not only the addressed queue's.
	others func(req any) []namedQueue
	// audit: an administrative action, logged with its outcome.
	audit bool
	// target names what an audited request acts on, for the audit line.
	target func(req any) string
	// inHandler marks a stream whose requests are each answered on their
	// own (EnqueueStream): its handler authorises each request with
	// CheckStreamed and answers a refusal as that request's failure, so
	// one refused request does not end the stream for the others.
	inHandler bool
}

type queueNamer interface{ GetQueue() string }
type nameNamer interface{ GetName() string }

func byQueue(req any) string {
	if r, ok := req.(queueNamer); ok {
		return r.GetQueue()
	}
	return ""
}

func byName(req any) string {
	if r, ok := req.(nameNamer); ok {
		return r.GetName()
	}
	return ""
}

// namedQueue is a further queue a request names, the field that names
// it, and what the caller needs on it.
type namedQueue struct {
	field string
	queue string
	perm  fsm.Perm
}

// dlqNamed is the dead-letter queue a CreateQueue or UpdateQueue names,
// when the call would use it: it becomes (or is shared as) a dead-letter
// queue, so the caller needs manage on it (docs/security.md). An update
// whose mask leaves the field out ignores it, and so does this check.
func dlqNamed(req any) []namedQueue {
	var cfg *raftqv1.QueueConfig
	switch r := req.(type) {
	case *raftqv1.CreateQueueRequest:
		cfg = r.GetConfig()
	case *raftqv1.UpdateQueueRequest:
		if m := r.GetUpdateMask().GetPaths(); len(m) > 0 && !slices.Contains(m, "dead_letter_queue") {
			return nil
		}
		cfg = r.GetConfig()
	}
	if d := cfg.GetDeadLetterQueue(); d != "" {
		return []namedQueue{{field: "config.dead_letter_queue", queue: d, perm: fsm.PermManage}}
	}
	return nil
}

func byIdentity(req any) string {
	switch r := req.(type) {
	case *raftqv1.GrantRequest:
		if r.GetAdmin() {
			return r.GetIdentity() + " admin"
		}
		return r.GetIdentity() + " " + r.GetPattern() + " " + strings.Join(r.GetAllow(), ",")
	case *raftqv1.UngrantRequest:
		if r.GetAdmin() {
			return r.GetIdentity() + " admin"
		}
		return r.GetIdentity() + " " + r.GetPattern()
	case *raftqv1.RemoveNodeRequest:
		return r.GetId()
	case *raftqv1.TransferLeadershipRequest:
		return r.GetToId()
	case *raftqv1.SetClusterSettingsRequest:
		// Every setting the call changes, so the audit line says what.
		var set []string
		if r.MaxQueuedBytes != nil {
			set = append(set, "max_queued_bytes="+strconv.FormatInt(r.GetMaxQueuedBytes(), 10))
		}
		if r.MaxQueues != nil {
			set = append(set, "max_queues="+strconv.FormatInt(r.GetMaxQueues(), 10))
		}
		if r.Groups != nil {
			set = append(set, "groups="+strconv.FormatUint(uint64(r.GetGroups()), 10))
		}
		if r.Replicas != nil {
			set = append(set, "replicas="+strconv.FormatUint(uint64(r.GetReplicas()), 10))
		}
		return strings.Join(set, " ")
	case *raftqv1.CreateTokenRequest:
		// The name and identity, never the token (it is in the response,
		// which is never logged).
		id := r.GetIdentity()
		if id == "" {
			id = r.GetName()
		}
		return r.GetName() + " for " + id
	}
	return ""
}

// rules maps each method of ours to what it needs. Methods of other
// services (health checking, reflection) are open; a method of ours that
// is missing here needs the admin role, so a new RPC is closed until it
// is given a rule.
var rules = map[string]rule{
	raftqv1.Broker_CreateQueue_FullMethodName:   {perm: fsm.PermManage, queue: byName, others: dlqNamed, audit: true, target: byName},
	raftqv1.Broker_UpdateQueue_FullMethodName:   {perm: fsm.PermManage, queue: byName, others: dlqNamed, audit: true, target: byName},
	raftqv1.Broker_DeleteQueue_FullMethodName:   {perm: fsm.PermManage, queue: byName, audit: true, target: byName},
	raftqv1.Broker_PurgeQueue_FullMethodName:    {perm: fsm.PermManage, queue: byName, audit: true, target: byName},
	raftqv1.Broker_Redrive_FullMethodName:       {perm: fsm.PermManage, queue: byQueue, audit: true, target: byQueue},
	raftqv1.Broker_PauseQueue_FullMethodName:    {perm: fsm.PermManage, queue: byName, audit: true, target: byName},
	raftqv1.Broker_ResumeQueue_FullMethodName:   {perm: fsm.PermManage, queue: byName, audit: true, target: byName},
	raftqv1.Broker_GetQueue_FullMethodName:      {perm: fsm.PermBrowse, queue: byName},
	raftqv1.Broker_Peek_FullMethodName:          {perm: fsm.PermBrowse, queue: byQueue},
	raftqv1.Broker_GetMessage_FullMethodName:    {perm: fsm.PermBrowse, queue: byQueue},
	raftqv1.Broker_ListConsumers_FullMethodName: {perm: fsm.PermBrowse, queue: byQueue},
	raftqv1.Broker_ListQueues_FullMethodName:    {}, // any identity; the answer is filtered
	raftqv1.Broker_Enqueue_FullMethodName:       {perm: fsm.PermProduce, queue: byQueue},
	raftqv1.Broker_EnqueueStream_FullMethodName: {perm: fsm.PermProduce, queue: func(req any) string {
		if r, ok := req.(*raftqv1.EnqueueStreamRequest); ok {
			return r.GetRequest().GetQueue()
		}
		return ""
	}, inHandler: true},
	raftqv1.Broker_Lease_FullMethodName:       {perm: fsm.PermConsume, queue: byQueue},
	raftqv1.Broker_Ack_FullMethodName:         {perm: fsm.PermConsume, queue: byQueue},
	raftqv1.Broker_Nack_FullMethodName:        {perm: fsm.PermConsume, queue: byQueue},
	raftqv1.Broker_ExtendLease_FullMethodName: {perm: fsm.PermConsume, queue: byQueue},

	raftqv1.Cluster_Status_FullMethodName:             {}, // any identity; details for admins only
	raftqv1.Cluster_RemoveNode_FullMethodName:         {admin: true, audit: true, target: byIdentity},
	raftqv1.Cluster_TransferLeadership_FullMethodName: {admin: true, audit: true, target: byIdentity},
	raftqv1.Cluster_Snapshot_FullMethodName:           {admin: true, audit: true},
	raftqv1.Cluster_Verify_FullMethodName:             {admin: true, audit: true},
	raftqv1.Cluster_Checkpoint_FullMethodName:         {admin: true},
	raftqv1.Cluster_LocalDigest_FullMethodName:        {admin: true},
	raftqv1.Cluster_RecountQueues_FullMethodName:      {admin: true},
	raftqv1.Cluster_RepairCorrupt_FullMethodName:      {admin: true, audit: true},
	raftqv1.Cluster_Leave_FullMethodName:              {admin: true, audit: true},
	raftqv1.Cluster_Backup_FullMethodName:             {admin: true, audit: true}, // every payload and token hash
	raftqv1.Cluster_SetClusterSettings_FullMethodName: {admin: true, audit: true, target: byIdentity},

	raftqv1.Auth_CreateToken_FullMethodName: {admin: true, audit: true, target: byIdentity},
	raftqv1.Auth_RevokeToken_FullMethodName: {admin: true, audit: true, target: byName},
	raftqv1.Auth_Grant_FullMethodName:       {admin: true, audit: true, target: byIdentity},
	raftqv1.Auth_Ungrant_FullMethodName:     {admin: true, audit: true, target: byIdentity},
	raftqv1.Auth_ListAuth_FullMethodName:    {admin: true},
	raftqv1.Auth_WhoAmI_FullMethodName:      {},
}

// ours reports whether a method belongs to one of raftq's services.
func ours(method string) bool { return strings.HasPrefix(method, "/raftq.v1.") }

func ruleFor(method string) (rule, bool) {
	if r, ok := rules[method]; ok {
		return r, true
	}
	if ours(method) {
		return rule{admin: true, audit: true}, true
	}
	return rule{}, false
}

// check authorises one request of method for p.
func (a *Authenticator) check(p *Principal, r rule, req any) error {
	switch {
	case r.admin:
		if !a.IsAdmin(p) {
			return denied(p, "admin", "")
		}
	case r.perm != 0:
		q := r.queue(req)
		if !a.Allowed(p, r.perm, q) {
			return denied(p, r.perm.String(), q)
		}
		if r.others == nil {
			return nil
		}
		for _, o := range r.others(req) {
			if !a.Allowed(p, o.perm, o.queue) {
				return status.Errorf(codes.PermissionDenied, "%s lacks the %s permission on queue %s, which %s names", p.Name, o.perm, o.queue, o.field)
			}
		}
	}
	return nil
}

// Admitted is a unary call AdmitUnary let through; its Finish must see
// the handler's answer. A zero Admitted (a method without a rule:
// health checking, reflection) finishes as a no-op.
type Admitted struct {
	a      *Authenticator // nil: the method has no rule
	p      *Principal
	method string
	req    any
	r      rule
}

// AdmitUnary authenticates and authorises a unary call of method before
// its handler runs (so before anything is read or changed), and returns
// ctx carrying the caller, or the refusal (already audited). The server
// calls it and Admitted.Finish as plain calls from its one unary
// interceptor (no closure per stage and call, as a chain would cost).
func (a *Authenticator) AdmitUnary(ctx context.Context, method string, req any) (context.Context, Admitted, error) {
	r, ok := ruleFor(method)
	if !ok {
		return ctx, Admitted{}, nil // health checking, reflection
	}
	p, err := a.Authenticate(ctx)
	if err == nil {
		err = a.check(p, r, req)
	}
	if err != nil {
		if r.audit {
			a.audit(ctx, p, method, r, req, err)
		}
		return ctx, Admitted{}, err
	}
	return WithPrincipal(ctx, p), Admitted{a: a, p: p, method: method, req: req, r: r}, nil
}

// Finish is AdmitUnary's second half: it audits an administrative
// call's outcome and trims a list or status answer to what the caller may
// see.
func (c Admitted) Finish(ctx context.Context, resp any, err error) (any, error) {
	if c.a == nil {
		return resp, err
	}
	if c.r.audit {
		c.a.audit(ctx, c.p, c.method, c.r, c.req, err)
	}
	if err != nil {
		return resp, err
	}
	return c.a.filter(c.p, resp), nil
}

// filter trims an answer to what p may see.
func (a *Authenticator) filter(p *Principal, resp any) any {
	switch r := resp.(type) {
	case *raftqv1.ListQueuesResponse:
		if a.IsAdmin(p) {
			return r
		}
		out := &raftqv1.ListQueuesResponse{NextPageToken: r.GetNextPageToken()}
		for _, q := range r.GetQueues() {
			if a.Allowed(p, fsm.PermBrowse, q.GetName()) {
				out.Queues = append(out.Queues, q)
			}
		}
		return out
	case *raftqv1.StatusResponse:
		if a.IsAdmin(p) {
			return r
		}
		// Enough to find the leader and the other nodes' API addresses
		// (what clients need), nothing of indexes, versions or the
		// internal ports. Withheld says so, so that a client does not show
		// the missing fields as zeros (term 0 reads as a broken cluster).
		out := &raftqv1.StatusResponse{LeaderId: r.GetLeaderId(), LeaderAddr: r.GetLeaderAddr(), Withheld: true}
		for _, n := range r.GetNodes() {
			out.Nodes = append(out.Nodes, &raftqv1.Node{Id: n.GetId(), GrpcAddr: n.GetGrpcAddr(), Suffrage: n.GetSuffrage(), State: n.GetState(), Healthy: n.GetHealthy()})
		}
		return out
	}
	return resp
}

// StreamInterceptor authenticates a stream before its handler runs and
// authorises every request received on it (an EnqueueStream may name a
// different queue in each).
func (a *Authenticator) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	r, ok := ruleFor(info.FullMethod)
	if !ok {
		return handler(srv, ss)
	}
	p, err := a.Authenticate(ss.Context())
	if err != nil {
		return err
	}
	if r.admin && !a.IsAdmin(p) {
		return denied(p, "admin", "")
	}
	ctx := WithPrincipal(ss.Context(), p)
	if r.inHandler {
		ctx = context.WithValue(ctx, streamCheckKey{}, func(req any) error { return a.check(p, r, req) })
	}
	return handler(srv, &checkedStream{ServerStream: ss, ctx: ctx, a: a, p: p, r: r})
}

type streamCheckKey struct{}

// CheckStreamed authorises one request received on a stream whose
// handler answers each request on its own (EnqueueStream), in the
// stream's context: nil when the caller may make it, else the
// PERMISSION_DENIED a unary call would get. A context that did not come
// through StreamInterceptor is refused, so a handler served without the
// interceptor fails closed.
func CheckStreamed(ctx context.Context, req any) error {
	check, ok := ctx.Value(streamCheckKey{}).(func(any) error)
	if !ok {
		return status.Error(codes.PermissionDenied, "request not authorised: the stream did not pass the authenticator")
	}
	return check(req)
}

type checkedStream struct {
	grpc.ServerStream
	ctx context.Context
	a   *Authenticator
	p   *Principal
	r   rule
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.r.inHandler {
		return nil // the handler checks it (CheckStreamed)
	}
	return s.a.check(s.p, s.r, m)
}

// audit writes one structured line per administrative call: who, what,
// on what, and how it ended. It never includes a token: requests are
// summarised by target, and responses are never logged.
func (a *Authenticator) audit(ctx context.Context, p *Principal, method string, r rule, req any, err error) {
	who, kind := "", ""
	if p != nil {
		who, kind = p.Name, string(p.Kind)
	}
	target := ""
	if r.target != nil {
		target = r.target(req)
	}
	via := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		via = first(md, "raftq-forwarded-by")
	}
	a.log.LogAttrs(ctx, auditLevel(err), "audit",
		slog.String("identity", who), slog.String("kind", kind),
		slog.String("action", method[strings.LastIndexByte(method, '/')+1:]),
		slog.String("service", serviceOf(method)), slog.String("target", target),
		slog.String("result", status.Code(err).String()), slog.String("forwarded_by", via))
}

func serviceOf(method string) string {
	s := strings.TrimPrefix(method, "/raftq.v1.")
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

func auditLevel(err error) slog.Level {
	if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// errNoPrincipal refuses a request that reached Authorize without a
// caller.
var errNoPrincipal = status.Error(codes.PermissionDenied, "request not authorised: no authenticated caller (the handler was reached without the authentication middleware)")

// Authorize checks what the interceptor checks for one request of method,
// for callers that reach a method's handler by another way than gRPC (the
// dashboard on the HTTP port). The caller is the principal in ctx, which
// the HTTP middleware set (with auth off, an anonymous admin). A ctx
// without one is refused: a handler mounted without the middleware fails
// closed instead of serving everyone. (The dashboard's background
// sampling reads only the local queue list, through Filter, and never
// calls Authorize.)
func (a *Authenticator) Authorize(ctx context.Context, method string, req any) error {
	p := PrincipalFrom(ctx)
	if p == nil {
		return errNoPrincipal
	}
	r, ok := ruleFor(method)
	if !ok {
		return nil
	}
	err := a.check(p, r, req)
	if r.audit {
		a.audit(ctx, p, method, r, req, err)
	}
	return err
}

// Filter trims an answer of a list or status method to what the caller in
// ctx may see (as the interceptor does); without a caller it is unchanged.
func (a *Authenticator) Filter(ctx context.Context, resp any) any {
	p := PrincipalFrom(ctx)
	if p == nil {
		return resp
	}
	return a.filter(p, resp)
}
