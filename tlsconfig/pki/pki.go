// Package pki issues the certificates a raftq cluster runs on: a CA, node
// certificates (server and client use, with the URI SAN raftq-node://NAME
// that tells a node apart from a client) and client certificates (CN=NAME,
// client use only). It is what `raftq cert`, `raftq dev --tls` and the tests
// use; loading and checking certificates at run time is tlsconfig's job.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// NodeURIScheme is the scheme of the URI SAN that marks a node certificate:
// raftq-node://NAME, NAME being the node's --node-id.
const NodeURIScheme = "raftq-node"

// Default lifetimes: a CA outlives the certificates it signs by years, so
// rotating a node or client certificate never means rotating the CA.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
	// backdate covers clocks a little behind the issuer's.
	backdate = 5 * time.Minute
)

// File names inside a certificate directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CertFile and KeyFile are the file names of NAME's certificate and key.
func CertFile(name string) string { return name + ".pem" }

// KeyFile is the file name of NAME's private key.
func KeyFile(name string) string { return name + "-key.pem" }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName reports whether name can be a node or client name: it becomes
// a URI host and a file name, so it is kept to letters, digits, '.', '_'
// and '-' (at most 63).
func ValidName(name string) error {
	if !nameRE.MatchString(name) || name == CAFile || strings.HasSuffix(name, "-key") || name == "ca" {
		return fmt.Errorf("name %q: want 1-63 of [A-Za-z0-9._-], starting with a letter or digit, not \"ca\" or ending in \"-key\"", name)
	}
	return nil
}

// NodeURI is the URI SAN of node name's certificate.
func NodeURI(name string) *url.URL { return &url.URL{Scheme: NodeURIScheme, Host: name} }

// CA is a certificate authority that can sign node and client certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA (ECDSA P-256) valid from now for validFor.
func NewCA(commonName string, now time.Time, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"raftq"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// LoadCA reads DIR/ca.pem and DIR/ca-key.pem.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("pki: read CA (run `raftq cert init --dir %s` first?): %w", dir, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("pki: read CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", filepath.Join(dir, CAFile))
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("pki: %s holds no PEM key", filepath.Join(dir, CAKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("pki: CA key is not an ECDSA key")
	}
	ca, err := newCA(cb.Bytes, key)
	if err != nil {
		return nil, err
	}
	if !ca.Cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", filepath.Join(dir, CAFile))
	}
	return ca, nil
}

// Request describes a certificate to issue.
type Request struct {
	// Name is the node id (node certificates) or the client's identity
	// (its common name).
	Name string
	// Node makes a node certificate: URI SAN raftq-node://Name, usable as
	// a server and a client certificate, with Hosts (and loopback) as DNS
	// and IP SANs. Otherwise a client certificate: CN=Name, client use only,
	// no node SAN.
	Node  bool
	Hosts []string
	// NotBefore and NotAfter bound validity; zero values mean from now
	// (backdated a little) for DefaultCertValidity.
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for req with a fresh ECDSA P-256 key; it
// returns both PEM-encoded (key as PKCS#8).
func (ca *CA) Issue(req Request) (certPEM, keyPEM []byte, err error) {
	if err := ValidName(req.Name); err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	now := time.Now()
	if req.NotBefore.IsZero() {
		req.NotBefore = now.Add(-backdate)
	}
	if req.NotAfter.IsZero() {
		req.NotAfter = now.Add(DefaultCertValidity)
	}
	if !req.NotAfter.After(req.NotBefore) {
		return nil, nil, errors.New("pki: NotAfter is not after NotBefore")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"raftq"}},
		NotBefore:    req.NotBefore,
		NotAfter:     req.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if req.Node {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.URIs = []*url.URL{NodeURI(req.Name)}
		// Loopback always: a client on the node's own machine (an
		// operator's shell, a health probe) reaches it there.
		hosts := append([]string{"localhost", "127.0.0.1", "::1"}, req.Hosts...)
		seen := map[string]bool{}
		for _, h := range hosts {
			h = strings.TrimSpace(h)
			if h == "" || seen[h] {
				continue
			}
			seen[h] = true
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	} else if len(req.Hosts) > 0 {
		return nil, nil, errors.New("pki: a client certificate has no hosts")
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: sign %s: %w", req.Name, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// WriteCA writes the CA's certificate (0644) and key (0600) into dir.
func (ca *CA) WriteCA(dir string, force bool) error {
	return WritePair(dir, CAFile, CAKeyFile, ca.CertPEM, ca.KeyPEM, force)
}

// WritePair writes a certificate (0644) and its key (0600) into dir
// (created 0700 if missing), refusing to replace existing files unless
// force. Each file is written to a temporary name and renamed into place,
// so a node reloading it never reads half a file.
func WritePair(dir, certName, keyName string, certPEM, keyPEM []byte, force bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("pki: %s exists (use --force to replace it)", p)
			}
		}
	}
	// The key first: a reloading node that sees the new certificate must
	// also find its key.
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, certPEM, 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename this fails harmlessly
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("pki: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
