package raftmux

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// acceptTimeout bounds an accepted connection's TLS handshake and its
// opening bytes. Raft writes an RPC as soon as it has dialled, so only a
// silent or refused peer meets it.
const acceptTimeout = 10 * time.Second

// TLS is what the port needs to speak mutual TLS. The configs carry the
// verification; this package only asks for a node's name.
type TLS struct {
	// Server must require a node certificate of the cluster's CA.
	Server *tls.Config
	// Dial returns the config for dialling node id: it presents this
	// node's certificate and must accept only id's node certificate.
	Dial func(id string) *tls.Config
	// PeerName names the node of a connection Server accepted.
	PeerName func(tls.ConnectionState) (string, bool)
}

// Config configures a Mux.
type Config struct {
	// TLS nil: plain TCP.
	TLS *TLS
	Log *slog.Logger
	// Legacy is the group that connections without a preamble belong to
	// (the one group of builds before the multiplexer).
	Legacy string
}

// Peers is what a group's layer is told of the nodes it dials.
type Peers struct {
	// IDOf names the one server at an address in the group's Raft
	// configuration: with TLS a dial accepts only that node's
	// certificate (raft's Dial is given only the address). nil: none is
	// known.
	IDOf func(raft.ServerAddress) (string, bool)
	// Preambles reports whether the node at addr understands preambles
	// (its gossip says so). Until it does, only the legacy group can
	// reach it, without a preamble. nil: no node does.
	Preambles func(addr raft.ServerAddress) bool
}

// ErrCut: the Raft network of this node is cut off (a test's fault).
var ErrCut = errors.New("raft: the network of this node is cut off (test fault)")

// ErrGroupCut: this group's Raft network is cut off (Layer.Cut: the group
// is quarantined, or a test's fault); the port's other groups are not.
var ErrGroupCut = errors.New("raft: the network of this group is cut off")

// Mux serves the groups registered with it on one listener. It tracks
// every connection it accepts or dials and closes them all on Close
// (raft's own TCPStreamLayer leaves inbound handlers blocked in Read until
// the peer hangs up).
type Mux struct {
	ln        net.Listener
	advertise net.Addr
	cfg       Config
	log       *slog.Logger

	onLeave atomic.Pointer[func(id string)]
	cut     atomic.Bool
	// held[i]: the part 1<<i of the traffic is held until the channel
	// closes (Hold); heldReads counts the reads waiting, data in hand.
	held      [trafficParts]atomic.Pointer[chan struct{}]
	heldReads atomic.Int64

	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
	groups map[string]*Layer
}

// New serves ln (advertised as advertise, nil = ln's address) until
// Close. The Mux owns ln.
func New(ln net.Listener, advertise net.Addr, cfg Config) (*Mux, error) {
	if err := ValidGroupID(cfg.Legacy); err != nil {
		ln.Close()
		return nil, fmt.Errorf("raftmux: legacy group: %w", err)
	}
	if cfg.TLS != nil && (cfg.TLS.Server == nil || cfg.TLS.Dial == nil || cfg.TLS.PeerName == nil) {
		ln.Close()
		return nil, errors.New("raftmux: TLS needs Server, Dial and PeerName")
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m := &Mux{ln: ln, advertise: advertise, cfg: cfg, log: cfg.Log, done: make(chan struct{}),
		conns: map[*trackedConn]struct{}{}, groups: map[string]*Layer{}}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// Addr is the advertised address.
func (m *Mux) Addr() net.Addr { return m.advertise }

// Register returns group's stream layer, which dials as peers says. Each
// group registers itself (a Raft group's runtime, as it opens), so the
// port can be built before any group exists.
func (m *Mux) Register(group string, peers Peers) (*Layer, error) {
	if err := ValidGroupID(group); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, net.ErrClosed
	}
	if _, ok := m.groups[group]; ok {
		return nil, fmt.Errorf("raftmux: group %q is registered already", group)
	}
	l := &Layer{m: m, group: group, peers: peers, accepted: make(chan handoff), done: make(chan struct{})}
	m.groups[group] = l
	return l, nil
}

// OnLeave sets who hears an authenticated leave (until set, and without
// TLS, a leave is refused).
func (m *Mux) OnLeave(f func(id string)) { m.onLeave.Store(&f) }

// Cut cuts every group's Raft network off (true) or mends it: while cut
// no group dials and every connection accepted for a group is closed at
// once; a cut closes every connection there is. A leave and the node
// check (CheckNode) still go through: a cut node still proves itself and
// announces or hears a leave. It is a test's fault (raftgroup's
// Faults.CutRaftNetwork, the node's whole Raft network at once); a
// quarantine cuts its own group alone (Layer.Cut). The two are
// independent: a group is reachable only while neither is cut.
func (m *Mux) Cut(cut bool) {
	m.cut.Store(cut)
	if cut {
		m.closeConns(nil)
	}
}

// Close stops accepting, closes every connection and waits for the
// goroutines it started.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	conns := m.conns
	m.conns = map[*trackedConn]struct{}{}
	m.mu.Unlock()
	err := m.ln.Close()
	for c := range conns {
		c.Conn.Close()
	}
	m.wg.Wait()
	return err
}

// track tracks c: an accepted one (layer nil: its group is known once its
// opening is read) or one layer dialled. A dial that a cut overtook is
// closed here: the cut stores its flag before it takes the lock to close
// what is tracked, so either it sees this connection or this sees it.
func (m *Mux) track(c net.Conn, inbound bool, layer *Layer) (*trackedConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	if layer != nil && (m.cut.Load() || layer.cut.Load()) {
		c.Close()
		if m.cut.Load() {
			return nil, ErrCut
		}
		return nil, ErrGroupCut
	}
	tc := &trackedConn{Conn: c, m: m, inbound: inbound, layer: layer}
	m.conns[tc] = struct{}{}
	return tc, nil
}

// closeConns closes every tracked connection of group l (nil: every
// one).
func (m *Mux) closeConns(l *Layer) {
	m.mu.Lock()
	conns := make([]*trackedConn, 0, len(m.conns))
	for c := range m.conns {
		if l == nil || c.layer == l {
			conns = append(conns, c)
		}
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (m *Mux) untrack(c *trackedConn) {
	m.mu.Lock()
	delete(m.conns, c)
	m.mu.Unlock()
}

// acceptLoop hands each connection to its own goroutine, so a slow or
// hostile peer cannot hold up the others.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-m.done:
				return
			case <-time.After(50 * time.Millisecond): // e.g. out of file descriptors
			}
			continue
		}
		if m.cfg.TLS != nil {
			c = tls.Server(c, m.cfg.TLS.Server)
		}
		tc, err := m.track(c, true, nil)
		if err != nil {
			return
		}
		m.wg.Add(1)
		go m.serveConn(tc)
	}
}

// serveConn completes the handshake (which refuses anything but a node
// certificate of the CA), reads the opening, and takes a leave or hands
// the connection to its group.
func (m *Mux) serveConn(c *trackedConn) {
	defer m.wg.Done()
	_ = c.SetDeadline(time.Now().Add(acceptTimeout))
	if tc, ok := c.Conn.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			// The config's verifier logged why a certificate was refused.
			m.log.Debug("raft: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
	}
	p, err := Decode(c)
	if err != nil {
		if errors.Is(err, ErrBadPreamble) {
			m.log.Debug("raft: bad preamble", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close() // a probe (voter admission), a peer that hung up, or garbage
		return
	}
	_ = c.SetDeadline(time.Time{})
	var conn net.Conn = c
	group := m.cfg.Legacy
	switch p.Kind {
	case KindLeave:
		m.leave(c)
		return
	case KindGroup:
		group = p.Group
	case KindLegacy:
		conn = &prefixConn{trackedConn: c, first: p.First, pending: true}
	}
	if m.cut.Load() {
		c.Close()
		return
	}
	m.mu.Lock()
	l := m.groups[group]
	// From here the connection is the group's: a cut of the group closes
	// it, and one that came before is seen below (Layer.Cut sets the
	// flag, then takes the lock).
	c.layer = l
	m.mu.Unlock()
	if l == nil {
		m.log.Debug("raft: connection for an unknown group", "remote", c.RemoteAddr().String(), "group", group)
		c.Close()
		return
	}
	if l.cut.Load() {
		c.Close()
		return
	}
	select {
	case l.accepted <- handoff{conn: conn, tracked: c}:
	case <-l.done:
		c.Close()
	case <-m.done:
		c.Close()
	}
}

func (m *Mux) leave(c *trackedConn) {
	defer c.Close()
	tc, ok := c.Conn.(*tls.Conn)
	onLeave := m.onLeave.Load()
	if !ok || onLeave == nil {
		return
	}
	name, ok := m.cfg.TLS.PeerName(tc.ConnectionState())
	if !ok {
		return
	}
	m.log.Info("node announced its leave over mutual TLS", "id", name)
	(*onLeave)(name)
	_ = c.SetDeadline(time.Now().Add(acceptTimeout))
	_, _ = c.Write([]byte{1})
}

// dial dials addr, with TLS expecting node id's certificate.
func (m *Mux) dial(ctx context.Context, id, addr string) (net.Conn, error) {
	if m.cfg.TLS == nil {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	d := tls.Dialer{Config: m.cfg.TLS.Dial(id)}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("raft: dial node %s at %s: %w", id, addr, err)
	}
	return c, nil
}

// CheckNode proves that node id answers at addr with its node certificate
// (TLS): the leader's check before making a gossip member a voter.
func (m *Mux) CheckNode(ctx context.Context, id, addr string) error {
	c, err := m.dial(ctx, id, addr)
	if err != nil {
		return err
	}
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return fmt.Errorf("raft: dial node %s at %s: %w", id, addr, err)
		}
	}
	return c.Close()
}

// SendLeave tells node id at addr, over mutual TLS, that this node is
// leaving; it returns once id acknowledged.
func (m *Mux) SendLeave(ctx context.Context, id, addr string) error {
	c, err := m.dial(ctx, id, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := c.Write([]byte{LeaveByte}); err != nil {
		return fmt.Errorf("raft: leave to %s: %w", id, err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("raft: leave to %s: no acknowledgement: %w", id, err)
	}
	return nil
}

// Layer is one group's raft.StreamLayer on the Mux's port.
type Layer struct {
	m        *Mux
	group    string
	peers    Peers
	accepted chan handoff
	done     chan struct{}
	once     sync.Once
	// cut: the group's own cut (Cut), beside the port's.
	cut atomic.Bool
}

var _ raft.StreamLayer = (*Layer)(nil)

// handoff is an accepted connection on its way to the group's Accept.
type handoff struct {
	conn    net.Conn
	tracked *trackedConn
}

// Accept returns the group's next connection. One that a cut closed
// while it waited to be accepted is skipped: raft would only read an
// error from it.
func (l *Layer) Accept() (net.Conn, error) {
	for {
		select {
		case h := <-l.accepted:
			if h.tracked.closed.Load() {
				continue
			}
			return h.conn, nil
		case <-l.done:
		case <-l.m.done:
		}
		return nil, net.ErrClosed
	}
}

// Dial dials the group at addr: with a preamble if the node there
// understands them, else (the legacy group only) without.
func (l *Layer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.m.cut.Load() {
		return nil, ErrCut
	}
	if l.cut.Load() {
		return nil, ErrGroupCut
	}
	preamble := l.peers.Preambles != nil && l.peers.Preambles(addr)
	if !preamble && l.group != l.m.cfg.Legacy {
		return nil, fmt.Errorf("raft: the node at %s does not yet serve group %q (it understands no preamble)", addr, l.group)
	}
	id := ""
	if l.m.cfg.TLS != nil {
		var ok bool
		if l.peers.IDOf != nil {
			id, ok = l.peers.IDOf(addr)
		}
		if !ok {
			return nil, fmt.Errorf("raft: no single server at %s in the configuration: cannot tell which node certificate to expect", addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := l.m.dial(ctx, id, string(addr))
	if err != nil {
		return nil, err
	}
	tc, err := l.m.track(c, false, l)
	if err != nil {
		return nil, err
	}
	if preamble {
		b, _ := Encode(l.group) // valid: Register checked it
		if d, ok := ctx.Deadline(); ok {
			_ = tc.SetWriteDeadline(d)
		}
		if _, err := tc.Write(b); err != nil {
			tc.Close()
			return nil, fmt.Errorf("raft: preamble to %s: %w", addr, err)
		}
		_ = tc.SetWriteDeadline(time.Time{})
	}
	return tc, nil
}

// Addr is the port's advertised address.
func (l *Layer) Addr() net.Addr { return l.m.advertise }

// Cut cuts this group's Raft network off (true) or mends it, as Mux.Cut
// does the port's but for this group alone: while cut the group dials
// nobody, a cut closes every connection of the group there is (dialled,
// accepted, or accepted and waiting for Accept), and every connection
// accepted for the group is closed once its opening is read. The port's
// other groups keep their connections, and a leave and the node check
// go through as ever (they belong to no group). A quarantined group runs
// cut, so a corrupt group leaves the node's others serving. The cut is
// the layer's: a group registered again after Close starts uncut.
func (l *Layer) Cut(cut bool) {
	l.cut.Store(cut)
	if cut {
		l.m.closeConns(l)
	}
}

// Close unregisters the group: its connections waiting for Accept are
// closed, later ones are refused as unknown. The Mux and the group's
// established connections stay (raft closes those it holds).
func (l *Layer) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		if l.m.groups[l.group] == l {
			delete(l.m.groups, l.group)
		}
		l.m.mu.Unlock()
		close(l.done)
	})
	return nil
}

type trackedConn struct {
	net.Conn
	m       *Mux
	inbound bool // accepted, not dialled
	// layer is the group the connection belongs to: the one that dialled
	// it, or the one an accepted connection was handed to (nil until its
	// opening is read). Guarded by m.mu.
	layer *Layer
	// closed: Close was called (by raft, or by a cut).
	closed atomic.Bool
}

// Read holds what it read while the reads are held, so a peer's answer
// waits as it would in a stopped process's socket.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		part := DialledReads
		if c.inbound {
			part = AcceptedReads
		}
		c.m.waitHeld(part)
	}
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.m.waitHeld(Writes)
	return c.Conn.Write(p)
}

func (c *trackedConn) Close() error {
	c.closed.Store(true)
	c.m.untrack(c)
	return c.Conn.Close()
}

// prefixConn returns first before the rest of the connection.
type prefixConn struct {
	*trackedConn
	first   byte
	pending bool
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.pending && len(p) > 0 {
		c.pending = false
		p[0] = c.first
		return 1, nil
	}
	return c.trackedConn.Read(p)
}

// Traffic names parts of the port's traffic, for Hold.
type Traffic uint8

const (
	// AcceptedReads: what is read on the connections peers dialled.
	AcceptedReads Traffic = 1 << iota
	// DialledReads: what is read on the connections this node dialled.
	DialledReads
	// Writes: every write.
	Writes

	// AllTraffic: every read and write.
	AllTraffic = AcceptedReads | DialledReads | Writes

	trafficParts = 3
)

// Hold holds the parts of every group's traffic named (a test's fault),
// as a stopped process's is held: a read waits with the bytes it read, a
// write waits before it writes, until Release of that part (or Close).
// Unlike Cut nothing is closed, so answers to requests sent before the
// hold are processed after it, as a process resumed after SIGSTOP finds
// them in its sockets. A part already held stays as it is. The
// connections of CheckNode and SendLeave are not held.
func (m *Mux) Hold(parts Traffic) {
	for i := range m.held {
		if parts&(1<<i) != 0 {
			ch := make(chan struct{})
			m.held[i].CompareAndSwap(nil, &ch)
		}
	}
}

// Release releases the parts named of a hold: what waited goes on at
// once.
func (m *Mux) Release(parts Traffic) {
	for i := range m.held {
		if parts&(1<<i) != 0 {
			if h := m.held[i].Swap(nil); h != nil {
				close(*h)
			}
		}
	}
}

// HeldReads is how many reads wait, data in hand, for their hold to end.
func (m *Mux) HeldReads() int64 { return m.heldReads.Load() }

// waitHeld returns at once unless part is held.
func (m *Mux) waitHeld(part Traffic) {
	h := m.held[bits.TrailingZeros8(uint8(part))].Load()
	if h == nil {
		return
	}
	if part != Writes {
		m.heldReads.Add(1)
		defer m.heldReads.Add(-1)
	}
	select {
	case <-*h:
	case <-m.done:
	}
}

// Secure reports whether the port speaks mutual TLS: a leave then counts
// only when announced over it, and a member is checked before it is
// added.
func (m *Mux) Secure() bool { return m.cfg.TLS != nil }
