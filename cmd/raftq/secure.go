package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
)

// checkBinds is the secure-by-default rule: a node without TLS binds only
// loopback addresses unless --insecure says otherwise, so `raftq serve`
// with no flags is a dev node and a node on the network is never open by
// accident. TLS flags come all three or none.
func checkBinds(o *serveOptions) error {
	if o.tls.Enabled() {
		if o.tls.Cert == "" || o.tls.Key == "" || o.tls.CA == "" {
			return errors.New("TLS needs all of --tls-cert, --tls-key and --tls-ca")
		}
		return nil
	}
	if o.insecure {
		return nil
	}
	for _, b := range []struct{ flag, addr string }{
		{"--grpc-addr", o.grpcAddr}, {"--raft-addr", o.raftAddr}, {"--gossip-addr", o.gossipAddr}, {"--http-addr", o.httpAddr},
	} {
		if b.addr == "" {
			continue
		}
		if !loopbackBind(b.addr) {
			return fmt.Errorf("refusing to bind %s %s without TLS: anyone who reaches the port would own the cluster. "+
				"Give --tls-cert, --tls-key and --tls-ca (see `raftq cert` and docs/security.md), "+
				"bind a loopback address, or pass --insecure to run without TLS anyway", b.flag, b.addr)
		}
	}
	return nil
}

// loopbackBind reports whether addr binds only loopback: a loopback IP,
// or a name that resolves to loopback addresses alone. An empty host or
// 0.0.0.0 binds every interface.
func loopbackBind(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// readGossipKeys reads a keyring file: one base64-encoded 32-byte key per
// line (blank lines and lines starting with # are skipped); the first
// key encrypts, all are accepted. Errors never quote a key. A file other
// users can read is used but warned about: with the key a host joins the
// gossip and reads it.
func readGossipKeys(path string, log *slog.Logger) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file %s line %d: not base64", path, i+1)
		}
		if len(k) != 32 {
			return nil, fmt.Errorf("--gossip-key-file %s line %d: a key is 32 bytes, this one %d", path, i+1, len(k))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--gossip-key-file %s holds no key", path)
	}
	warnReadable(log, "gossip key file", path)
	return keys, nil
}
