package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDataDirKeepsItsNodeID: the first start records the id in the data
// dir; a restart under the same id works, one under another id is refused
// with an error naming both ids, and the record is left as it was.
func TestDataDirKeepsItsNodeID(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "a", dir, 1)
	if got, err := PersistedNodeID(cfg.DataDir); err != nil || got != "" {
		t.Fatalf("before the first start: %q, %v; want none", got, err)
	}
	n := startNode(t, cfg)
	shutdown(t, n)
	if got, err := PersistedNodeID(cfg.DataDir); err != nil || got != "a" {
		t.Fatalf("after the first start: %q, %v; want a", got, err)
	}

	other := cfg
	other.NodeID = "b"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := New(ctx, other, &testFSM{}, nil)
	if !errors.Is(err, ErrNodeIDMismatch) || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("start as b on a's data dir: %v; want ErrNodeIDMismatch naming a and b", err)
	}
	if got, _ := PersistedNodeID(cfg.DataDir); got != "a" {
		t.Fatalf("the refused start changed the record to %q", got)
	}

	n = startNode(t, cfg) // the same id starts again
	shutdown(t, n)
}

func TestPersistedNodeIDRefusesAnEmptyRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, nodeIDFile), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PersistedNodeID(dir); err == nil {
		t.Fatal("an empty node-id file was accepted")
	}
}
