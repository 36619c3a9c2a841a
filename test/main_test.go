// Package test holds black-box tests that build and run the raftq binary
// and talk to it only through the client and the public API.
package test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/raftq/raftq/test/harness"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "raftq-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, err = harness.Build(context.Background(), dir, os.Getenv("RAFTQ_TEST_NORACE") == "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
