package cluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's TCP stream layer, except that it tracks every
// connection it accepts or dials and closes them all on Close. raft's own
// TCPStreamLayer leaves inbound connection handlers blocked in Read until
// the peer closes its end, so a stopped node would keep goroutines and
// sockets until its peers noticed.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer listens on bind; advertise (nil = the bound address) must
// be a specific address others can dial.
func newStreamLayer(ctx context.Context, bind string, advertise net.Addr) (*streamLayer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if ta, ok := advertise.(*net.TCPAddr); !ok || ta.IP == nil || ta.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %s is not advertisable: set the advertise address", advertise)
	}
	return &streamLayer{ln: ln, advertise: advertise, conns: map[*trackedConn]struct{}{}}, nil
}

func (s *streamLayer) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", string(addr))
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[*trackedConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
	return s.ln.Close()
}

type trackedConn struct {
	net.Conn
	s *streamLayer
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}
