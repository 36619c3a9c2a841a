package chaos

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Repair is evidence that a node repaired something: a counter recount
// that changed counters, or a replica found diverged. Counters are kept by
// one chokepoint and replicas apply the same log, so in a run that injected
// no such fault (the chaos binary cannot inject one: fault injection exists
// only in test builds) every repair is a bug the run uncovered.
type Repair struct {
	Node   string `json:"node"`
	Source string `json:"source"` // "log" or "metrics"
	Detail string `json:"detail"`
}

// repairLogMarks are parts of the log lines every repair writes: the
// leader's counter audit finding drift, the recount on each replica it
// changed, the leader's replica check, and the diverged node itself (fsm/recount.go, broker/replica.go).
var repairLogMarks = []string{
	"(a repair is a bug report)",
	"counter audit: a queue's counters disagree",
	"counter audit: the node's byte total disagrees",
	"replica check: a replica's state differs",
	"replica check: this leader's state differs",
	"this node's state diverged from the replicas'",
}

// repairFamilies are the metric families that count repairs.
var repairFamilies = []string{"raftq_counter_repairs_total", "raftq_replica_divergence_total", "raftq_replica_diverged"}

// RepairsInLog lists the repair lines in a node's log (all of its runs:
// the log is appended across restarts, where the metrics start again at 0).
func RepairsInLog(node, log string) []Repair {
	var out []Repair
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, mark := range repairLogMarks {
			if strings.Contains(line, mark) {
				out = append(out, Repair{Node: node, Source: "log", Detail: line})
				break
			}
		}
	}
	return out
}

// RepairsInMetrics lists the non-zero repair series in a node's /metrics
// text.
func RepairsInMetrics(node, text string) []Repair {
	var out []Repair
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, fam := range repairFamilies {
			if line != fam && !strings.HasPrefix(line, fam+"{") && !strings.HasPrefix(line, fam+" ") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil || v != 0 {
				out = append(out, Repair{Node: node, Source: "metrics", Detail: line})
			}
		}
	}
	return out
}

// checkRepairs flags every repair: none was injected.
func checkRepairs(h *History, add func(Violation)) {
	for _, r := range h.Repairs {
		add(Violation{Invariant: InvRepairWithoutFault,
			Detail: fmt.Sprintf("%s repaired state with no fault injected for it (%s): %s", r.Node, r.Source, r.Detail)})
	}
}
