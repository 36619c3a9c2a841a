package test

import (
	"context"
	"testing"

	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawConn is a plain gRPC connection to one node, for calls that must not
// go through the client's retries. It shows the node's bootstrap token,
// if it has one (harness.Node.UseBootstrapToken): an admin's.
func rawConn(t testing.TB, n *harness.Node) *grpc.ClientConn {
	t.Helper()
	return connAs(t, n, n.Token)
}

// connAs is rawConn showing token instead (none when empty).
func connAs(t testing.TB, n *harness.Node, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(n.GRPC, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// bearer is a token as per-RPC credentials, over plaintext too (loopback
// test nodes).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
