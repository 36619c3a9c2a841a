package test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
)

// TestAdvertiseGRPCAddrIsForClientsOnly: with --advertise-grpc-addr (a
// published port, say) clients are redirected to it and Status reports
// it (and --advertise-http-addr as each node's HTTP address, which the
// dashboard links to), while the nodes keep reaching each other at their own addresses:
// here nothing listens at the advertised ones, and forwarding, Status's
// applied indexes and Verify still work.
func TestAdvertiseGRPCAddrIsForClientsOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster")
	}
	ports, err := harness.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*harness.Node, 3)
	published := map[string]string{}     // node id -> advertised client address
	publishedHTTP := map[string]string{} // node id -> advertised HTTP address (the dashboard's links)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		published[id] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))
		publishedHTTP[id] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3+i]))
		nodes[i] = harness.TestNode(t, binary, id, "--advertise-grpc-addr", published[id], "--advertise-http-addr", publishedHTTP[id])
	}
	flags := harness.JoinFlags(nodes)
	for _, n := range nodes {
		n.Args = append(n.Args, flags...)
		n.Start()
	}
	c := harness.Dial(t, nodes...)
	ctx := ctxT(t)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := harness.WaitReady(wctx, c); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, nodes)
	var follower *harness.Node
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}

	// Writes through a follower are forwarded to the leader's own address.
	fc := raftqv1.NewBrokerClient(rawConn(t, follower))
	if _, err := fc.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "pub"}); err != nil {
		t.Fatalf("create through a follower: %v", err)
	}
	if _, err := fc.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: "pub", Messages: []*raftqv1.EnqueueMessage{{Payload: []byte("x")}}}); err != nil {
		t.Fatalf("enqueue through a follower: %v", err)
	}
	// A Lease stream on a follower is redirected to the published address.
	s, err := fc.Lease(ctx, &raftqv1.LeaseRequest{Queue: "pub"})
	if err == nil {
		_, err = s.Recv()
	}
	if got := redirectLeader(err); got != published[leader.ID] {
		t.Fatalf("lease on a follower: %v (redirect to %q, want the published %q)", err, got, published[leader.ID])
	}
	// Status names the published addresses for clients, the nodes' own for
	// peers, and has every node's applied index (asked at its own address).
	harness.Eventually(t, 30*time.Second, func() error {
		st, err := statusOf(ctx, t, follower)
		if err != nil {
			return err
		}
		if st.LeaderAddr != published[leader.ID] {
			return fmt.Errorf("leader_addr %q, want %q", st.LeaderAddr, published[leader.ID])
		}
		for _, nd := range st.Nodes {
			var own string
			for _, n := range nodes {
				if n.ID == nd.Id {
					own = n.GRPC
				}
			}
			if nd.GrpcAddr != published[nd.Id] || nd.PeerGrpcAddr != own {
				return fmt.Errorf("%s: grpc_addr %q peer_grpc_addr %q, want %q and %q", nd.Id, nd.GrpcAddr, nd.PeerGrpcAddr, published[nd.Id], own)
			}
			if nd.AppliedIndex == 0 {
				return fmt.Errorf("%s: no applied index", nd.Id)
			}
			if nd.HttpAddr != publishedHTTP[nd.Id] {
				return fmt.Errorf("%s: http_addr %q, want the published %q", nd.Id, nd.HttpAddr, publishedHTTP[nd.Id])
			}
		}
		return nil
	})
	v, err := raftqv1.NewClusterClient(rawConn(t, follower)).Verify(ctx, &raftqv1.VerifyRequest{})
	if err != nil || !v.Consistent || len(v.Nodes) != 3 {
		t.Fatalf("verify through a follower: %v %v", v, err)
	}
}
