package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/credentials"
)

// WithTLS connects over TLS: caFile is the PEM bundle of the CA that signed
// the nodes' certificates (empty: the system roots); certFile and keyFile
// (both or neither) are a client certificate for mutual TLS, e.g. one made
// by `raftq cert client`. A node's certificate must name the host the
// client dials (an IP address or DNS name given to `raftq cert node
// --host`). Files that cannot be read make Dial fail.
func WithTLS(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		cfg, err := loadTLS(caFile, certFile, keyFile)
		if err != nil {
			o.err = errors.Join(o.err, err)
			return
		}
		o.creds = credentials.NewTLS(cfg)
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

func loadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("raftq client: TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("raftq client: TLS CA %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("raftq client: TLS client certificate: %w", err)
		}
		if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
			return nil, fmt.Errorf("raftq client: TLS client certificate %s expired at %s", certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("raftq client: a TLS client certificate needs both the certificate and the key file")
	}
	return cfg, nil
}
