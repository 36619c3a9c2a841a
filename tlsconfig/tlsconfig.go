// Package tlsconfig loads, checks and reloads a node's certificate material
// (--tls-cert, --tls-key, --tls-ca) and builds the *tls.Config of every
// listener and dial from it: client-facing listeners (gRPC, HTTP) that
// verify a client certificate when one is given, the node-only Raft
// listener, and dials to a named node that accept only that node's
// certificate. It tells node certificates (URI SAN raftq-node://NAME) apart
// from client certificates, and says in plain words why a peer's
// certificate was refused (expired, another CA, not a node).
//
// Material is re-read on Reload (SIGHUP) and when Watch sees a file change;
// every handshake uses the current material, so rotated certificates and
// CA bundles take effect without a restart. Issuing certificates is pki's
// job.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/raftq/raftq/tlsconfig/pki"
)

// NodeName returns NAME when cert carries exactly one URI SAN
// raftq-node://NAME, the mark of a node certificate. It does not verify
// the certificate: call it only on a peer certificate of a connection
// whose handshake used a config of this package (which verified the
// chain), e.g. a gRPC peer's credentials.TLSInfo.State.PeerCertificates[0].
func NodeName(cert *x509.Certificate) (string, bool) {
	if cert == nil {
		return "", false
	}
	name, found := "", 0
	for _, u := range cert.URIs {
		if u.Scheme != pki.NodeURIScheme {
			continue
		}
		found++
		name = nodeNameOf(u)
	}
	if found != 1 || name == "" {
		return "", false
	}
	return name, true
}

func nodeNameOf(u *url.URL) string {
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Port() != "" {
		return ""
	}
	if pki.ValidName(u.Host) != nil {
		return ""
	}
	return u.Host
}

// PeerNodeName is NodeName of the leaf a verified connection's peer
// presented; false when it presented none or a client certificate.
func PeerNodeName(cs tls.ConnectionState) (string, bool) {
	if len(cs.PeerCertificates) == 0 {
		return "", false
	}
	return NodeName(cs.PeerCertificates[0])
}

// Files names the PEM files of a node's or client's material.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// ClientConfig builds the static *tls.Config of a client (the CLI, the
// SDK): the server must present a certificate for the dialled host signed
// by the CA in caFile; certFile and keyFile (both or neither) are the
// client certificate presented for mTLS. An empty caFile uses the system
// roots.
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, _, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s / key %s: %w", certFile, keyFile, err)
		}
		if now := time.Now(); cert.Leaf != nil && now.After(cert.Leaf.NotAfter) {
			return nil, fmt.Errorf("tls: client certificate %s expired at %s", certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("tls: a client certificate needs both the certificate and the key file")
	}
	return cfg, nil
}

// loadPool reads a PEM bundle of CA certificates.
func loadPool(caFile string) (*x509.CertPool, []*x509.Certificate, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: CA file: %w", err)
	}
	var certs []*x509.Certificate
	for rest := b; ; {
		var blk []byte
		blk, rest = nextPEMCert(rest)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk)
		if err != nil {
			return nil, nil, fmt.Errorf("tls: CA file %s: %w", caFile, err)
		}
		if !c.IsCA {
			return nil, nil, fmt.Errorf("tls: CA file %s: %q is not a CA certificate", caFile, c.Subject.CommonName)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", caFile)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, certs, nil
}

// verifyPeer checks a peer's chain against roots for usage at now, and
// words the two failures an operator meets most (an expired certificate,
// one from another CA) so that the log line says what to fix.
func verifyPeer(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, now time.Time) ([][]*x509.Certificate, error) {
	if len(certs) == 0 {
		return nil, errors.New("no certificate presented")
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage},
	})
	if err == nil {
		return chains, nil
	}
	subject := describe(leaf)
	var inv x509.CertificateInvalidError
	var unk x509.UnknownAuthorityError
	switch {
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		if now.Before(leaf.NotBefore) {
			return nil, fmt.Errorf("certificate %s is not valid before %s (now %s; check the clocks): %w",
				subject, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), err)
		}
		return nil, fmt.Errorf("certificate %s expired at %s (now %s): %w",
			subject, leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), err)
	case errors.As(err, &unk):
		return nil, fmt.Errorf("certificate %s is signed by %q, which is not a CA in the trusted CA file (wrong CA): %w",
			subject, leaf.Issuer.CommonName, err)
	case errors.As(err, &inv) && inv.Reason == x509.IncompatibleUsage:
		return nil, fmt.Errorf("certificate %s is not for %s use: %w", subject, usageName(usage), err)
	}
	return nil, fmt.Errorf("certificate %s: %w", subject, err)
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "server"
	}
	return "client"
}

// describe names a certificate in a log line: its node name or common
// name, and its serial.
func describe(c *x509.Certificate) string {
	who := "CN=" + c.Subject.CommonName
	if n, ok := NodeName(c); ok {
		who = "node " + n
	}
	return fmt.Sprintf("%q (serial %s)", who, shortSerial(c))
}

func shortSerial(c *x509.Certificate) string {
	s := strings.ToLower(c.SerialNumber.Text(16))
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}
