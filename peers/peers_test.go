package peers

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// statusServer answers Status at once.
type statusServer struct {
	raftqv1.UnimplementedClusterServer
}

func (statusServer) Status(context.Context, *raftqv1.StatusRequest) (*raftqv1.StatusResponse, error) {
	return &raftqv1.StatusResponse{LeaderId: "n1"}, nil
}

// blackHole relays TCP connections to a backend; cut makes every
// connection open at that moment drop whatever either side sends from then
// on, for good, without closing it: a partition whose TCP retransmissions
// never get through. Connections made after cut relay normally.
type blackHole struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	cuts    []chan struct{} // one per open connection, closed by cut
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newBlackHole(t *testing.T, backend string) *blackHole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln, backend: backend}
	b.wg.Go(b.accept)
	t.Cleanup(b.close)
	return b
}

func (b *blackHole) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", b.backend)
		if err != nil {
			c.Close()
			continue
		}
		cut := make(chan struct{})
		b.mu.Lock()
		b.cuts = append(b.cuts, cut)
		b.conns = append(b.conns, c, up)
		b.mu.Unlock()
		b.wg.Go(func() { relay(up, c, cut) })
		b.wg.Go(func() { relay(c, up, cut) })
	}
}

// relay copies from src to dst until src ends, discarding once cut.
func relay(dst, src net.Conn, cut chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-cut:
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

func (b *blackHole) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cuts {
		close(c)
	}
	b.cuts = nil
}

func (b *blackHole) close() {
	b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// TestPoolRedialsAConnectionABlackHoleKeeps: a peer connection that a
// partition left black-holed (open, every packet dropped) is given up
// once a keepalive ping goes unanswered, and the next call dials afresh
// and succeeds; without keepalive every call on it ran to its deadline
// for as long as the connection lived.
func TestPoolRedialsAConnectionABlackHoleKeeps(t *testing.T) {
	base := runtime.NumGoroutine()
	t.Cleanup(func() { harness.CheckNoLeaks(t, base) }) // last: after the relay's own cleanup
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}))
	raftqv1.RegisterClusterServer(srv, statusServer{})
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { srv.Stop(); <-served }()

	bh := newBlackHole(t, ln.Addr().String())
	p := New(nil, nil)
	// grpc-go pings no sooner than 10 s of silence; the answer is awaited
	// 1 s here (5 s in production) to keep the test short.
	p.keepalive.Timeout = time.Second
	defer p.Close()
	conn, err := p.Get("n2", bh.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	call := func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := raftqv1.NewClusterClient(conn).Status(cctx, &raftqv1.StatusRequest{LocalOnly: true})
		return err
	}
	if err := call(t.Context()); err != nil {
		t.Fatalf("before the partition: %v", err)
	}
	bh.cut()
	if err := call(t.Context()); err == nil {
		t.Fatal("a call on the black-holed connection succeeded: the proxy does not cut")
	}
	if err := harness.WaitFor(t.Context(), 40*time.Second, 200*time.Millisecond, call); err != nil {
		t.Fatalf("the pool kept the black-holed connection: %v", err)
	}
}
