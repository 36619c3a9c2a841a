package main

import (
	"testing"
	"testing/fstest"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// TestCgroupMemoryLimit reads the limits of cgroup v2 (the lowest along
// the path, at the mount's root inside a container) and v1 (a hybrid host:
// the unified hierarchy elsewhere, without the memory controller).
func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fs    fstest.MapFS
		want  int64
		wantF string
	}{
		{"no cgroup files", fstest.MapFS{}, 0, ""},
		{"v2 container: limit at the mount's root", fstest.MapFS{
			"proc/self/cgroup":                 file("0::/\n"),
			"sys/fs/cgroup/cgroup.controllers": file("cpu memory\n"),
			"sys/fs/cgroup/memory.max":         file("536870912\n"),
		}, 512 << 20, "cgroup v2"},
		{"v2 unlimited", fstest.MapFS{
			"proc/self/cgroup":                 file("0::/\n"),
			"sys/fs/cgroup/cgroup.controllers": file("cpu memory\n"),
			"sys/fs/cgroup/memory.max":         file("max\n"),
		}, 0, ""},
		{"v2 host: the lowest limit along the path", fstest.MapFS{
			"proc/self/cgroup":                                    file("0::/system.slice/raftq.service\n"),
			"sys/fs/cgroup/cgroup.controllers":                    file("cpu memory\n"),
			"sys/fs/cgroup/system.slice/memory.max":               file("1073741824\n"),
			"sys/fs/cgroup/system.slice/raftq.service/memory.max": file("max\n"),
		}, 1 << 30, "cgroup v2"},
		{"v1 container", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/docker/abc\n0::/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("268435456\n"),
			"sys/fs/cgroup/unified/cgroup.controllers":   file(""),
		}, 256 << 20, "cgroup v1"},
		{"v1 unlimited (the largest page-aligned int64)", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0, ""},
		{"v1 host path with controllers joined", fstest.MapFS{
			"proc/self/cgroup":                                  file("5:cpuacct,memory:/jobs/x\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":        file("9223372036854771712\n"),
			"sys/fs/cgroup/memory/jobs/x/memory.limit_in_bytes": file("2147483648\n"),
		}, 2 << 30, "cgroup v1"},
		{"garbage", fstest.MapFS{
			"proc/self/cgroup":                 file("0::/\n"),
			"sys/fs/cgroup/cgroup.controllers": file(""),
			"sys/fs/cgroup/memory.max":         file("lots\n"),
		}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := cgroupMemoryLimit(tc.fs)
			if got != tc.want || from != tc.wantF {
				t.Fatalf("got %d (%q), want %d (%q)", got, from, tc.want, tc.wantF)
			}
		})
	}
}

// TestMemoryDefaults: a cgroup limit below RAM sets the defaults; one above
// it (or none) leaves RAM's.
func TestMemoryDefaults(t *testing.T) {
	ram := readMemoryBudget(fstest.MapFS{})
	if ram.from != "ram" || ram.bytes <= 0 {
		t.Fatalf("no RAM figure: %+v", ram)
	}
	small := readMemoryBudget(fstest.MapFS{
		"proc/self/cgroup":                 file("0::/\n"),
		"sys/fs/cgroup/cgroup.controllers": file(""),
		"sys/fs/cgroup/memory.max":         file("536870912\n"),
	})
	if small.bytes != 512<<20 || small.from != "cgroup v2" {
		t.Fatalf("512 MiB cgroup: %+v", small)
	}
	if got := small.defaultMaxQueuedBytes(); got != 128<<20 {
		t.Errorf("max queued in 512 MiB: %d, want 128 MiB", got)
	}
	if got := small.defaultMaxPendingBytes(); got != 64<<20 {
		t.Errorf("max pending in 512 MiB: %d, want 64 MiB", got)
	}
	if got := small.goMemoryLimit(); got <= 400<<20 || got >= 512<<20 {
		t.Errorf("Go memory limit in 512 MiB: %d, want just under it", got)
	}
	if ram.goMemoryLimit() != 0 {
		t.Errorf("no cgroup limit, yet a Go memory limit of %d", ram.goMemoryLimit())
	}
	huge := readMemoryBudget(fstest.MapFS{
		"proc/self/cgroup":                 file("0::/\n"),
		"sys/fs/cgroup/cgroup.controllers": file(""),
		"sys/fs/cgroup/memory.max":         file("4611686018427387903\n"),
	})
	if huge != ram {
		t.Errorf("a cgroup limit above RAM: %+v, want RAM's %+v", huge, ram)
	}
	if got := ram.defaultMaxPendingBytes(); ram.bytes >= 2<<30 && got != 256<<20 {
		t.Errorf("max pending with %d bytes of RAM: %d, want 256 MiB", ram.bytes, got)
	}
}
