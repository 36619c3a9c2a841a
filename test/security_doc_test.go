package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var docTestMarker = regexp.MustCompile(`^<!-- doc-test: ([a-z]+) -->$`)

// TestSecurityDocBlocks runs every ```sh block of docs/security.md as
// written, with the README tour's conventions (tour_test.go: `# →` lines,
// exports, the machines 10.0.0.K on 127.0.0.K), plus one mapping of its
// own: the serve block's /etc/raftq/ is each node's own directory. The
// blocks run in the order a new cluster needs them, not the page's: the
// hardened cluster's certificates, nodes and client environment first
// (the page puts them late, after the concepts), then Bootstrap (the
// first admin makes ops), Permissions and Token rotation as ops. A
// grpcurl line runs when grpcurl is on PATH and is logged as skipped
// otherwise.
func TestSecurityDocBlocks(t *testing.T) {
	blocks, unmarked := docBlocks(t, "docs/security.md", docTestMarker)
	if len(unmarked) > 0 {
		t.Fatalf("docs/security.md has ```sh blocks without a <!-- doc-test: NAME --> marker at lines %v: every block must run", unmarked)
	}
	order := []string{"certs", "serve", "client", "bootstrap", "permissions", "rotation"}
	if len(blocks) != len(order) {
		t.Fatalf("docs/security.md has blocks %v; this test runs %v", keys(blocks), order)
	}
	for k := 1; k <= 3; k++ {
		portsFreeOn(t, "127.0.0."+strconv.Itoa(k), 7400, 7401, 7402, 7403)
	}
	ctx := t.Context()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(dir, "bin", "raftq")); err != nil {
		t.Fatal(err)
	}
	sh := &tourShell{t: t, dir: dir, exports: []string{`export PATH="$PWD/bin:$PATH"`}}
	for _, c := range blocks["certs"] {
		sh.check(ctx, tourCmd{line: onLoopback(c.line), expect: c.expect})
	}
	nodes := startDocNodes(t, sh, blocks["serve"], "/etc/raftq/")
	client := blocks["client"]
	waitLeader(t, sh, nodes, onLoopback(client[0].line))
	_, haveGrpcurl := exec.LookPath("grpcurl")
	for _, name := range order[2:] {
		for _, c := range blocks[name] {
			if strings.HasPrefix(c.line, "grpcurl ") && haveGrpcurl != nil {
				t.Logf("%s: skipped, no grpcurl on PATH: %s", name, c.line)
				continue
			}
			sh.check(ctx, tourCmd{line: onLoopback(c.line), expect: c.expect})
		}
	}
	noSecretWarnings(t, nodes)
}

func keys(m map[string][]tourCmd) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
