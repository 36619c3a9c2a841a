package systems

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/raftq/raftq/test/bench/workload"
)

// DescribeMachine reads the CPU count and model, memory and kernel.
func DescribeMachine() workload.Machine {
	m := workload.Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		m.MemBytes = int64(si.Totalram) * int64(si.Unit)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// ProbeFsync appends 4 KiB and calls fdatasync n times in a file under
// dir — what a Raft log append costs the disk — and summarizes the time
// each took.
func ProbeFsync(dir string, n int) (workload.LatencySummary, error) {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return workload.LatencySummary{}, fmt.Errorf("fsync probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			return workload.LatencySummary{}, fmt.Errorf("fsync probe: %w", err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return workload.LatencySummary{}, fmt.Errorf("fsync probe: %w", err)
		}
		ds = append(ds, time.Since(start))
	}
	return workload.Summarize(ds), nil
}
