package harness

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are picked in [portsLow, ephemeral low bound), at most up to
// portsHigh.
const (
	portsLow  = 20000
	portsHigh = 32000
)

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
// thousand makes two runs choosing the same one unlikely.
func FreePorts(n int) ([]int, error) {
	high := min(portsHigh, ephemeralLow())
	if high-portsLow < 4*n {
		return nil, fmt.Errorf("harness: no room for %d ports below the ephemeral range (%d)", n, high)
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
