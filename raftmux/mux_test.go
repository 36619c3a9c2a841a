package raftmux

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

const waitLimit = 10 * time.Second

// waitGoroutines waits (bounded) until at most base goroutines run.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func newMux(t *testing.T, cfg Config) *Mux {
	t.Helper()
	if cfg.Legacy == "" {
		cfg.Legacy = "data"
	}
	m, err := New(listen(t), nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// always says every node understands preambles.
func always(raft.ServerAddress) bool { return true }

func register(t *testing.T, m *Mux, group string, preambles func(raft.ServerAddress) bool) *Layer {
	t.Helper()
	l, err := m.Register(group, Peers{IDOf: func(raft.ServerAddress) (string, bool) { return "n1", true }, Preambles: preambles})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type accepted struct {
	c   net.Conn
	err error
}

// acceptOne accepts one connection of l on another goroutine.
func acceptOne(l *Layer) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() { c, err := l.Accept(); ch <- accepted{c, err} }()
	return ch
}

// expectConn waits for l's next connection and checks that it reads msg.
func expectConn(t *testing.T, ch <-chan accepted, msg []byte) net.Conn {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatal(a.err)
		}
		_ = a.c.SetReadDeadline(time.Now().Add(waitLimit))
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(a.c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("read %q, %v; want %q", got, err, msg)
		}
		return a.c
	case <-time.After(waitLimit):
		t.Fatal("no connection accepted")
	}
	return nil
}

// expectClosed checks that the mux closed c without handing it on.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, ErrCut) {
		t.Fatalf("read %d, %v; want the connection closed", n, err)
	}
	var ne net.Error
	if errors.As(c.SetReadDeadline(time.Time{}), &ne) && ne.Timeout() {
		t.Fatal("timed out, not closed")
	}
}

func TestTwoGroupsOneListener(t *testing.T) {
	base := runtime.NumGoroutine()
	m := newMux(t, Config{})
	data, meta := register(t, m, "data", always), register(t, m, "meta", always)
	addr := raft.ServerAddress(m.Addr().String())
	for i := range 3 {
		for _, tc := range []struct {
			from, to *Layer
		}{{data, data}, {meta, meta}} {
			ch := acceptOne(tc.to)
			c, err := tc.from.Dial(addr, waitLimit)
			if err != nil {
				t.Fatal(err)
			}
			msg := fmt.Appendf(nil, "\x00%s %d", tc.from.group, i)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			got := expectConn(t, ch, msg)
			got.Close()
			c.Close()
		}
	}
	// Nothing was handed to the wrong group: each has nothing waiting.
	for _, l := range []*Layer{data, meta} {
		select {
		case c := <-l.accepted:
			t.Fatalf("group %s got an extra connection %v", l.group, c.conn.RemoteAddr())
		default:
		}
	}
	if _, err := m.Register("meta", Peers{}); err == nil {
		t.Error("a group registered twice")
	}
	m.Close()
	for _, l := range []*Layer{data, meta} {
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	}
	waitGoroutines(t, base)
}

func TestLegacyDiallerReachesLegacyGroup(t *testing.T) {
	m := newMux(t, Config{})
	data, meta := register(t, m, "data", nil), register(t, m, "meta", nil)
	_ = meta
	// A build before the multiplexer: plain TCP, the RPC byte first.
	for _, first := range []byte{0, 1, 2, 3, 4} {
		ch := acceptOne(data)
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte{first, 'r', 'p', 'c'}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		expectConn(t, ch, msg).Close()
		c.Close()
	}
	// This build dialling a peer that advertises no preambles: the
	// legacy group without one (a peer of an old build would otherwise
	// read 0xF1 as an RPC type); other groups cannot reach it.
	ch := acceptOne(data)
	c, err := data.Dial(raft.ServerAddress(m.Addr().String()), waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0, 'x'}); err != nil {
		t.Fatal(err)
	}
	expectConn(t, ch, []byte{0, 'x'})
	if _, err := meta.Dial(raft.ServerAddress(m.Addr().String()), waitLimit); err == nil {
		t.Error("meta dialled a peer that understands no preamble")
	}
}

func TestUnknownAndBadPreamblesClosed(t *testing.T) {
	m := newMux(t, Config{})
	data := register(t, m, "data", nil)
	other := register(t, m, "gone", nil)
	other.Close() // unregistered: its id is unknown now
	for _, in := range [][]byte{
		append([]byte{PreambleByte, 5}, "nosuch"...),
		append([]byte{PreambleByte, 4}, "gone"...),
		{PreambleByte, 0},
		{PreambleByte, 200},
		append([]byte{PreambleByte, 3}, "a/b"...),
		{LeaveByte}, // no TLS: nobody to authenticate
	} {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(in); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c)
		c.Close()
	}
	select {
	case c := <-data.accepted:
		t.Fatalf("legacy group got %v", c.conn.RemoteAddr())
	default:
	}
}

// pki is a CA with a node certificate, and a certificate of another CA.
type pki struct {
	pool          *x509.CertPool
	node, foreign tls.Certificate
}

func newPKI(t *testing.T) pki {
	t.Helper()
	ca, caKey := selfSigned(t, "ca")
	other, otherKey := selfSigned(t, "other ca")
	p := pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.node = leaf(t, "n1", ca, caKey)
	p.foreign = leaf(t, "n1", other, otherKey)
	return p
}

func selfSigned(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func leaf(t *testing.T, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (p pki) tls(cert tls.Certificate) *TLS {
	return &TLS{
		Server: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13},
		Dial: func(id string) *tls.Config {
			return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: p.pool, ServerName: id, MinVersion: tls.VersionTLS13}
		},
		PeerName: func(cs tls.ConnectionState) (string, bool) {
			if len(cs.PeerCertificates) == 0 {
				return "", false
			}
			return cs.PeerCertificates[0].Subject.CommonName, true
		},
	}
}

func TestTLSRefusesNonNodeCertificates(t *testing.T) {
	base := runtime.NumGoroutine()
	p := newPKI(t)
	m := newMux(t, Config{TLS: p.tls(p.node)})
	data, meta := register(t, m, "data", always), register(t, m, "meta", always)
	addr := raft.ServerAddress(m.Addr().String())

	// A node certificate reaches each group, with and without a preamble.
	ch := acceptOne(meta)
	c, err := meta.Dial(addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{0, 'm'}); err != nil {
		t.Fatal(err)
	}
	expectConn(t, ch, []byte{0, 'm'}).Close()
	c.Close()
	ch = acceptOne(data)
	lc, err := tls.Dial("tcp", string(addr), p.tls(p.node).Dial("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Write([]byte{1, 'v'}); err != nil {
		t.Fatal(err)
	}
	expectConn(t, ch, []byte{1, 'v'}).Close()
	lc.Close()

	// Another CA's certificate, and none: the handshake fails, no group
	// sees a connection, whatever the preamble.
	foreign := p.tls(p.foreign).Dial("n1")
	foreign.InsecureSkipVerify = true // the dialler trusts anything; the port must not
	none := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	for _, cfg := range []*tls.Config{foreign, none} {
		for _, in := range [][]byte{append([]byte{PreambleByte, 4}, "meta"...), {0, 'x'}} {
			c, err := tls.Dial("tcp", string(addr), cfg)
			if err != nil {
				continue // refused in the handshake already
			}
			_, _ = c.Write(in)
			expectClosed(t, c)
			c.Close()
		}
	}
	for _, l := range []*Layer{data, meta} {
		select {
		case c := <-l.accepted:
			t.Fatalf("group %s got a connection of a non-node certificate: %v", l.group, c.conn.RemoteAddr())
		default:
		}
	}

	// The leave byte still works, and is still authenticated.
	left := make(chan string, 1)
	m.OnLeave(func(id string) { left <- id })
	if err := m.SendLeave(t.Context(), "n1", string(addr)); err != nil {
		t.Fatal(err)
	}
	if id := <-left; id != "n1" {
		t.Errorf("leave of %q", id)
	}
	if err := m.CheckNode(t.Context(), "n2", string(addr)); err == nil {
		t.Error("CheckNode accepted n1's certificate as n2's")
	}
	m.Close()
	waitGoroutines(t, base)
}

func TestCloseLeavesNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	m, err := New(listen(t), nil, Config{Legacy: "data"})
	if err != nil {
		t.Fatal(err)
	}
	data := register(t, m, "data", always)
	addr := m.Addr().String()
	// A connection held by the group, one waiting for Accept, one that
	// never sends a byte, one dialled out: Close ends them all.
	ch := acceptOne(data)
	held, err := data.Dial(raft.ServerAddress(addr), waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, _ = held.Write([]byte{0})
	in := expectConn(t, ch, []byte{0})
	waiting, _ := net.Dial("tcp", addr)
	defer waiting.Close()
	_, _ = waiting.Write([]byte{0})
	silent, _ := net.Dial("tcp", addr)
	defer silent.Close()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Error("an accepted connection survived Close")
	}
	if _, err := data.Dial(raft.ServerAddress(addr), time.Second); err == nil {
		t.Error("dialled after Close")
	}
	waitGoroutines(t, base)
}

func TestCut(t *testing.T) {
	m := newMux(t, Config{})
	data := register(t, m, "data", nil)
	addr := raft.ServerAddress(m.Addr().String())
	ch := acceptOne(data)
	c, err := data.Dial(addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte{0})
	in := expectConn(t, ch, []byte{0})
	m.Cut(true)
	if _, err := in.Read(make([]byte, 1)); err == nil {
		t.Error("a connection survived the cut")
	}
	if _, err := data.Dial(addr, waitLimit); !errors.Is(err, ErrCut) {
		t.Errorf("dial while cut: %v", err)
	}
	m.Cut(false)
	ch = acceptOne(data)
	c2, err := data.Dial(addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = c2.Write([]byte{0})
	expectConn(t, ch, []byte{0}).Close()
}

// pair dials l's group at addr through l and returns both ends of the
// connection, a byte sent through it.
func pair(t *testing.T, l *Layer, addr raft.ServerAddress) (out, in net.Conn) {
	t.Helper()
	ch := acceptOne(l)
	out, err := l.Dial(addr, waitLimit)
	if err != nil {
		t.Fatalf("dial %s: %v", l.group, err)
	}
	t.Cleanup(func() { out.Close() })
	if _, err := out.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	in = expectConn(t, ch, []byte{0})
	t.Cleanup(func() { in.Close() })
	return out, in
}

// exchange checks that a byte goes each way between out and in.
func exchange(t *testing.T, out, in net.Conn) {
	t.Helper()
	for _, ends := range [][2]net.Conn{{out, in}, {in, out}} {
		_ = ends[0].SetWriteDeadline(time.Now().Add(waitLimit))
		_ = ends[1].SetReadDeadline(time.Now().Add(waitLimit))
		if _, err := ends[0].Write([]byte{7}); err != nil {
			t.Fatalf("write: %v", err)
		}
		if _, err := io.ReadFull(ends[1], make([]byte, 1)); err != nil {
			t.Fatalf("read: %v", err)
		}
	}
}

// rawDial opens a connection to addr as a peer would for group (the
// legacy group's without a preamble) and sends its first RPC byte; the
// mux does not track it.
func rawDial(t *testing.T, addr raft.ServerAddress, group string, preamble bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var b []byte
	if preamble {
		if b, err = Encode(group); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write(append(b, 0)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGroupCut: cutting one group of the port (a quarantine) closes that
// group's connections, dialled, accepted and waiting to be accepted,
// and refuses its dials and the connections peers open for it, while the
// other group's connections keep exchanging and new ones open; mending it
// restores the group, and a group registered again after Close starts
// uncut. The legacy group's connections without a preamble are its too.
func TestGroupCut(t *testing.T) {
	for _, tc := range []struct{ cut, other string }{
		{cut: "meta", other: "data"},
		{cut: "data", other: "meta"}, // the legacy group
	} {
		t.Run(tc.cut, func(t *testing.T) {
			m := newMux(t, Config{})
			layers := map[string]*Layer{"data": register(t, m, "data", always), "meta": register(t, m, "meta", always)}
			addr := raft.ServerAddress(m.Addr().String())
			cut, other := layers[tc.cut], layers[tc.other]
			cutOut, cutIn := pair(t, cut, addr)
			otherOut, otherIn := pair(t, other, addr)
			waiting := rawDial(t, addr, tc.cut, true) // never accepted
			var legacy net.Conn
			if tc.cut == "data" {
				legacy = rawDial(t, addr, "data", false)
			}

			cut.Cut(true)
			for name, c := range map[string]net.Conn{"dialled": cutOut, "accepted": cutIn, "waiting for Accept": waiting} {
				t.Run("closes "+name, func(t *testing.T) { expectClosed(t, c) })
			}
			if legacy != nil {
				expectClosed(t, legacy)
			}
			if _, err := cut.Dial(addr, waitLimit); !errors.Is(err, ErrGroupCut) {
				t.Errorf("dial of the cut group: %v", err)
			}
			expectClosed(t, rawDial(t, addr, tc.cut, true))
			if tc.cut == "data" {
				expectClosed(t, rawDial(t, addr, "data", false))
			}
			exchange(t, otherOut, otherIn)
			newOut, newIn := pair(t, other, addr)
			exchange(t, newOut, newIn)

			cut.Cut(false)
			mendedOut, mendedIn := pair(t, cut, addr)
			exchange(t, mendedOut, mendedIn)
			exchange(t, otherOut, otherIn)

			cut.Cut(true)
			cut.Close()
			againOut, againIn := pair(t, register(t, m, tc.cut, always), addr)
			exchange(t, againOut, againIn)
		})
	}
}

// readAsync reads one byte of c on another goroutine.
func readAsync(c net.Conn) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(waitLimit))
		_, err := io.ReadFull(c, make([]byte, 1))
		ch <- err
	}()
	return ch
}

// waitHeldReads waits until n reads of m wait, data in hand.
func waitHeldReads(t *testing.T, m *Mux, n int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for m.HeldReads() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads held, want %d", m.HeldReads(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHold(t *testing.T) {
	m := newMux(t, Config{})
	data := register(t, m, "data", always)
	addr := raft.ServerAddress(m.Addr().String())
	ch := acceptOne(data)
	out, err := data.Dial(addr, waitLimit) // dialled: m's DialledReads
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := out.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	in := expectConn(t, ch, []byte{0}) // accepted: m's AcceptedReads
	defer in.Close()

	// Reads held: each read waits with its byte, on both ends.
	m.Hold(AcceptedReads | DialledReads)
	inRead, outRead := readAsync(in), readAsync(out)
	if _, err := out.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte{2}); err != nil {
		t.Fatal(err)
	}
	waitHeldReads(t, m, 2)
	// Only the dialled side's reads released: the accepted side waits.
	m.Release(DialledReads | Writes)
	if err := <-outRead; err != nil {
		t.Fatal(err)
	}
	waitHeldReads(t, m, 1)
	select {
	case err := <-inRead:
		t.Fatalf("a held read returned (%v)", err)
	default:
	}

	// Writes held: nothing written goes out until released.
	m.Hold(Writes)
	wrote := make(chan error, 1)
	go func() { _, err := out.Write([]byte{3}); wrote <- err }()
	m.Release(AllTraffic)
	if err := <-inRead; err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-readAsync(in); err != nil {
		t.Fatal(err)
	}
	waitHeldReads(t, m, 0)

	// Close ends a hold.
	m.Hold(AcceptedReads)
	inRead = readAsync(in)
	if _, err := out.Write([]byte{4}); err != nil {
		t.Fatal(err)
	}
	waitHeldReads(t, m, 1)
	m.Close()
	<-inRead
}

// A cut node, or a node with its group cut, still proves itself and
// takes a leave (a quarantined group is cut, and its node must be
// removable).
func TestCutKeepsLeaveAndCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(m *Mux, data *Layer)
		err  error
	}{
		{"port", func(m *Mux, _ *Layer) { m.Cut(true) }, ErrCut},
		{"group", func(_ *Mux, data *Layer) { data.Cut(true) }, ErrGroupCut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPKI(t)
			m := newMux(t, Config{TLS: p.tls(p.node)})
			data := register(t, m, "data", nil)
			addr := raft.ServerAddress(m.Addr().String())
			left := make(chan string, 1)
			m.OnLeave(func(id string) { left <- id })
			tc.cut(m, data)
			if _, err := data.Dial(addr, waitLimit); !errors.Is(err, tc.err) {
				t.Errorf("dial while cut: %v", err)
			}
			if err := m.CheckNode(t.Context(), "n1", string(addr)); err != nil {
				t.Errorf("CheckNode while cut: %v", err)
			}
			if err := m.SendLeave(t.Context(), "n1", string(addr)); err != nil {
				t.Fatal(err)
			}
			if id := <-left; id != "n1" {
				t.Errorf("leave of %q", id)
			}
			// A Raft connection accepted while cut is closed.
			c, err := tls.Dial("tcp", string(addr), p.tls(p.node).Dial("n1"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = c.Write([]byte{0})
			expectClosed(t, c)
		})
	}
}

// TestListen: the Raft port refuses a bind it cannot parse and an
// advertised address others cannot dial (what cluster.Config checked of
// RaftBind and RaftAdvertise before the host built the port), and keeps
// an advertised host name a name.
func TestListen(t *testing.T) {
	ctx := context.Background()
	if ln, _, err := Listen(ctx, "nope", ""); err == nil {
		ln.Close()
		t.Error("bind nope accepted")
	}
	if ln, _, err := Listen(ctx, "0.0.0.0:0", ""); err == nil {
		ln.Close()
		t.Error("an unspecified bound address accepted as the advertised one")
	}
	if ln, _, err := Listen(ctx, "127.0.0.1:0", "127.0.0.1:x"); err == nil {
		ln.Close()
		t.Error("advertise with a bad port accepted")
	}
	ln, adv, err := Listen(ctx, "127.0.0.1:0", "localhost:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := adv.(NamedAddr); !ok || adv.String() != "localhost:7000" {
		t.Errorf("advertised %T %v, want the name", adv, adv)
	}
}
