package host_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/host"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/test/harness"
)

// TestFailedStartReleasesEverything: a node whose data group cannot start
// (its data dir is a file) fails New with the reason, after its listeners
// were bound and its HTTP port served; what started is stopped again, so
// the ports can be bound at once and no goroutine is left behind.
func TestFailedStartReleasesEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	dir := t.TempDir()
	at, err := testcluster.FreeAddrs()
	if err != nil {
		t.Fatal(err)
	}
	httpPort, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testcluster.Config("n1", dir, at, 1, nil, testcluster.Logger())
	cfg.HTTPAddr = net.JoinHostPort("127.0.0.1", itoa(httpPort[0]))
	if err := os.WriteFile(filepath.Join(dir, "n1"), []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg)
	if err == nil {
		_ = h.Close(ctx)
		t.Fatal("a node started on a data dir that is a file")
	}
	// The data group's own failure, after the listeners were bound.
	if !strings.Contains(err.Error(), "start node") {
		t.Fatalf("New: %v, want the data group's failure to start", err)
	}
	for _, addr := range []string{at.GRPC, cfg.HTTPAddr} {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s still bound after the failed start: %v", addr, err)
		}
		lis.Close()
	}
	harness.CheckNoLeaks(t, base)
}

func itoa(n int) string { return strconv.Itoa(n) }
