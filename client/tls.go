package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// WithTLS connects over TLS: caFile is the PEM bundle of the CA that signed
// the nodes' certificates (empty: the system roots); certFile and keyFile
// (both or neither) are a client certificate for mutual TLS, e.g. one made
// by `raftq cert client`. A node's certificate must name the host the
// client dials (an IP address or DNS name given to `raftq cert node
// --host`). Files that cannot be read make Dial fail.
//
// The files are read again at each new connection and used anew when
// their contents changed, so a long-running client follows a
// certificate or CA rotation: connections made after the rewrite use the
// new certificate and trust the new CA file; connections already open keep
// going. A rewrite that cannot be used (a half-written file, a key that
// does not match, an expired certificate) keeps what was loaded last and
// is logged (WithLogger) once per distinct error. Write the key before the
// certificate, each atomically (temporary file, rename), as `raftq cert`
// does.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		r, err := newTLSFiles(caFile, certFile, keyFile, func() *slog.Logger { return o.log })
		if err != nil {
			o.err = errors.Join(o.err, err)
			return
		}
		o.creds = &reloadingCreds{files: r}
	}
}

// WithTLSConfig connects over TLS with cfg (cloned).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg != nil {
			o.creds = credentials.NewTLS(cfg.Clone())
		}
	}
}

// tlsFiles is a client's TLS material and the files it came from; creds
// reads the files again at each new connection and rebuilds the
// credentials when their contents changed. (Contents, not modification
// times: two rewrites within the file system's timestamp granularity, of
// the same size, would look alike.) The files are small and handshakes
// rare.
type tlsFiles struct {
	ca, cert, key string
	log           func() *slog.Logger

	mu      sync.Mutex
	current credentials.TransportCredentials
	tried   tlsPEM // the files as last read, usable or not
	lastErr string // the last reload error logged
}

// tlsPEM is the contents of the CA, certificate and key files.
type tlsPEM struct{ ca, cert, key []byte }

func (a tlsPEM) equal(b tlsPEM) bool {
	return bytes.Equal(a.ca, b.ca) && bytes.Equal(a.cert, b.cert) && bytes.Equal(a.key, b.key)
}

func newTLSFiles(caFile, certFile, keyFile string, log func() *slog.Logger) (*tlsFiles, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("raftq client: a TLS client certificate needs both the certificate and the key file")
	}
	f := &tlsFiles{ca: caFile, cert: certFile, key: keyFile, log: log}
	b, err := f.read()
	if err != nil {
		return nil, err
	}
	cfg, err := f.parse(b)
	if err != nil {
		return nil, err
	}
	f.current, f.tried = credentials.NewTLS(cfg), b
	return f, nil
}

// creds returns the credentials for a new connection: those of the files
// as they are now, or, when they changed into something unusable, those
// loaded last.
func (f *tlsFiles) creds() credentials.TransportCredentials {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.read()
	if err == nil && b.equal(f.tried) {
		return f.current
	}
	if err == nil {
		f.tried = b
		var cfg *tls.Config
		if cfg, err = f.parse(b); err == nil {
			f.current, f.lastErr = credentials.NewTLS(cfg), ""
			f.log().Info("raftq client: TLS material reloaded", "ca", f.ca, "cert", f.cert)
			return f.current
		}
	}
	if msg := err.Error(); msg != f.lastErr {
		f.lastErr = msg
		f.log().Error("raftq client: TLS material not reloaded; still using what was loaded before", "err", err)
	}
	return f.current
}

// last returns the credentials loaded last, without reading the files.
func (f *tlsFiles) last() credentials.TransportCredentials {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

func (f *tlsFiles) read() (tlsPEM, error) {
	var b tlsPEM
	for _, r := range []struct {
		path, what string
		to         *[]byte
	}{{f.ca, "CA", &b.ca}, {f.cert, "client certificate", &b.cert}, {f.key, "client key", &b.key}} {
		if r.path == "" {
			continue
		}
		data, err := os.ReadFile(r.path)
		if err != nil {
			return b, fmt.Errorf("raftq client: TLS %s: %w", r.what, err)
		}
		*r.to = data
	}
	return b, nil
}

// parse builds the TLS config of b: the CA bundle as the roots (the
// system's when there is no CA file) and the client certificate, which
// must match its key and not be expired.
func (f *tlsFiles) parse(b tlsPEM) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b.ca) {
			return nil, fmt.Errorf("raftq client: TLS CA %s holds no PEM certificate", f.ca)
		}
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		cert, err := tls.X509KeyPair(b.cert, b.key)
		if err != nil {
			return nil, fmt.Errorf("raftq client: TLS client certificate %s / key %s: %w", f.cert, f.key, err)
		}
		if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
			return nil, fmt.Errorf("raftq client: TLS client certificate %s expired at %s", f.cert, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// reloadingCreds are TLS transport credentials whose material (CA pool,
// client certificate) is what tlsFiles holds at each handshake.
type reloadingCreds struct {
	files *tlsFiles
	// serverName overrides the name verified (OverrideServerName).
	serverName string
}

var _ credentials.TransportCredentials = (*reloadingCreds)(nil)

func (c *reloadingCreds) now() credentials.TransportCredentials {
	cr := c.files.creds()
	if c.serverName != "" {
		cr = cr.Clone()
		//lint:ignore SA1019 passed on for callers of the deprecated method
		_ = cr.OverrideServerName(c.serverName)
	}
	return cr
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.now().ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.now().ServerHandshake(conn)
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo { return c.files.last().Info() }

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	return &reloadingCreds{files: c.files, serverName: c.serverName}
}

// OverrideServerName is deprecated in grpc-go but still part of the
// interface.
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}
