package transport

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/raftq/raftq/auth"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streamWindow bounds the requests of one EnqueueStream being served at
// once. Past it the server stops reading, and HTTP/2 flow control holds the
// client back instead of the server buffering without bound.
const streamWindow = 4096

// EnqueueStream serves each request like a unary Enqueue (same
// authorisation, validation, forwarding from a follower, coalescing into
// Raft entries) and
// answers it with its seq as soon as it commits. Responses go out in
// completion order: one slow request does not hold back the others.
func (s brokerService) EnqueueStream(stream raftqv1.Broker_EnqueueStreamServer) error {
	ctx := stream.Context()
	out := make(chan *raftqv1.EnqueueStreamResponse, 256)
	sent := make(chan error, 1)
	go func() {
		// grpc allows one sender per stream. After a failed Send (the
		// client went away) keep draining so no request goroutine blocks.
		var err error
		for resp := range out {
			if err == nil {
				err = stream.Send(resp)
			}
		}
		sent <- err
	}()

	// Recv runs in its own goroutine so that a stopping server can end
	// the stream (Stop would otherwise wait on it until its deadline).
	reqs := make(chan *raftqv1.EnqueueStreamRequest)
	recvDone := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				recvDone <- ctx.Err()
				return
			}
		}
	}()

	slots := make(chan struct{}, streamWindow)
	var serving sync.WaitGroup
	var endErr error
loop:
	for {
		var req *raftqv1.EnqueueStreamRequest
		select {
		case req = <-reqs:
		case err := <-recvDone:
			if !errors.Is(err, io.EOF) {
				endErr = toStatus(err)
			}
			break loop
		case <-s.stopping:
			// Requests not yet read are retried by the client elsewhere;
			// the ones being served still get their answers first.
			endErr = status.Error(codes.Unavailable, "server stopping")
			break loop
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			endErr = toStatus(ctx.Err())
			break loop
		}
		serving.Add(1)
		go func() {
			defer serving.Done()
			out <- s.serveStreamed(ctx, req)
			<-slots
		}()
	}
	serving.Wait()
	close(out)
	sendErr := <-sent
	if endErr != nil {
		return endErr
	}
	return sendErr
}

// serveStreamed runs one streamed request and turns its outcome into a
// response; an error travels as the google.rpc.Status a unary call would
// have returned, details (the NOT_LEADER redirect) included.
func (s brokerService) serveStreamed(ctx context.Context, req *raftqv1.EnqueueStreamRequest) *raftqv1.EnqueueStreamResponse {
	resp := &raftqv1.EnqueueStreamResponse{Seq: req.Seq}
	var err error
	switch {
	case req.Request == nil:
		err = invalid("request: an EnqueueRequest is required")
	default:
		// Authorised here, not when the stream reads it: a refused
		// request changes nothing and gets its PERMISSION_DENIED as its
		// own answer, and the stream goes on for the caller's others.
		if err = auth.CheckStreamed(ctx, req); err != nil {
			break
		}
		var out any
		out, err = s.atLeader(ctx, raftqv1.Broker_Enqueue_FullMethodName, req.Request, func(ctx context.Context, r any) (any, error) {
			return s.Enqueue(ctx, r.(*raftqv1.EnqueueRequest))
		})
		if err == nil {
			resp.Response = out.(*raftqv1.EnqueueResponse)
		}
	}
	code := codes.OK
	if err != nil {
		st := status.Convert(toStatus(err))
		code = st.Code()
		resp.Error = st.Proto()
	}
	s.metrics.streamed(code)
	return resp
}
