package workload

import (
	"os"
	"testing"
	"time"
)

func TestParseStatNameWithSpacesAndParens(t *testing.T) {
	line := []byte("4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 100 1000 10\n")
	f, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if f[0] != "S" || f[1] != "1" {
		t.Fatalf("state %q, ppid %q", f[0], f[1])
	}
	cpu, err := cpuOf(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; cpu != want { // (250 + 75) ticks of 10 ms
		t.Fatalf("cpu %v, want %v", cpu, want)
	}
	if _, err := parseStat([]byte("garbage")); err == nil {
		t.Fatal("parseStat accepted a line without a name")
	}
}

func TestProcReadingsOfThisProcess(t *testing.T) {
	// Burn some CPU so that there is something to count.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	if c, err := CPU(os.Getpid()); err != nil || c <= 0 {
		t.Fatalf("CPU of self = %v, %v", c, err)
	}
	if SelfCPU() <= 0 {
		t.Fatal("SelfCPU is zero")
	}
	if r, err := RSS(os.Getpid()); err != nil || r < 1<<20 {
		t.Fatalf("RSS of self = %d, %v", r, err)
	}
	// Tree moved to test/harness (TestTreeHasChildren); CPU sums over it.
	if m, err := MachineCPU(); err != nil || m <= 0 {
		t.Fatalf("MachineCPU = %v, %v", m, err)
	}
	if _, err := CPU(1 << 30); err == nil {
		t.Fatal("CPU of a pid that does not exist")
	}
}
