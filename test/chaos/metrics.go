//go:build linux

package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/raftq/raftq/tlsconfig"
)

// Metrics scrapes one node's /metrics as an operator would: over HTTPS
// trusting the cluster's CA with the admin bearer token when the cluster
// is secure (the HTTP port then serves TLS only, and a plain request gets
// a 400 page with no metrics in it), over plain HTTP otherwise.
func (c *Cluster) Metrics(ctx context.Context, n *Node) (string, error) {
	return c.httpGet(ctx, n, "/metrics")
}

// HeapProfile is the node's /debug/pprof/heap (after a GC), gzipped
// protobuf; the node must run with --pprof (every chaos node does).
func (c *Cluster) HeapProfile(ctx context.Context, n *Node) ([]byte, error) {
	b, err := c.httpGet(ctx, n, "/debug/pprof/heap?gc=1")
	return []byte(b), err
}

// httpGet is GET path on one node's HTTP port, as an admin.
func (c *Cluster) httpGet(ctx context.Context, n *Node, path string) (string, error) {
	scheme, hc := "http", http.DefaultClient
	if c.sec != nil {
		cfg, err := tlsconfig.ClientConfig(c.sec.tls.CAFile(), "", "")
		if err != nil {
			return "", err
		}
		scheme, hc = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer hc.CloseIdleConnections()
	}
	url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(n.Host.IP, strconv.Itoa(httpPort)), path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if c.sec != nil {
		req.Header.Set("Authorization", "Bearer "+c.sec.tls.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %.200s", url, resp.Status, b)
	}
	return string(b), nil
}
