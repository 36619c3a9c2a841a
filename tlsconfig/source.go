package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Source holds a node's current certificate material and builds the
// *tls.Config of its listeners and dials. Every config it returns reads
// the material at each handshake, so Reload takes effect for new
// connections at once. Safe for concurrent use.
type Source struct {
	files Files
	log   *slog.Logger
	now   func() time.Time
	cur   atomic.Pointer[material]

	// reloadMu serialises Reload; lastErr is the last reload error logged
	// (the same one is not logged again).
	reloadMu sync.Mutex
	lastErr  string

	refusals logLimiter
}

// material is one consistent load of the three files.
type material struct {
	cert  tls.Certificate // Leaf set
	pool  *x509.CertPool
	name  string    // node name of cert ("" for a client certificate)
	caEnd time.Time // NotAfter of the CA that signed cert
	stamp stamp
}

// Load reads and checks files: the key matches the certificate, the
// certificate is current and chains to a CA in the CA file, and it is a
// node certificate. log receives reloads and refused peers.
func Load(files Files, log *slog.Logger) (*Source, error) {
	if files.Cert == "" || files.Key == "" || files.CA == "" {
		return nil, errors.New("tls: --tls-cert, --tls-key and --tls-ca are all needed (nodes verify each other with the CA)")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Source{files: files, log: log, now: time.Now}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

func (s *Source) load() (*material, error) {
	st, err := statFiles(s.files)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: --tls-cert %s / --tls-key %s: %w", s.files.Cert, s.files.Key, err)
	}
	pool, _, err := loadPool(s.files.CA)
	if err != nil {
		return nil, err
	}
	leaf := cert.Leaf
	name, ok := NodeName(leaf)
	if !ok {
		return nil, fmt.Errorf("tls: --tls-cert %s is not a node certificate (no URI SAN raftq-node://NAME; make one with `raftq cert node`)", s.files.Cert)
	}
	var chains [][]*x509.Certificate
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		certs := []*x509.Certificate{leaf}
		for _, der := range cert.Certificate[1:] {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("tls: --tls-cert %s: %w", s.files.Cert, err)
			}
			certs = append(certs, c)
		}
		if chains, err = verifyPeer(certs, pool, usage, s.now()); err != nil {
			return nil, fmt.Errorf("tls: --tls-cert %s against --tls-ca %s: %w", s.files.Cert, s.files.CA, err)
		}
	}
	root := chains[0][len(chains[0])-1]
	return &material{cert: cert, pool: pool, name: name, caEnd: root.NotAfter, stamp: st}, nil
}

// Reload re-reads the files. On an error the current material stays in
// use, and the error is returned (and logged once).
func (s *Source) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	m, err := s.load()
	if err != nil {
		if msg := err.Error(); msg != s.lastErr {
			s.lastErr = msg
			s.log.Error("TLS material not reloaded; still using the previous certificate", "err", err)
		}
		return err
	}
	s.lastErr = ""
	old := s.cur.Swap(m)
	if old == nil || old.cert.Leaf.SerialNumber.Cmp(m.cert.Leaf.SerialNumber) != 0 || !old.stamp.equal(m.stamp) {
		s.log.Info("TLS material loaded", "cert", describe(m.cert.Leaf),
			"not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339), "ca_not_after", m.caEnd.UTC().Format(time.RFC3339))
	}
	return nil
}

// Watch reloads when one of the files changes (checked every interval),
// until ctx ends. A failed reload is retried at the next check.
func (s *Source) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := statFiles(s.files)
		if err == nil && st.equal(s.cur.Load().stamp) {
			continue
		}
		_ = s.Reload()
	}
}

// NodeName is the node name of the current certificate.
func (s *Source) NodeName() string { return s.cur.Load().name }

// NotAfter returns when the current certificate and the CA that signed it
// expire.
func (s *Source) NotAfter() (cert, ca time.Time) {
	m := s.cur.Load()
	return m.cert.Leaf.NotAfter, m.caEnd
}

// ServerConfig is for client-facing listeners (gRPC, HTTP): it presents
// the node certificate and asks for a client certificate, which, when
// given, must chain to the CA and be current (a client with a token needs
// none). listener names the port in refusal log lines.
func (s *Source) ServerConfig(listener string) *tls.Config {
	return s.serverConfig(listener, tls.RequestClientCert, false)
}

// NodeServerConfig is for the Raft listener: the peer must present a
// node certificate from the CA; client certificates are refused.
func (s *Source) NodeServerConfig(listener string) *tls.Config {
	return s.serverConfig(listener, tls.RequireAnyClientCert, true)
}

func (s *Source) serverConfig(listener string, auth tls.ClientAuthType, nodeOnly bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: auth,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			m := s.cur.Load()
			return &m.cert, nil
		},
		// Tickets would let a client resume without showing its
		// certificate to the current CA bundle again.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 && !nodeOnly {
				return nil
			}
			err := s.checkPeer(cs, x509.ExtKeyUsageClientAuth, nodeOnly, "")
			if err != nil {
				s.refused(listener, err)
			}
			return err
		},
	}
}

// NodeClientConfig is for dials to node name (Raft, forwarding, the
// leader's check of a joining member): it presents this node's
// certificate, and accepts only name's node certificate from the CA.
// The dialled address is not checked against the certificate: the node
// name is the identity, and nodes may be reached through any address.
func (s *Source) NodeClientConfig(name string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			m := s.cur.Load()
			return &m.cert, nil
		},
		// Verification is done in VerifyConnection against the current
		// CA bundle (a static RootCAs could not be rotated); it checks
		// the chain and the node name, so nothing is skipped.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.checkPeer(cs, x509.ExtKeyUsageServerAuth, true, name)
		},
	}
}

// checkPeer verifies the peer's chain against the current CA bundle and,
// with nodeOnly, that it is a node certificate (named want, if set).
func (s *Source) checkPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, nodeOnly bool, want string) error {
	if _, err := verifyPeer(cs.PeerCertificates, s.cur.Load().pool, usage, s.now()); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	if !nodeOnly {
		return nil
	}
	got, ok := PeerNodeName(cs)
	if !ok {
		return fmt.Errorf("tls: certificate %s is a client certificate, not a node certificate (raftq-node://NAME)", describe(cs.PeerCertificates[0]))
	}
	if want != "" && got != want {
		return fmt.Errorf("tls: expected node %q, but the certificate is node %q's", want, got)
	}
	return nil
}

// refused logs a refused peer, at most once a second per kind of error:
// a scanner on the port must not flood the log.
func (s *Source) refused(listener string, err error) {
	if s.refusals.allow(listener+err.Error(), s.now()) {
		s.log.Warn("TLS: refused a peer certificate", "listener", listener, "err", err)
	}
}

// stamp identifies a version of the three files.
type stamp [3]struct {
	mod  time.Time
	size int64
}

func (a stamp) equal(b stamp) bool {
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

func statFiles(f Files) (stamp, error) {
	var st stamp
	for i, p := range []string{f.Cert, f.Key, f.CA} {
		fi, err := os.Stat(p)
		if err != nil {
			return st, fmt.Errorf("tls: %w", err)
		}
		st[i].mod, st[i].size = fi.ModTime(), fi.Size()
	}
	return st, nil
}

// logLimiter allows one event per key per second, remembering at most
// 128 keys.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (l *logLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) > 128 {
		l.last = map[string]time.Time{}
	}
	if t, ok := l.last[key]; ok && now.Sub(t) < time.Second {
		return false
	}
	l.last[key] = now
	return true
}
