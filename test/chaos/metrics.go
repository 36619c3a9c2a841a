//go:build linux

package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
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

// Goroutines is the node's /debug/pprof/goroutine?debug=2: every
// goroutine's stack, with how long it has waited (every chaos node runs
// with --pprof).
func (c *Cluster) Goroutines(ctx context.Context, n *Node) (string, error) {
	return c.httpGet(ctx, n, "/debug/pprof/goroutine?debug=2")
}

// SaveGoroutines writes every running node's goroutine stacks into dir
// as goroutines-<node>.txt, each fetched within its own 10 s; it returns
// what it could not save. A cluster that did not recover keeps what each
// node was doing, which its log does not say.
func (c *Cluster) SaveGoroutines(ctx context.Context, dir string) []string {
	var notes []string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := c.Goroutines(gctx, n)
		cancel()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "goroutines-"+n.ID+".txt"), []byte(s), 0o644)
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: goroutines: %v", n.ID, err))
		}
	}
	return notes
}

// DiagnoseStatus times one Status call on every running node, local
// only and in full, each within 10 s; a call still running after 1.5 s
// has the node's goroutines saved into dir meanwhile (as
// goroutines-<node>-during-status.txt), so a call that hangs is caught
// at it. It returns a line per call.
func (c *Cluster) DiagnoseStatus(ctx context.Context, dir string) []string {
	var out []string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		for _, local := range []bool{true, false} {
			cc, err := c.Conn(n.GRPC)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", n.ID, err))
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			start, done := time.Now(), make(chan error, 1)
			go func() {
				_, err := raftqv1.NewClusterClient(cc).Status(sctx, &raftqv1.StatusRequest{LocalOnly: local})
				done <- err
			}()
			var callErr error
			select {
			case callErr = <-done:
			case <-time.After(1500 * time.Millisecond):
				if s, err := c.Goroutines(sctx, n); err == nil {
					_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("goroutines-%s-during-status-local%v.txt", n.ID, local)), []byte(s), 0o644)
				}
				callErr = <-done
			}
			cancel()
			out = append(out, fmt.Sprintf("%s: Status(local_only=%v) took %v, err %v", n.ID, local, time.Since(start).Round(time.Millisecond), callErr))
		}
	}
	return out
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
