package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// advertise replaces the host of a bind address with the advertise host.
// A bind to all interfaces (0.0.0.0, ::) with no advertise host advertises
// the machine's one non-loopback address (a container's own); with several
// the choice is the operator's.
func advertise(bind, host string, addrs func() ([]net.Addr, error)) (string, error) {
	h, p, err := net.SplitHostPort(bind)
	if err != nil {
		return "", err
	}
	if host != "" {
		return net.JoinHostPort(host, p), nil
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		ip, err := soleAddress(addrs)
		if err != nil {
			return "", fmt.Errorf("bind address %s is every interface: %w; set --advertise-host", bind, err)
		}
		return net.JoinHostPort(ip.String(), p), nil
	}
	return bind, nil
}

// soleAddress is the one global unicast address among addrs (IPv4
// preferred: an IPv6 link-local or a second family is no reason to fail).
func soleAddress(addrs func() ([]net.Addr, error)) (net.IP, error) {
	list, err := addrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var v4, v6 []net.IP
	for _, a := range list {
		ipn, ok := a.(*net.IPNet)
		if !ok || !ipn.IP.IsGlobalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			v4 = append(v4, ipn.IP)
		} else {
			v6 = append(v6, ipn.IP)
		}
	}
	pick := v4
	if len(pick) == 0 {
		pick = v6
	}
	switch len(pick) {
	case 1:
		return pick[0], nil
	case 0:
		return nil, fmt.Errorf("no non-loopback address to advertise")
	default:
		s := make([]string, len(pick))
		for i, ip := range pick {
			s[i] = ip.String()
		}
		return nil, fmt.Errorf("several addresses could be advertised (%s)", strings.Join(s, ", "))
	}
}

// checkHostPort accepts host:port with a host and a port in 1-65535.
func checkHostPort(s string) error {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if h == "" {
		return fmt.Errorf("%q has no host", s)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not in 1-65535", s, p)
	}
	return nil
}
