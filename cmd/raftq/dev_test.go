package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// raftq dev checks every port of every node before it starts any: a port
// in use is named, with its node, its role and the process holding it,
// and nothing is started (before, n1 restarted every 5 s with only `exit
// status 1` while n2 and n3 joined whatever held its gossip port).
func TestDevChecksPortsBeforeStarting(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	base := held.Addr().(*net.TCPAddr).Port - 10 // n2's gRPC port is held
	var out bytes.Buffer
	err = runDev(context.Background(), &out, "/nonexistent/raftq", 2, base, t.TempDir(), false, 0)
	if err == nil {
		t.Fatal("runDev started with a port in use")
	}
	want := fmt.Sprintf("port 127.0.0.1:%d (n2's gRPC) is in use by pid %d", base+10, os.Getpid())
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--base-port") {
		t.Fatalf("error %q does not say %q and how to pick other ports", err, want)
	}
	if strings.Contains(err.Error(), "start n1") || out.Len() > 0 {
		t.Fatalf("a node was started: %v\n%s", err, out.String())
	}
}
