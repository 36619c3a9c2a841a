package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/raftq/raftq/test/bench/workload"
)

// secureSuffix names a system that is another one with TLS and auth on
// (raftq-3-secure is raftq-3 secured).
const secureSuffix = "-secure"

// printSecureCost prints, for every secured system run beside its plain
// twin, the secure/plain ratio of the enqueue and lifecycle figures: the
// cost of TLS and auth measured in one run.
func printSecureCost(results []workload.SystemResult) {
	for _, s := range results {
		plain, ok := strings.CutSuffix(s.System, secureSuffix)
		if !ok {
			continue
		}
		fmt.Println()
		fmt.Println("== cost of TLS + auth (same run; below 1x is slower for msgs/s, above 1x is longer for latencies) ==")
		if !workload.WriteRatio(os.Stdout, results, s.System, plain) {
			fmt.Printf("%s/%s: not both run; no ratio\n", s.System, plain)
		}
	}
}

// noteLoad adds the machine's load average, read as the system's run
// ends, to its notes: every figure is reported beside it.
func noteLoad(res *workload.SystemResult) {
	la, err := workload.LoadAverage()
	if err != nil {
		return
	}
	res.Notes = append(res.Notes, "load average at the end of the run: "+la)
}
