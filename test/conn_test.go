package test

import (
	"testing"

	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawConn is a plain gRPC connection to one node, for calls that must not
// go through the client's retries.
func rawConn(t testing.TB, n *harness.Node) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
