package workload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftq/raftq/test/harness"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// Proc names a server process whose CPU time the benchmark records.
type Proc struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
}

// statFields returns the fields of /proc/<pid>/stat after the command
// name (which may contain spaces): [0] is the state, [1] the parent pid,
// [11] utime and [12] stime.
func statFields(root string, pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	return parseStat(b)
}

func parseStat(b []byte) ([]string, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed stat line %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("stat line has %d fields after the name", len(f))
	}
	return f, nil
}

func cpuOf(f []string) (time.Duration, error) {
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime %q: %w", f[11], err)
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime %q: %w", f[12], err)
	}
	return time.Duration(u+s) * time.Second / clockTicks, nil
}

// CPU returns the user+system CPU time used so far by pid and its living
// descendants (a RabbitMQ node is a shell script, beam.smp and helpers).
func CPU(pid int) (time.Duration, error) { return cpuTree("/proc", pid) }

func cpuTree(root string, pid int) (time.Duration, error) {
	pids, err := harness.Tree(pid)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for i, p := range pids {
		f, err := statFields(root, p)
		if err != nil {
			if i == 0 {
				return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
			}
			continue
		}
		c, err := cpuOf(f)
		if err != nil {
			return 0, fmt.Errorf("cpu of pid %d: %w", p, err)
		}
		total += c
	}
	return total, nil
}

// SelfCPU is the user+system CPU time of this process (the load
// generator, which shares the machine's cores with the servers).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RSS returns the resident memory of pid (VmRSS) in bytes.
func RSS(pid int) (int64, error) { return rss("/proc", pid) }

func rss(root string, pid int) (int64, error) {
	f, err := os.Open(filepath.Join(root, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fs := strings.Fields(v)
			if len(fs) != 2 || fs[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", line, err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS for pid %d (a zombie?)", pid)
}

// StartOtherCPU starts measuring the CPU time the rest of the machine
// spends: busy time of all cores less this process's and pids' (with their
// descendants). stop returns it for the interval since the start.
func StartOtherCPU(pids ...int) (stop func() (time.Duration, error)) {
	read := func() (time.Duration, error) {
		t, err := MachineCPU()
		if err != nil {
			return 0, err
		}
		t -= SelfCPU()
		for _, pid := range pids {
			c, err := CPU(pid)
			if err != nil {
				return 0, err
			}
			t -= c
		}
		return t, nil
	}
	start, startErr := read()
	return func() (time.Duration, error) {
		end, err := read()
		if err = errors.Join(startErr, err); err != nil {
			return 0, err
		}
		return max(end-start, 0), nil
	}
}

// MachineCPU is the busy (not idle, not iowait) CPU time of all cores
// since boot, from /proc/stat.
func MachineCPU() (time.Duration, error) { return machineCPU("/proc/stat") }

func machineCPU(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected first line of %s: %q", path, line)
	}
	var busy uint64
	// user nice system idle iowait irq softirq steal ...
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
