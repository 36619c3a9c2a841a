package raftmux

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/raftq/raftq/internal/hostport"
)

// Listen opens a node's Raft port: it listens on bind and returns the
// address others dial, advertise ("" = the bound address), which must be
// a specific address. An advertised host name stays a name (NamedAddr):
// each dial resolves it. Its IP is looked up once here all the same, so
// a name that does not resolve fails the start.
func Listen(ctx context.Context, bind, advertise string) (net.Listener, net.Addr, error) {
	var adv net.Addr
	if advertise != "" {
		host, port, err := hostport.Split(advertise)
		if err != nil {
			return nil, nil, fmt.Errorf("raft advertise: %w", err)
		}
		ip, err := hostport.ResolveIP(ctx, host)
		if err != nil {
			return nil, nil, fmt.Errorf("raft advertise: %w", err)
		}
		adv = &net.TCPAddr{IP: ip, Port: port}
		if net.ParseIP(host) == nil {
			// A name stays a name in the Raft configuration, and each
			// dial resolves it: a container recreated on its network
			// (all of a compose project restarted, say) often comes back
			// with another node's old address, and peers that dialled
			// the old IPs sent one node's RPCs to another until the
			// configuration was corrected.
			adv = NamedAddr(net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", bind)
	if err != nil {
		return nil, nil, fmt.Errorf("raft transport on %s: %w", bind, err)
	}
	if adv == nil {
		adv = ln.Addr()
	}
	if ta, ok := adv.(*net.TCPAddr); ok && (ta.IP == nil || ta.IP.IsUnspecified()) || !ok && !isNamedAddr(adv) {
		ln.Close()
		return nil, nil, fmt.Errorf("raft transport on %s: raft address %s is not advertisable: set the advertise address", bind, adv)
	}
	return ln, adv, nil
}

// NamedAddr is an advertised Raft address by host name (host:port), kept
// as the name in the Raft configuration; dials resolve it each time.
type NamedAddr string

// Network is "tcp".
func (a NamedAddr) Network() string { return "tcp" }

// String is host:port.
func (a NamedAddr) String() string { return string(a) }

func isNamedAddr(a net.Addr) bool { _, ok := a.(NamedAddr); return ok }
