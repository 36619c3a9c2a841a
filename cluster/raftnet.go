package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// leaveByte opens an authenticated leave on the Raft port instead of a
// Raft RPC (whose type bytes are small integers): the dialling node, known
// by its node certificate, announces that it is leaving.
const leaveByte = 0xF0

// tlsAcceptTimeout bounds a connection's TLS handshake and its first
// byte. Raft writes an RPC as soon as it has dialled, so only a silent or
// refused peer meets it.
const tlsAcceptTimeout = 10 * time.Second

// streamLayer is raft's TCP stream layer, except that it tracks every
// connection it accepts or dials and closes them all on Close. raft's own
// TCPStreamLayer leaves inbound connection handlers blocked in Read until
// the peer closes its end, so a stopped node would keep goroutines and
// sockets until its peers noticed.
//
// With TLS (Config.TLS) every connection is mutual TLS: an accepted peer
// must present a node certificate, a dial accepts only the node
// certificate of the server id at that address in the Raft configuration,
// and the port also takes authenticated leaves (leaveByte).
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr

	tls *TLS
	log *slog.Logger
	// raft is set once Raft exists: dials look up the server id of an
	// address in its latest configuration.
	raft atomic.Pointer[raft.Raft]
	// onLeave hears an authenticated leave of a node; set once
	// membership exists (until then a leave is refused).
	onLeave atomic.Pointer[func(id string)]
	// accepted carries TLS connections whose handshake and first byte
	// arrived, to Accept.
	accepted chan net.Conn
	done     chan struct{} // closed by Close
	wg       sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}

	// cut: the Raft network is cut off on purpose (test builds only,
	// Node.CutRaftNetwork): no dial succeeds and every accepted
	// connection is closed at once.
	cut atomic.Bool
	// held: the Raft network of this node is held (test builds only,
	// Node.HoldRaftNetwork): reads and writes wait until it is released
	// (the channel closed), as a stopped process's do; heldData counts
	// the reads held with their data already in hand.
	// heldIn holds reads on the connections peers dialled, heldOut on
	// the ones this node dialled, heldW every write.
	heldIn, heldOut, heldW atomic.Pointer[chan struct{}]
	heldData               atomic.Int64
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// errCut: the Raft network of this node is cut off (a test's fault).
var errCut = errors.New("raft: the network of this node is cut off (test fault)")

// newStreamLayer listens on bind; advertise (nil = the bound address) must
// be a specific address others can dial. tlsCfg nil: plain TCP.
func newStreamLayer(ctx context.Context, bind string, advertise net.Addr, tlsCfg *TLS, log *slog.Logger) (*streamLayer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if ta, ok := advertise.(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) || !ok && !isNamedAddr(advertise) {
		ln.Close()
		return nil, fmt.Errorf("raft address %s is not advertisable: set the advertise address", advertise)
	}
	s := &streamLayer{ln: ln, advertise: advertise, tls: tlsCfg, log: log, conns: map[net.Conn]struct{}{},
		accepted: make(chan net.Conn), done: make(chan struct{})}
	if tlsCfg != nil {
		s.wg.Add(1)
		go s.acceptLoop()
	}
	return s, nil
}

// namedAddr is an advertised Raft address by host name (host:port), kept
// as the name in the Raft configuration; dials resolve it each time.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

func isNamedAddr(a net.Addr) bool { _, ok := a.(namedAddr); return ok }

// track records c so Close closes it; it fails once closed.
func (s *streamLayer) track(c net.Conn, inbound bool) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, s: s, inbound: inbound}
	s.conns[tc] = struct{}{}
	return tc, nil
}

func (s *streamLayer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *streamLayer) Accept() (net.Conn, error) {
	for {
		var c net.Conn
		if s.tls == nil {
			var err error
			if c, err = s.ln.Accept(); err != nil {
				return nil, err
			}
		} else {
			select {
			case c = <-s.accepted:
			case <-s.done:
				return nil, net.ErrClosed
			}
		}
		if s.cut.Load() {
			c.Close()
			continue
		}
		if s.tls != nil {
			return c, nil // tracked by acceptLoop
		}
		return s.track(c, true)
	}
}

// acceptLoop accepts TLS connections and hands each to its own
// goroutine, so a slow or hostile peer cannot hold up the others.
func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond): // e.g. out of file descriptors
			}
			continue
		}
		tc, err := s.track(tls.Server(c, s.tls.Server), true)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go s.serveConn(tc)
	}
}

// serveConn completes the handshake (which refuses anything but a node
// certificate of the CA), reads the first byte, and either takes an
// authenticated leave or passes the connection to Raft with the byte put
// back.
func (s *streamLayer) serveConn(c net.Conn) {
	defer s.wg.Done()
	_ = c.SetDeadline(time.Now().Add(tlsAcceptTimeout))
	tc := c.(*trackedConn).Conn.(*tls.Conn)
	if err := tc.Handshake(); err != nil {
		// The config's verifier logged why a certificate was refused.
		s.log.Debug("raft: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		c.Close() // a probe (voter admission) or a peer that hung up
		return
	}
	_ = c.SetDeadline(time.Time{})
	if first[0] == leaveByte {
		defer c.Close()
		name, ok := s.tls.PeerName(tc.ConnectionState())
		onLeave := s.onLeave.Load()
		if !ok || onLeave == nil {
			return
		}
		s.log.Info("node announced its leave over mutual TLS", "id", name)
		(*onLeave)(name)
		_ = c.SetDeadline(time.Now().Add(tlsAcceptTimeout))
		_, _ = c.Write([]byte{1})
		return
	}
	select {
	case s.accepted <- &prefixConn{Conn: c, first: first[0], pending: true}:
	case <-s.done:
		c.Close()
	}
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.cut.Load() {
		return nil, errCut
	}
	if s.tls == nil {
		d := net.Dialer{Timeout: timeout}
		c, err := d.Dial("tcp", string(addr))
		if err != nil {
			return nil, err
		}
		return s.track(c, false)
	}
	id, ok := s.idOf(addr)
	if !ok {
		return nil, fmt.Errorf("raft: no single server at %s in the configuration: cannot tell which node certificate to expect", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := s.dialNode(ctx, id, string(addr))
	if err != nil {
		return nil, err
	}
	return s.track(c, false)
}

// idOf names the one server at addr in the latest Raft configuration.
func (s *streamLayer) idOf(addr raft.ServerAddress) (string, bool) {
	r := s.raft.Load()
	if r == nil {
		return "", false
	}
	servers, err := latestServers(r)
	if err != nil {
		return "", false
	}
	id, n := "", 0
	for _, sv := range servers {
		if sv.Address == addr {
			id, n = string(sv.ID), n+1
		}
	}
	return id, n == 1
}

// dialNode dials node id at addr over mutual TLS, handshake included.
func (s *streamLayer) dialNode(ctx context.Context, id, addr string) (net.Conn, error) {
	d := tls.Dialer{Config: s.tls.Dial(id)}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raft: dial node %s at %s: %w", id, addr, err)
	}
	return c, nil
}

// checkNode proves that node id answers at addr with its node
// certificate: the leader's check before making a gossip member a voter.
func (s *streamLayer) checkNode(ctx context.Context, id, addr string) error {
	c, err := s.dialNode(ctx, id, addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// sendLeave tells node id at addr, over mutual TLS, that this node is
// leaving; it returns once id acknowledged.
func (s *streamLayer) sendLeave(ctx context.Context, id, addr string) error {
	c, err := s.dialNode(ctx, id, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := c.Write([]byte{leaveByte}); err != nil {
		return fmt.Errorf("raft: leave to %s: %w", id, err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("raft: leave to %s: no acknowledgement: %w", id, err)
	}
	return nil
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	err := s.ln.Close()
	for c := range conns {
		c.(*trackedConn).Conn.Close()
	}
	s.wg.Wait()
	return err
}

type trackedConn struct {
	net.Conn
	s       *streamLayer
	inbound bool // accepted, not dialled
}

// Read holds what it read while the network is held, so a peer's
// answer waits as it would in a stopped process's socket.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.s.waitHeld(c.inbound, true)
	}
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.s.waitHeld(c.inbound, false)
	return c.Conn.Write(p)
}

// waitHeld returns at once unless the network is held (a test's fault).
func (s *streamLayer) waitHeld(inbound, data bool) {
	h := s.heldW.Load()
	switch {
	case data && inbound:
		h = s.heldIn.Load()
	case data:
		h = s.heldOut.Load()
	}
	if h == nil {
		return
	}
	if data {
		s.heldData.Add(1)
		defer s.heldData.Add(-1)
	}
	select {
	case <-*h:
	case <-s.done:
	}
}

func (c *trackedConn) Close() error {
	c.s.untrack(c)
	return c.Conn.Close()
}

// prefixConn returns first before the rest of the connection.
type prefixConn struct {
	net.Conn
	first   byte
	pending bool
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.pending && len(p) > 0 {
		c.pending = false
		p[0] = c.first
		return 1, nil
	}
	return c.Conn.Read(p)
}

// Close closes the tracked connection underneath.
func (c *prefixConn) Close() error { return c.Conn.Close() }
