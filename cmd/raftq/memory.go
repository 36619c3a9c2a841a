package main

import (
	"bufio"
	"bytes"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/raftq/raftq/broker"
)

// memoryBudget is the memory this process may use: the machine's RAM, or
// its cgroup's limit when that is lower (a container started with
// --memory, a systemd unit with MemoryMax). from names where it came from,
// for the log.
type memoryBudget struct {
	bytes int64
	from  string // "cgroup v2", "cgroup v1", "ram" or "" (unknown)
}

// readMemoryBudget reads the budget from the machine (RAM through
// sysinfo) and root, a view of the file system's root (os.DirFS("/")).
func readMemoryBudget(root fs.FS) memoryBudget {
	var b memoryBudget
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil && si.Totalram > 0 {
		b = memoryBudget{bytes: int64(si.Totalram) * int64(si.Unit), from: "ram"}
	}
	if limit, from := cgroupMemoryLimit(root); limit > 0 && (b.bytes == 0 || limit < b.bytes) {
		b = memoryBudget{bytes: limit, from: from}
	}
	return b
}

// defaultMaxQueuedBytes is a quarter of the memory budget. State lives
// in memory and a node's resident size measured up to ~2.3x its payload
// bytes while it takes in a backlog (1.5x once idle, more while a
// snapshot is written: docs/benchmarks.md, issue 24; 2.6-3.1x before),
// so DESIGN's "half of memory" would let the kernel kill the node before
// admission control refused anything.
func (b memoryBudget) defaultMaxQueuedBytes() int64 { return b.bytes / 4 }

// defaultMaxPendingBytes is broker.DefaultMaxPendingBytes, or an eighth of
// a smaller budget: writes waiting for Raft sit in memory beside the
// queued quarter, and in a 512 MiB container 256 MiB of them would be
// half of it.
func (b memoryBudget) defaultMaxPendingBytes() int64 {
	if b.bytes <= 0 {
		return broker.DefaultMaxPendingBytes
	}
	return min(broker.DefaultMaxPendingBytes, b.bytes/8)
}

// goMemoryLimit is the Go runtime's soft memory limit for this budget when
// it comes from a cgroup (90%: the GC works harder before the kernel's
// OOM killer would act), or 0 to leave the runtime's default.
func (b memoryBudget) goMemoryLimit() int64 {
	if !strings.HasPrefix(b.from, "cgroup") {
		return 0
	}
	return b.bytes / 10 * 9
}

// cgroupMemoryLimit is the memory limit of this process's cgroup: the
// lowest memory.max (cgroup v2) of its cgroup and its ancestors, else
// memory.limit_in_bytes (cgroup v1). 0 when there is none. Inside a
// container the cgroup file system is usually mounted at the container's
// own cgroup, so the files at the mount's root are tried as well.
func cgroupMemoryLimit(root fs.FS) (int64, string) {
	self, _ := fs.ReadFile(root, "proc/self/cgroup")
	v2Path, v1Path := "", ""
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path = parts[2]
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				v1Path = parts[2]
			}
		}
	}
	// cgroup v2: only where the unified hierarchy is mounted at the top
	// (a hybrid host mounts it at /sys/fs/cgroup/unified, without the
	// memory controller).
	if _, err := fs.Stat(root, "sys/fs/cgroup/cgroup.controllers"); err == nil {
		var lowest int64
		for _, dir := range ancestors("sys/fs/cgroup", v2Path) {
			if v := readLimit(root, path.Join(dir, "memory.max")); v > 0 && (lowest == 0 || v < lowest) {
				lowest = v
			}
		}
		if lowest > 0 {
			return lowest, "cgroup v2"
		}
		return 0, ""
	}
	var lowest int64
	for _, dir := range ancestors("sys/fs/cgroup/memory", v1Path) {
		if v := readLimit(root, path.Join(dir, "memory.limit_in_bytes")); v > 0 && (lowest == 0 || v < lowest) {
			lowest = v
		}
	}
	if lowest > 0 {
		return lowest, "cgroup v1"
	}
	return 0, ""
}

// ancestors lists mount/cg and each of its parents up to mount.
func ancestors(mount, cg string) []string {
	out := []string{mount}
	cg = path.Clean("/" + cg)
	for cg != "/" {
		out = append(out, path.Join(mount, cg))
		cg = path.Dir(cg)
	}
	return out
}

// noLimit: cgroup v1 reports "no limit" as the largest page-aligned int64;
// anything from 2^62 up is treated as no limit.
const noLimit = int64(1) << 62

// readLimit parses a memory limit file: a number of bytes, or "max" (v2)
// or a huge number (v1) for none (0).
func readLimit(root fs.FS, name string) int64 {
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 || v >= noLimit {
		return 0
	}
	return v
}
