package harness

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Ports are picked in [portsLow, ephemeral low bound), at most up to
// portsHigh.
const (
	portsLow  = 20000
	portsHigh = 32000
)

// handedOut is every port FreePorts has returned in this process, with
// the lock file that reserves it across processes (held open until the
// process exits, when the kernel drops the lock). The
// exception to "no package-level mutable state" is deliberate: ports are
// a resource of the process (of the machine, really), and the callers
// that must not collide are unrelated tests and nodes that share nothing
// else. A node's ports are probed and closed when it is prepared and
// bound only when it starts, so without this record a later node of the
// same cluster could be handed a port an earlier one had not bound yet.
var handedOut = struct {
	sync.Mutex
	ports map[int]*os.File
}{ports: map[int]*os.File{}}

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
//
// Across processes a port is reserved by an flock on a file named for it
// (reserve): go test runs several test binaries at once, each probing
// ports and binding them later, and two of them picking the same free
// port in the same window was a real flake ("bind: address already in
// use" on a node that a fresh-clone make test started). The lock lives
// as long as the process, so a node that is killed and restarted on its
// ports keeps them reserved in between.
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
		if handedOut.ports[port] != nil {
			continue
		}
		lock, err := reserve(port)
		if err != nil {
			continue // another process holds it, or it cannot be reserved
		}
		tl, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			lock.Close()
			continue // taken; held ones are refused here too, so no duplicates
		}
		ul, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			tl.Close()
			lock.Close()
			continue
		}
		held = append(held, tl, ul)
		ports = append(ports, port)
		handedOut.ports[port] = lock
	}
	return ports, nil
}

// reserve takes an exclusive, non-blocking flock on the file naming port
// in a directory every test process on the machine shares. The file is
// never removed: removing it would let a second process lock a new file
// of the same name while the first still holds the old one.
func reserve(port int) (*os.File, error) {
	dir := filepath.Join(os.TempDir(), "raftq-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
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
