package main

import (
	"strings"
	"testing"

	"github.com/raftq/raftq/membership"
)

// TestServeZone: --zone is read from the command line, RAFTQ_ZONE and the
// config file like every serve flag, reaches the node's cluster config,
// and a name that is not DNS-label-like is refused naming where it came
// from, before anything starts.
func TestServeZone(t *testing.T) {
	long := strings.Repeat("a", membership.MaxZoneLen)
	for _, tc := range []struct {
		name    string
		args    []string
		env     string // RAFTQ_ZONE, if set
		file    string // config file text, if set
		want    string // the zone the node gets
		wantErr string // else: the error names this
	}{
		{name: "default: none"},
		{name: "flag", args: []string{"--zone", "eu-west-1a"}, want: "eu-west-1a"},
		{name: "env", env: "rack-2", want: "rack-2"},
		{name: "file", file: "zone: z3\n", want: "z3"},
		{name: "flag over env over file", args: []string{"--zone", "a"}, env: "b", file: "zone: c\n", want: "a"},
		{name: "env over file", env: "b", file: "zone: c\n", want: "b"},
		{name: "63 characters", args: []string{"--zone", long}, want: long},
		{name: "a digit at each end", args: []string{"--zone", "1-2"}, want: "1-2"},
		{name: "upper case", args: []string{"--zone", "EU-1"}, wantErr: `"--zone" flag: zone "EU-1": want lower-case`},
		{name: "64 characters", args: []string{"--zone", long + "a"}, wantErr: `"--zone" flag: zone "` + long + `a": 64 characters, at most 63`},
		{name: "leading dash", args: []string{"--zone", "-a"}, wantErr: `"--zone" flag: zone "-a": want lower-case`},
		{name: "trailing dash", env: "a-", wantErr: `RAFTQ_ZONE="a-": invalid argument "a-" for "--zone" flag: zone "a-": want lower-case`},
		{name: "a dot", env: "eu.1", wantErr: `RAFTQ_ZONE="eu.1": invalid argument "eu.1" for "--zone" flag: zone "eu.1": want lower-case`},
		{name: "a space in the file", file: "zone: \"eu 1\"\n", wantErr: `raftq.yaml:1: zone: "eu 1": invalid argument "eu 1" for "--zone" flag: zone "eu 1": want lower-case`},
		{name: "an underscore in the file", file: "zone: eu_1\n", wantErr: `raftq.yaml:1: zone: "eu_1": invalid argument "eu_1" for "--zone" flag`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("RAFTQ_ZONE", tc.env)
			}
			args := append([]string{"--data-dir", t.TempDir(), "--node-id", "n1", "--grpc-addr", "127.0.0.1:0",
				"--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", ""}, tc.args...)
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			cmd, o := serveCommand()
			err := cmd.ParseFlags(args)
			if err == nil {
				err = cmd.PreRunE(cmd, nil)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(o.zone) != tc.want {
				t.Fatalf("zone %q, want %q", o.zone, tc.want)
			}
			cfg, err := hostConfig(o, memoryBudget{})
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Node.Cluster.Zone; got != tc.want {
				t.Fatalf("cluster config zone %q, want %q", got, tc.want)
			}
		})
	}
}

// TestServeRefusesBadZone: the whole command refuses a bad --zone, naming
// it, and exits 1 without starting a node.
func TestServeRefusesBadZone(t *testing.T) {
	dir := t.TempDir()
	r := runArgs(t, "serve", "--data-dir", dir, "--node-id", "n1", "--zone", "Rack_1",
		"--grpc-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--http-addr", "")
	if r.code != 1 || !strings.Contains(r.stderr, `"--zone" flag: zone "Rack_1"`) {
		t.Fatalf("serve --zone Rack_1: %+v", r)
	}
}
