package harness

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports are picked in [portsLow, ephemeral low bound), at most up to
// portsHigh.
const (
	portsLow  = 20000
	portsHigh = 32000
)

// handedOut is every port FreePorts has returned in this process. The
// exception to "no package-level mutable state" is deliberate: ports are
// a resource of the process (of the machine, really), and the callers
// that must not collide are unrelated tests and nodes that share nothing
// else. A node's ports are probed and closed when it is prepared and
// bound only when it starts, so without this record a later node of the
// same cluster could be handed a port an earlier one had not bound yet.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts reserves n distinct loopback ports, free for TCP and UDP
// (gossip uses both), closed before returning.
//
// They are picked at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768+ by default), never by
// binding :0. A port the kernel hands out for :0 comes from the ephemeral
// range, and once the probe closes it, the kernel may hand the same
// number to any outgoing connection on the machine (this test's clients,
// another test binary) as its source port before the node binds it; the
// node then fails with "address already in use". Below that range only
// an explicit bind can take a port, and a random pick among twelve
// thousand makes two runs choosing the same one unlikely. Within one
// process a port is never handed out twice (handedOut), so the nodes of
// one test, prepared one by one before any of them binds, never share one.
func FreePorts(n int) ([]int, error) {
	high := min(portsHigh, ephemeralLow())
	handedOut.Lock()
	defer handedOut.Unlock()
	if high-portsLow-len(handedOut.ports) < 4*n {
		return nil, fmt.Errorf("harness: no room for %d more ports below the ephemeral range (%d; %d handed out already)", n, high, len(handedOut.ports))
	}
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("harness: no free loopback ports in %d-%d", portsLow, high-1)
		}
		port := portsLow + rand.IntN(high-portsLow)
		if handedOut.ports[port] {
			continue
		}
		tl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken; held ones are refused here too, so no duplicates
		}
		ul, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			tl.Close()
			continue
		}
		held = append(held, tl, ul)
		ports = append(ports, port)
	}
	for _, p := range ports {
		handedOut.ports[p] = true
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}
