package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// newDevCmd runs a local cluster of `raftq serve` processes on loopback,
// for trying failover by hand: kill one and watch the others carry on.
func newDevCmd() *cobra.Command {
	var (
		nodes    int
		basePort int
		dataDir  string
		keep     bool
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
			if dataDir == "" {
				if dataDir, err = os.MkdirTemp("", "raftq-dev-"); err != nil {
					return err
				}
				if !keep {
					defer os.RemoveAll(dataDir)
				}
			}
			return runDev(cmd.Context(), cmd.OutOrStdout(), self, nodes, basePort, dataDir)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "node i uses ports base+10i .. base+10i+3 (gRPC, Raft, gossip, HTTP)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "where node data goes (default: a temp dir removed on exit)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temp data dir on exit")
	return cmd
}

func runDev(ctx context.Context, out io.Writer, self string, nodes, basePort int, dataDir string) error {
	var gossip, grpcAddrs []string
	for i := range nodes {
		gossip = append(gossip, fmt.Sprintf("127.0.0.1:%d", basePort+10*i+2))
		grpcAddrs = append(grpcAddrs, fmt.Sprintf("127.0.0.1:%d", basePort+10*i))
	}
	var (
		wg    sync.WaitGroup
		procs []*exec.Cmd
	)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		p := basePort + 10*i
		logPath := filepath.Join(dataDir, id+".log")
		logf, err := os.Create(logPath)
		if err != nil {
			return err
		}
		c := exec.Command(self, "serve",
			"--node-id", id,
			"--data-dir", filepath.Join(dataDir, id),
			"--grpc-addr", fmt.Sprintf("127.0.0.1:%d", p),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", p+1),
			"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", p+2),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", p+3),
			"--join", strings.Join(gossip, ","),
			"--bootstrap-expect", fmt.Sprint(nodes),
		)
		c.Stdout, c.Stderr = logf, logf
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			logf.Close()
			stopAll(procs, &wg)
			return fmt.Errorf("start %s: %w", id, err)
		}
		procs = append(procs, c)
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Wait(); logf.Close() }()
		fmt.Fprintf(out, "%s: grpc 127.0.0.1:%d  http 127.0.0.1:%d  pid %d  log %s\n", id, p, p+3, c.Process.Pid, logPath)
	}
	fmt.Fprintf(out, "\nReach the cluster with:\n  raftq --addr %s cluster status\n", strings.Join(grpcAddrs, ","))
	fmt.Fprintf(out, "Kill a node (kill -9 <pid>) to watch a failover. Ctrl-C stops them all.\n")
	<-ctx.Done()
	stopAll(procs, &wg)
	return nil
}

// stopAll asks every node to leave (SIGTERM) and kills stragglers.
func stopAll(procs []*exec.Cmd, wg *sync.WaitGroup) {
	for _, p := range procs {
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		for _, p := range procs {
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		}
		<-done
	}
}
