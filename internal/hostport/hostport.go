// Package hostport parses host:port addresses and resolves their host
// the one way the node does it everywhere (gossip, the Raft port, the
// offline restore): an IP as it is, a name looked up, IPv4 preferred.
package hostport

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// Split splits host:port and checks the port.
func Split(hostport string) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", hostport)
	}
	return host, port, nil
}

// ResolveIP returns host as an IP, looking it up if it is a name (IPv4
// preferred).
func ResolveIP(ctx context.Context, host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", host, err)
	}
	for _, a := range addrs {
		if a.IP.To4() != nil {
			return a.IP, nil
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %q: no addresses", host)
	}
	return addrs[0].IP, nil
}
