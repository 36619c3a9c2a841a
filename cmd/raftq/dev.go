package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/tlsconfig/pki"
)

// newDevCmd runs a local cluster of `raftq serve` processes on loopback,
// for trying failover by hand: kill one and watch the others carry on.
func newDevCmd() *cobra.Command {
	var (
		nodes    int
		basePort int
		dataDir  string
		keep     bool
		tlsOn    bool
		restart  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local N-node cluster on loopback (data under a temp dir)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 9 {
				return errors.New("--nodes must be 1-9")
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if restart < 0 {
				return fmt.Errorf("--restart-after must not be negative (got %s)", restart)
			}
			out := cmd.OutOrStdout()
			if dataDir == "" {
				if dataDir, err = os.MkdirTemp("", "raftq-dev-"); err != nil {
					return err
				}
				if !keep {
					// Only after every node, restarted ones included,
					// has stopped (runDev returns then).
					defer func() {
						os.RemoveAll(dataDir)
						fmt.Fprintf(out, "removed %s (--keep keeps it)\n", dataDir)
					}()
				}
			}
			return runDev(cmd.Context(), out, self, nodes, basePort, dataDir, tlsOn, restart)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "node i uses ports base+10i .. base+10i+3 (gRPC, Raft, gossip, HTTP)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "where node data goes (default: a temp dir removed on exit)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temp data dir on exit")
	cmd.Flags().DurationVar(&restart, "restart-after", 5*time.Second, "restart a node that dies after this long (0 = never)")
	cmd.Flags().BoolVar(&tlsOn, "tls", false, "TLS on every port and an encrypted gossip, with a CA, certificates and a gossip key made in the data dir")
	return cmd
}

func runDev(ctx context.Context, out io.Writer, self string, nodes, basePort int, dataDir string, tlsOn bool, restartAfter time.Duration) error {
	var ids []string
	for i := range nodes {
		ids = append(ids, fmt.Sprintf("n%d", i+1))
	}
	var (
		nodeFlags   map[string][]string
		clientFlags []string
	)
	if tlsOn {
		var err error
		if nodeFlags, clientFlags, err = makeDevTLS(filepath.Join(dataDir, "tls"), ids); err != nil {
			return err
		}
	}
	// Every port first: a node that cannot bind only restarts every few
	// seconds, while the others join whatever holds its port.
	if err := checkDevPorts(devPorts(nodes, basePort)); err != nil {
		return err
	}
	var gossip, grpcAddrs []string
	for i := range nodes {
		gossip = append(gossip, fmt.Sprintf("127.0.0.1:%d", basePort+10*i+2))
		grpcAddrs = append(grpcAddrs, fmt.Sprintf("127.0.0.1:%d", basePort+10*i))
	}
	sup := newSupervisor(out, restartAfter)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		p := basePort + 10*i
		logPath := filepath.Join(dataDir, id+".log")
		args := []string{"serve",
			"--node-id", id,
			"--data-dir", filepath.Join(dataDir, id),
			"--grpc-addr", fmt.Sprintf("127.0.0.1:%d", p),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", p+1),
			"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", p+2),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", p+3),
			"--join", strings.Join(gossip, ","),
			"--bootstrap-expect", fmt.Sprint(nodes),
		}
		args = append(args, nodeFlags[id]...)
		pid, err := sup.start(ctx, id, self, args, logPath)
		if err != nil {
			sup.stop("")
			return fmt.Errorf("start %s: %w", id, err)
		}
		fmt.Fprintf(out, "%s: grpc 127.0.0.1:%d  http 127.0.0.1:%d  pid %d  log %s\n", id, p, p+3, pid, logPath)
	}
	flags := ""
	if len(clientFlags) > 0 {
		flags = strings.Join(clientFlags, " ") + " "
	}
	fmt.Fprintf(out, "\nReach the cluster with:\n  raftq %s--addr %s cluster status\n", flags, strings.Join(grpcAddrs, ","))
	if len(clientFlags) > 0 {
		fmt.Fprintf(out, "or set RAFTQ_CLIENT_TLS_CA, RAFTQ_CLIENT_TLS_CERT and RAFTQ_CLIENT_TLS_KEY to those files.\n")
	}
	fmt.Fprintf(out, "Every node's data is under %s until dev exits.\n", dataDir)
	if restartAfter > 0 {
		fmt.Fprintf(out, "Kill a node (kill -9 <pid>) to watch a failover; dev restarts it after %s (--restart-after). Ctrl-C stops them all.\n", restartAfter)
	} else {
		fmt.Fprintf(out, "Kill a node (kill -9 <pid>) to watch a failover; dev does not restart it (--restart-after 0). Ctrl-C stops them all.\n")
	}
	leader := make(chan string, 1)
	go func() { leader <- watchLeader(ctx, sup, grpcAddrs, clientFlags) }()
	<-ctx.Done()
	start := time.Now()
	// The leader last: see supervisor.stop.
	sup.stop(<-leader)
	fmt.Fprintf(out, "stopped every node in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// watchLeader prints which node leads, with its pid (what to kill -9 to
// watch a failover), once one is elected and at every change, until ctx
// ends; it returns the last leader it saw.
func watchLeader(ctx context.Context, sup *supervisor, addrs, clientFlags []string) string {
	opts := []client.Option{client.WithLogger(slog.New(slog.DiscardHandler))}
	if len(clientFlags) == 6 { // --tls-ca CA --tls-cert CERT --tls-key KEY
		opts = append(opts, client.WithTLS(clientFlags[1], clientFlags[3], clientFlags[5]))
	}
	c, err := client.Dial(ctx, addrs, opts...)
	if err != nil {
		sup.printf("cannot watch the leader: %v\n", err)
		return ""
	}
	defer c.Close()
	// No event says who leads from outside the cluster: ask twice a
	// second (this is a developer's tool, on loopback).
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.ClusterStatus(cctx)
		cancel()
		if err == nil && st.GetLeaderId() != "" && st.GetLeaderId() != last {
			last = st.GetLeaderId()
			sup.printf("leader: %s (pid %d)\n", last, sup.pid(last))
		}
		select {
		case <-ctx.Done():
			return last
		case <-t.C:
		}
	}
}

// makeDevTLS makes, in dir, a CA, a node certificate for each id, a client
// certificate "dev" (which the nodes make an admin: --admin-cn) and a
// gossip key file; it returns each node's serve
// flags and the client flags that reach the cluster.
func makeDevTLS(dir string, ids []string) (map[string][]string, []string, error) {
	ca, err := pki.NewCA("raftq dev CA", time.Now(), 30*24*time.Hour)
	if err != nil {
		return nil, nil, err
	}
	if err := ca.WriteCA(dir, true); err != nil {
		return nil, nil, err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, nil, err
	}
	keyFile := path("gossip.keys")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, nil, err
	}
	issue := func(name string, node bool) error {
		c, k, err := ca.Issue(pki.Request{Name: name, Node: node})
		if err != nil {
			return err
		}
		return pki.WritePair(dir, pki.CertFile(name), pki.KeyFile(name), c, k, true)
	}
	flags := map[string][]string{}
	for _, id := range ids {
		if err := issue(id, true); err != nil {
			return nil, nil, err
		}
		// With TLS a node wants credentials (--auth token): the client
		// certificate "dev" is an admin's.
		flags[id] = []string{"--tls-cert", path(pki.CertFile(id)), "--tls-key", path(pki.KeyFile(id)), "--tls-ca", path(pki.CAFile), "--gossip-key-file", keyFile,
			"--admin-cn", "dev"}
	}
	if err := issue("dev", false); err != nil {
		return nil, nil, err
	}
	return flags, []string{"--tls-ca", path(pki.CAFile), "--tls-cert", path(pki.CertFile("dev")), "--tls-key", path(pki.KeyFile("dev"))}, nil
}
