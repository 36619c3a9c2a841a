//go:build linux

package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The kernel here has no netem, so latency is added in user space: in
// every node's namespace a nat rule redirects the node's outgoing Raft
// connections to each peer to a listener of this process inside that same
// namespace, which dials the peer from there (so the packets still carry
// the node's address and partitions still apply) and forwards each chunk
// after the link's delay. Its own dials carry a firewall mark that the
// redirect rule skips.
const (
	proxyMark     = 0x7271
	proxyBasePort = 17400
	chunkSize     = 32 << 10
)

// Proxy relays the Raft traffic of every ordered pair of nodes.
type Proxy struct {
	log   *slog.Logger
	links []*link
	wg    sync.WaitGroup
}

// link is the relay for Raft connections from one node to another.
type link struct {
	from, to *Host
	ln       net.Listener
	delay    atomic.Int64 // nanoseconds, each way

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// NewProxy installs the relays for every pair of hosts (whose nodes serve
// Raft on raftPort).
func NewProxy(ctx context.Context, nw *Network, log *slog.Logger) (p *Proxy, err error) {
	p = &Proxy{log: log}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	for _, a := range nw.Hosts {
		for _, b := range nw.Hosts {
			if a == b {
				continue
			}
			port := proxyBasePort + b.Index
			l := &link{from: a, to: b, conns: map[net.Conn]struct{}{}}
			err := inNamespace(a.NS, func() error {
				var err error
				l.ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				return err
			})
			if err != nil {
				return p, fmt.Errorf("proxy listener in %s: %w", a.NS, err)
			}
			p.links = append(p.links, l)
			if err := nw.Iptables(ctx, a, "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", b.IP, "--dport", strconv.Itoa(raftPort),
				"-m", "mark", "!", "--mark", strconv.Itoa(proxyMark), "-j", "REDIRECT", "--to-ports", strconv.Itoa(port)); err != nil {
				return p, err
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(l) }()
		}
	}
	return p, nil
}

// SetDelay sets the one-way delay of every link to or from node (-1: of
// every link).
func (p *Proxy) SetDelay(node int, d time.Duration) {
	for _, l := range p.links {
		if node < 0 || l.from.Index == node || l.to.Index == node {
			l.delay.Store(int64(d))
		}
	}
}

// Close stops every relay and closes every relayed connection.
func (p *Proxy) Close() {
	for _, l := range p.links {
		l.mu.Lock()
		l.closed = true
		conns := l.conns
		l.conns = nil
		l.mu.Unlock()
		l.ln.Close()
		for c := range conns {
			c.Close()
		}
	}
	p.wg.Wait()
}

func (p *Proxy) serve(l *link) {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(in) {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.relay(l, in) }()
	}
}

func (l *link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *link) untrack(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
	c.Close()
}

func (p *Proxy) relay(l *link, in net.Conn) {
	defer l.untrack(in)
	var out net.Conn
	err := inNamespace(l.from.NS, func() error {
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, proxyMark)
			}); err != nil {
				return err
			}
			return serr
		}}
		var err error
		out, err = d.Dial("tcp", net.JoinHostPort(l.to.IP, strconv.Itoa(raftPort)))
		return err
	})
	if err != nil {
		return // the node sees its connection closed, as if the dial failed
	}
	if !l.track(out) {
		return
	}
	defer l.untrack(out)
	done := make(chan struct{}, 2)
	go func() { l.pump(out, in); done <- struct{}{} }()
	go func() { l.pump(in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
	<-done
}

// pump copies src to dst, holding each chunk for the link's delay (read at
// the time the chunk arrives) without limiting throughput.
func (l *link) pump(dst, src net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(time.Duration(l.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range ch {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			<-timer.C
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range ch { // let the reader finish
	}
}
