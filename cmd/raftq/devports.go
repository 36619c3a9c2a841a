package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// devPort is one port a dev node binds.
type devPort struct {
	node, what string
	port       int
	udp        bool // also UDP (gossip)
}

// devPorts lists every port the nodes of raftq dev bind.
func devPorts(nodes, basePort int) []devPort {
	var out []devPort
	for i := range nodes {
		id, p := fmt.Sprintf("n%d", i+1), basePort+10*i
		out = append(out,
			devPort{id, "gRPC", p, false},
			devPort{id, "Raft", p + 1, false},
			devPort{id, "gossip", p + 2, true},
			devPort{id, "HTTP", p + 3, false})
	}
	return out
}

// checkDevPorts binds each port for a moment, before any node starts: a
// node that cannot bind would only restart every few seconds while the
// others joined whatever holds its port. The error names every port in
// use and, where it can tell, the process holding it.
func checkDevPorts(ports []devPort) error {
	var errs []error
	for _, p := range ports {
		addr := fmt.Sprintf("127.0.0.1:%d", p.port)
		err := tryBind("tcp", addr)
		if err == nil && p.udp {
			err = tryBind("udp", addr)
		}
		if err == nil {
			continue
		}
		msg := fmt.Sprintf("port %s (%s's %s) is in use", addr, p.node, p.what)
		if who := portHolder(p.port); who != "" {
			msg += " by " + who
		}
		errs = append(errs, errors.New(msg))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w\nstop what holds them (a `make run` or another raftq dev?), or pick other ports with --base-port", errors.Join(errs...))
}

func tryBind(network, addr string) error {
	if network == "udp" {
		c, err := net.ListenPacket(network, addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// portHolder names the process listening on TCP port ("pid N (cmdline)"),
// from /proc; "" where that cannot be told (not Linux, another user's
// process, UDP only).
func portHolder(port int) string {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"} {
		for _, ino := range socketInodes(f, port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if !inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			continue
		}
		pid := strings.Split(fd, "/")[2]
		cmdline, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		cmd := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		if len(cmd) > 100 {
			cmd = cmd[:100] + "…"
		}
		return fmt.Sprintf("pid %s (%s)", pid, cmd)
	}
	return ""
}

// socketInodes returns the inodes of the sockets bound to local port in
// a /proc/net table (TCP: listening ones only).
func socketInodes(table string, port int) []string {
	f, err := os.Open(table)
	if err != nil {
		return nil
	}
	defer f.Close()
	tcp := strings.Contains(table, "tcp")
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		i := strings.LastIndexByte(fields[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(fields[1][i+1:], 16, 32)
		if err != nil || int(p) != port || (tcp && fields[3] != "0A") {
			continue
		}
		out = append(out, fields[9])
	}
	return out
}
