package client

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// errStreamUnsupported says the node has no EnqueueStream (an older
// broker): the call goes as a unary Enqueue instead.
var errStreamUnsupported = errors.New("raftq client: node does not serve EnqueueStream")

// enqueueMux carries the concurrent Enqueue calls a Client makes to one node
// over one EnqueueStream, so a producer with many calls outstanding pays a
// stream message per call instead of a unary RPC (HTTP/2 stream, headers,
// server goroutine) per call; profiles of the leader put that per-call cost
// at a quarter of its CPU. Each call keeps its own context and retries: it
// waits for the response carrying its seq, and a broken stream fails the
// calls waiting on it with the stream's error, which the retry loop treats
// like the failure of a unary attempt.
type enqueueMux struct {
	cc *grpc.ClientConn

	mu     sync.Mutex
	cur    *muxStream // nil: open one on the next call
	unary  bool       // the node answered Unimplemented
	closed bool
	ctx    context.Context // parent of every stream, cancelled by close
	cancel context.CancelFunc
}

func newEnqueueMux(cc *grpc.ClientConn) *enqueueMux {
	ctx, cancel := context.WithCancel(context.Background())
	return &enqueueMux{cc: cc, ctx: ctx, cancel: cancel}
}

// muxStream is one EnqueueStream and the calls waiting on it.
type muxStream struct {
	sendq chan *raftqv1.EnqueueStreamRequest
	done  chan struct{} // closed when the stream is dead; err says why

	mu      sync.Mutex
	nextSeq uint64
	pending map[uint64]chan *raftqv1.EnqueueStreamResponse
	err     error
}

// enqueue runs one Enqueue attempt on the node's stream.
func (m *enqueueMux) enqueue(ctx context.Context, req *raftqv1.EnqueueRequest, resp *raftqv1.EnqueueResponse) error {
	s, err := m.stream()
	if err != nil {
		return m.fallback(ctx, err, req, resp)
	}
	seq, ch, err := s.register()
	if err != nil {
		return m.fallback(ctx, err, req, resp)
	}
	select {
	case s.sendq <- &raftqv1.EnqueueStreamRequest{Seq: seq, Request: req}:
	case <-s.done:
		s.forget(seq)
		return m.fallback(ctx, s.failure(), req, resp)
	case <-ctx.Done():
		s.forget(seq)
		return status.FromContextError(ctx.Err()).Err()
	}
	select {
	case r := <-ch:
		return answer(r, resp)
	case <-s.done:
		select {
		case r := <-ch: // answered just before the stream ended
			return answer(r, resp)
		default:
		}
		// The stream broke after the request went out: it may or may not
		// have committed, which the message's dedup id makes safe to retry.
		return m.fallback(ctx, s.failure(), req, resp)
	case <-ctx.Done():
		s.forget(seq)
		return status.FromContextError(ctx.Err()).Err()
	}
}

// answer turns a streamed response into the unary call's result.
func answer(r *raftqv1.EnqueueStreamResponse, resp *raftqv1.EnqueueResponse) error {
	if r.Error != nil {
		return status.ErrorProto(r.Error)
	}
	resp.MessageIds = r.GetResponse().GetMessageIds()
	return nil
}

// fallback turns "the node has no EnqueueStream" into a unary attempt and
// passes every other stream failure on.
func (m *enqueueMux) fallback(ctx context.Context, err error, req *raftqv1.EnqueueRequest, resp *raftqv1.EnqueueResponse) error {
	if errors.Is(err, errStreamUnsupported) {
		return m.cc.Invoke(ctx, raftqv1.Broker_Enqueue_FullMethodName, req, resp)
	}
	return err
}

// stream returns the live stream, opening one if there is none.
func (m *enqueueMux) stream() (*muxStream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return nil, ErrClosed
	case m.unary:
		return nil, errStreamUnsupported
	case m.cur != nil:
		return m.cur, nil
	}
	s := &muxStream{
		sendq:   make(chan *raftqv1.EnqueueStreamRequest, 256),
		done:    make(chan struct{}),
		pending: make(map[uint64]chan *raftqv1.EnqueueStreamResponse),
	}
	m.cur = s
	go m.run(s)
	return s, nil
}

// run opens the stream and serves it until it ends. Opening happens here,
// not under the caller's context: the stream outlives the call that opened
// it, and NewStream waits while the connection is still being made (a hung
// node), which each caller must be able to stop waiting for on its own.
func (m *enqueueMux) run(s *muxStream) {
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	st, err := raftqv1.NewBrokerClient(m.cc).EnqueueStream(ctx)
	if err != nil {
		m.ended(s, err)
		return
	}
	go s.send(st, cancel)
	for {
		r, err := st.Recv()
		if err != nil {
			m.ended(s, err)
			return
		}
		s.mu.Lock()
		ch, ok := s.pending[r.Seq]
		delete(s.pending, r.Seq)
		s.mu.Unlock()
		if ok {
			ch <- r // buffered: never blocks
		}
	}
}

// ended retires a dead stream, failing every call waiting on it with the
// reason (a node without EnqueueStream switches the mux to unary calls).
func (m *enqueueMux) ended(s *muxStream, err error) {
	m.mu.Lock()
	if m.cur == s {
		m.cur = nil
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		m.unary = true
		err = errStreamUnsupported
	case m.closed:
		err = ErrClosed
	case errors.Is(err, io.EOF):
		// The server ended the stream with OK, which it does only after
		// the client closes its side: treat it as a lost stream, so the
		// calls on it are retried rather than failed.
		err = status.Error(codes.Unavailable, "raftq client: enqueue stream ended by the server")
	}
	m.mu.Unlock()
	s.fail(err)
}

// send is the stream's only sender (grpc allows one). A failed Send ends
// the stream; Recv in run then reports why.
func (s *muxStream) send(st raftqv1.Broker_EnqueueStreamClient, cancel context.CancelFunc) {
	for {
		select {
		case req := <-s.sendq:
			if err := st.Send(req); err != nil {
				cancel()
				return
			}
		case <-s.done:
			return
		}
	}
}

func (s *muxStream) register() (uint64, chan *raftqv1.EnqueueStreamResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, nil, s.err
	}
	s.nextSeq++
	ch := make(chan *raftqv1.EnqueueStreamResponse, 1)
	s.pending[s.nextSeq] = ch
	return s.nextSeq, ch, nil
}

func (s *muxStream) forget(seq uint64) {
	s.mu.Lock()
	delete(s.pending, seq)
	s.mu.Unlock()
}

func (s *muxStream) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.pending = nil
	s.mu.Unlock()
	close(s.done)
}

func (s *muxStream) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// close ends the mux's stream; calls waiting on it fail with ErrClosed.
func (m *enqueueMux) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
}
