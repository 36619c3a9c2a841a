package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func ipNet(s string) net.Addr {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

func TestAdvertise(t *testing.T) {
	addrs := func(list ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			var out []net.Addr
			for _, s := range list {
				out = append(out, ipNet(s))
			}
			return out, nil
		}
	}
	container := addrs("127.0.0.1/8", "::1/128", "172.18.0.3/16", "fe80::42:acff:fe12:3/64")
	for _, tc := range []struct {
		bind, host string
		addrs      func() ([]net.Addr, error)
		want, err  string
	}{
		{"127.0.0.1:7400", "", container, "127.0.0.1:7400", ""},
		{"0.0.0.0:7400", "n1", container, "n1:7400", ""},
		{"0.0.0.0:7400", "", container, "172.18.0.3:7400", ""},
		{"[::]:7400", "", addrs("::1/128", "2001:db8::5/64"), "[2001:db8::5]:7400", ""},
		{":7400", "", addrs("127.0.0.1/8"), "", "no non-loopback address"},
		{"0.0.0.0:7400", "", addrs("10.0.0.1/8", "192.168.1.2/24"), "", "10.0.0.1, 192.168.1.2"},
		{"0.0.0.0:7400", "", func() ([]net.Addr, error) { return nil, errors.New("boom") }, "", "boom"},
		{"nonsense", "", container, "", "missing port"},
	} {
		got, err := advertise(tc.bind, tc.host, tc.addrs)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("advertise(%q, %q): %q, %v; want an error containing %q", tc.bind, tc.host, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("advertise(%q, %q): %q, %v; want %q", tc.bind, tc.host, got, err, tc.want)
		}
	}
}

// TestResolveNodeID: a given id must match the one recorded in the data
// dir; without one the recorded id, else the host name, is used.
func TestResolveNodeID(t *testing.T) {
	host, _ := os.Hostname()
	recorded := t.TempDir()
	if err := os.WriteFile(filepath.Join(recorded, "node-id"), []byte("n1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	for _, tc := range []struct {
		name        string
		o           serveOptions
		want, error string
	}{
		{"fresh dir, no id: the host name", serveOptions{dataDir: fresh}, host, ""},
		{"fresh dir, id given", serveOptions{dataDir: fresh, nodeID: "n7", nodeIDGiven: true}, "n7", ""},
		{"recorded, no id: the recorded one", serveOptions{dataDir: recorded}, "n1", ""},
		{"recorded, same id", serveOptions{dataDir: recorded, nodeID: "n1", nodeIDGiven: true}, "n1", ""},
		{"recorded, other id", serveOptions{dataDir: recorded, nodeID: "n2", nodeIDGiven: true}, "", "belongs to node n1"},
		{"empty id given", serveOptions{dataDir: fresh, nodeIDGiven: true}, "", "--node-id is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			err := resolveNodeID(&o)
			if tc.error != "" {
				if err == nil || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("got %q, %v; want an error containing %q", o.nodeID, err, tc.error)
				}
				return
			}
			if err != nil || o.nodeID != tc.want {
				t.Fatalf("got %q, %v; want %q", o.nodeID, err, tc.want)
			}
		})
	}
}
