//go:build linux

package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Network is a private /24 of hosts: a Linux bridge in a namespace of its
// own (so the root namespace's firewall, e.g. Docker's FORWARD DROP with
// br_netfilter, never sees the traffic), one namespace per host with a
// veth into the bridge, and one veth from the root namespace carrying the
// test process's address on the segment. Every name starts with a prefix
// made of the owner's pid and a counter, so parallel runs never clash and
// leftovers of a dead run can be told apart and swept.
type Network struct {
	Prefix string
	Subnet string // "10.77.X": hosts are .11, .12, ...; the test process is .1
	HostIP string
	Hosts  []*Host
	log    *slog.Logger

	mu       sync.Mutex
	closed   bool
	names    []string // namespaces created, in order
	rootLink string   // the veth end in the root namespace, once created
}

// Host is one namespace with one address.
type Host struct {
	Index int
	NS    string // namespace name
	IP    string
}

var netCounter atomic.Int64

// namePattern matches every name this harness gives a namespace or a root
// link: rqc<pid>-<n>-... or rqc<pid>-<n>h.
var namePattern = regexp.MustCompile(`^rqc(\d+)-(\d+)(-|h$)`)

// NewNetwork creates a segment with n hosts. On error it removes whatever
// it created.
func NewNetwork(ctx context.Context, log *slog.Logger, n int) (nw *Network, err error) {
	began := time.Now()
	sweepLeftovers(ctx, log)
	if took := time.Since(began); took > 5*time.Second {
		log.Warn("sweeping leftovers was slow", "took", took.Round(time.Millisecond))
	}
	nw = &Network{Prefix: fmt.Sprintf("rqc%d-%d", os.Getpid(), netCounter.Add(1)), log: log}
	// The error returns set nw to nil: clean up what this call created.
	created := nw
	defer func() {
		if err != nil {
			created.Close()
		}
	}()
	if nw.Subnet, err = freeSubnet(ctx); err != nil {
		return nil, err
	}
	nw.HostIP = nw.Subnet + ".1"
	sw := nw.Prefix + "-sw"
	if err := nw.addNS(ctx, sw); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
		// The uplink to the root namespace: made inside sw, then one end
		// moved out, so no name is ever created in the root namespace
		// except our own.
		{"-n", sw, "link", "add", nw.Prefix + "h", "type", "veth", "peer", "name", "uplink"},
		{"-n", sw, "link", "set", "uplink", "master", "br0"},
		{"-n", sw, "link", "set", "uplink", "up"},
	}
	if err := ipAll(ctx, steps); err != nil {
		return nil, err
	}
	nw.mu.Lock()
	nw.rootLink = nw.Prefix + "h"
	nw.mu.Unlock()
	if err := ipAll(ctx, [][]string{
		{"-n", sw, "link", "set", nw.rootLink, "netns", "1"},
		{"addr", "add", nw.HostIP + "/24", "dev", nw.rootLink},
		{"link", "set", nw.rootLink, "up"},
	}); err != nil {
		return nil, err
	}
	for i := range n {
		h := &Host{Index: i, NS: fmt.Sprintf("%s-n%d", nw.Prefix, i+1), IP: fmt.Sprintf("%s.%d", nw.Subnet, 11+i)}
		if err := nw.addNS(ctx, h.NS); err != nil {
			return nil, err
		}
		v, p := fmt.Sprintf("v%d", i+1), fmt.Sprintf("p%d", i+1)
		if err := ipAll(ctx, [][]string{
			{"-n", sw, "link", "add", v, "type", "veth", "peer", "name", p},
			{"-n", sw, "link", "set", p, "netns", h.NS},
			{"-n", h.NS, "link", "set", p, "name", "eth0"},
			{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
			{"-n", sw, "link", "set", v, "master", "br0"},
			{"-n", sw, "link", "set", v, "up"},
		}); err != nil {
			return nil, err
		}
		nw.Hosts = append(nw.Hosts, h)
	}
	log.Info("network up", "prefix", nw.Prefix, "subnet", nw.Subnet+".0/24", "hosts", n)
	return nw, nil
}

func (nw *Network) addNS(ctx context.Context, name string) error {
	if err := ip(ctx, "netns", "add", name); err != nil {
		return err
	}
	nw.mu.Lock()
	nw.names = append(nw.names, name)
	nw.mu.Unlock()
	return ip(ctx, "-n", name, "link", "set", "lo", "up")
}

// Close removes everything the network created (idempotent). Processes
// in its namespaces must be gone first; stragglers are killed.
func (nw *Network) Close() {
	nw.mu.Lock()
	if nw.closed {
		nw.mu.Unlock()
		return
	}
	nw.closed = true
	names, link := nw.names, nw.rootLink
	nw.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if link != "" {
		// Deleting one end deletes the pair, at once (namespace teardown
		// would do it too, but asynchronously).
		_ = ip(ctx, "link", "del", link)
	}
	for i := len(names) - 1; i >= 0; i-- {
		removeNS(ctx, nw.log, names[i])
	}
	nw.log.Info("network removed", "prefix", nw.Prefix)
}

// removeNS kills what still runs in a namespace and deletes it.
func removeNS(ctx context.Context, log *slog.Logger, name string) {
	if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if err := ip(ctx, "netns", "del", name); err != nil {
		log.Warn("netns del", "ns", name, "err", err)
	}
}

// Leftovers lists namespaces and root links whose names carry prefix (all
// of this harness's when prefix is "rqc"): empty after a clean teardown.
func Leftovers(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	ns, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(ns), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			out = append(out, "netns "+f[0])
		}
	}
	links, err := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":")
		if strings.HasPrefix(name, prefix) {
			out = append(out, "link "+name)
		}
	}
	return out, nil
}

// sweepLeftovers removes namespaces and links of harness runs whose
// process is gone (killed by a test timeout, say). Names of live runs and
// names not made by this harness are never touched.
func sweepLeftovers(ctx context.Context, log *slog.Logger) {
	left, err := Leftovers(ctx, "rqc")
	if err != nil {
		return
	}
	for _, l := range left {
		kind, name, _ := strings.Cut(l, " ")
		m := namePattern.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // its run is alive
		}
		log.Warn("removing leftover of a dead chaos run", "what", l)
		if kind == "link" {
			_ = ip(ctx, "link", "del", name)
		} else {
			removeNS(ctx, log, name)
		}
	}
}

// freeSubnet picks 10.77.X.0/24 with X not in use by any address or route
// of the root namespace.
func freeSubnet(ctx context.Context) (string, error) {
	began := time.Now()
	addrs, err := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip addr (ran %v): %w", time.Since(began).Round(time.Millisecond), err)
	}
	routes, err := exec.CommandContext(ctx, "ip", "-4", "route", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip route: %w", err)
	}
	used := string(addrs) + string(routes)
	for range 100 {
		x, err := rand.Int(rand.Reader, big.NewInt(254))
		if err != nil {
			return "", err
		}
		subnet := fmt.Sprintf("10.77.%d", x.Int64()+1)
		if !strings.Contains(used, subnet+".") {
			return subnet, nil
		}
	}
	return "", errors.New("no free 10.77.X.0/24")
}

// Exec runs a command inside host's namespace.
func (nw *Network) Exec(ctx context.Context, h *Host, args ...string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", h.NS}, args...)...)
}

// Iptables runs iptables (waiting for the xtables lock) inside host's
// namespace. Rules live in the namespace and go away with it.
func (nw *Network) Iptables(ctx context.Context, h *Host, args ...string) error {
	return nw.Exec(ctx, h, append([]string{"iptables", "-w", "5"}, args...)...)
}

// FlushFilters removes every filter rule (partitions, packet loss) from
// every host; the nat rules of the latency proxy stay.
func (nw *Network) FlushFilters(ctx context.Context) error {
	var errs []error
	for _, h := range nw.Hosts {
		errs = append(errs, nw.Iptables(ctx, h, "-F", "INPUT"), nw.Iptables(ctx, h, "-F", "OUTPUT"))
	}
	return errors.Join(errs...)
}

// Cut drops all traffic between hosts a and b, both ways, on both ends.
func (nw *Network) Cut(ctx context.Context, a, b *Host) error {
	var errs []error
	for _, p := range [][2]*Host{{a, b}, {b, a}} {
		errs = append(errs,
			nw.Iptables(ctx, p[0], "-A", "INPUT", "-s", p[1].IP, "-j", "DROP"),
			nw.Iptables(ctx, p[0], "-A", "OUTPUT", "-d", p[1].IP, "-j", "DROP"))
	}
	return errors.Join(errs...)
}

// Lossy makes h drop a share p of the packets it receives from the segment.
func (nw *Network) Lossy(ctx context.Context, h *Host, p float64) error {
	return nw.Iptables(ctx, h, "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
		"--probability", strconv.FormatFloat(p, 'f', 3, 64), "-j", "DROP")
}

func ipAll(ctx context.Context, steps [][]string) error {
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

func ip(ctx context.Context, args ...string) error { return run(ctx, "ip", args...) }

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Run(); err != nil {
		// The time it ran says whether this command hung (netlink waits
		// on the kernel's rtnl lock, which a container's network teardown
		// can hold for long) or the budget was spent before it.
		return fmt.Errorf("%s %s (ran %v): %w: %s", name, strings.Join(args, " "), time.Since(began).Round(time.Millisecond), err, strings.TrimSpace(filterWarnings(out.String())))
	}
	return nil
}

// filterWarnings drops iptables' notice about legacy tables in the root
// namespace, which says nothing about the command.
func filterWarnings(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "iptables-legacy tables present") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
