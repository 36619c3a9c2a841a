package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "raftq.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A flag beats RAFTQ_<FLAG>, which beats the file, which beats the default;
// lists and every flag type come from the file.
func TestServeConfigPrecedence(t *testing.T) {
	path := writeFile(t, "node-id: from-file\ngrpc-addr: 127.0.0.1:1\nhttp-addr: 127.0.0.1:2\njoin: [a:1, b:2]\nlease-grace: 7s\nbootstrap-expect: 3\nlog-store: bolt\n")
	t.Setenv("RAFTQ_GRPC_ADDR", "127.0.0.1:10")
	cmd := newServeCmd()
	if err := cmd.ParseFlags([]string{"--config", path, "--http-addr", "127.0.0.1:20"}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.PreRunE(cmd, nil); err != nil {
		t.Fatal(err)
	}
	fs := cmd.Flags()
	for flag, want := range map[string]string{
		"node-id":          "from-file",
		"grpc-addr":        "127.0.0.1:10", // env over file
		"http-addr":        "127.0.0.1:20", // flag over file
		"join":             "[a:1,b:2]",
		"lease-grace":      "7s",
		"bootstrap-expect": "3",
		"log-store":        "bolt",
		"raft-addr":        "127.0.0.1:7401", // default
	} {
		if got := fs.Lookup(flag).Value.String(); got != want {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	good := writeFile(t, "# a comment\nnode-id: n1\nmax-queued-bytes: 1048576\ninsecure: true\nlog-store: wal\n")
	r := raftq(t, "127.0.0.1:1", "", "config", "check", good)
	if r.code != 0 || !strings.Contains(r.stdout, "ok, 4 settings") {
		t.Fatalf("good file: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	bad := writeFile(t, "node-id: n1\nnode_id: n2\nlease-grace: soon\nbootstrap-expect: -x\nconfig: other.yaml\nlog-store: fast\n")
	r = raftq(t, "127.0.0.1:1", "", "config", "check", bad)
	if r.code == 0 {
		t.Fatal("a bad file passed the check")
	}
	for _, want := range []string{
		`:2: unknown key "node_id"`,
		`:3: lease-grace: "soon"`,
		`:4: bootstrap-expect: "-x"`,
		`:5: unknown key "config"`,
		`:6: log-store: "fast"`,
		`want wal or bolt`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r := raftq(t, "127.0.0.1:1", "", "config", "check", writeFile(t, "- a\n- b\n")); r.code == 0 || !strings.Contains(r.stderr, "want a mapping") {
		t.Fatalf("a list: exit %d, %q", r.code, r.stderr)
	}
	// serve refuses the same file before starting anything.
	cmd := newServeCmd()
	if err := cmd.ParseFlags([]string{"--config", bad}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.PreRunE(cmd, nil); err == nil || !strings.Contains(err.Error(), `unknown key "node_id"`) {
		t.Fatalf("serve with a bad config: %v", err)
	}
}

// TestConfigCheckReportsWhatServeRefuses: a value of the right type that
// serve would refuse at start (a log level, auth mode or address it cannot
// use, half of the TLS flags, a key given twice) is reported by config
// check with its line, not passed as ok; serve refuses the same file
// before binding anything.
func TestConfigCheckReportsWhatServeRefuses(t *testing.T) {
	bad := writeFile(t, strings.Join([]string{
		"log-level: loud",                // 1
		"auth: bogus",                    // 2
		"grpc-addr: not-an-address",      // 3
		"advertise-grpc-addr: nope",      // 4
		"metrics-top-keys: -1",           // 5
		"bootstrap-expect: -2",           // 6
		"tls-cert: n1.pem",               // 7
		"node-id: n1",                    // 8
		"node-id: n2",                    // 9
		"http-addr: 127.0.0.1:99999",     // 10
		"admin-cn: \"bad name\"",         // 11
		"raft-addr: 127.0.0.1:7401",      // 12: fine
		"advertise-host: n1.example.com", // 13: fine
		"advertise-http-addr: nope",      // 14
		"dashboard-stall-after: 0s",      // 15
	}, "\n")+"\n")
	r := raftq(t, "127.0.0.1:1", "", "config", "check", bad)
	if r.code == 0 {
		t.Fatalf("a file serve refuses passed the check: %q", r.stdout)
	}
	for _, want := range []string{
		`:1: log-level: "loud"`,
		`:2: auth: "bogus"`, "want none, token or mtls",
		`:3: grpc-addr: "not-an-address"`,
		`:4: advertise-grpc-addr: "nope"`,
		`:5: metrics-top-keys: "-1"`,
		`:6: bootstrap-expect: "-2"`,
		`:7: tls-cert: "n1.pem"`, "TLS needs all of --tls-cert, --tls-key and --tls-ca",
		`:9: node-id is set twice (first on line 8)`,
		`:10: http-addr: "127.0.0.1:99999"`,
		`:11: admin-cn: "bad name"`,
		`:14: advertise-http-addr: "nope"`,
		`:15: dashboard-stall-after: "0s"`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check's report lacks %q:\n%s", want, r.stderr)
		}
	}
	for _, fine := range []string{":12:", ":13:"} {
		if strings.Contains(r.stderr, fine) {
			t.Errorf("config check reports a good line (%s):\n%s", fine, r.stderr)
		}
	}

	// serve refuses such a value before it binds a port.
	for _, line := range []string{"log-level: loud", "auth: bogus", "grpc-addr: not-an-address", "node-id: a\nnode-id: b"} {
		cmd := newServeCmd()
		if err := cmd.ParseFlags([]string{"--config", writeFile(t, "data-dir: "+t.TempDir()+"\n"+line+"\n")}); err != nil {
			t.Fatal(err)
		}
		err := cmd.PreRunE(cmd, nil)
		if err == nil {
			t.Errorf("serve accepted a config with %q", line)
		}
	}
}
