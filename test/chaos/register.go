package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// The independent checker (issue 20): each work queue's config, as clients
// see it through every node, is a register. UpdateQueue writes it and
// GetQueue reads it; the history of those calls is checked for
// linearizability by porcupine, a checker nobody here wrote, besides the
// in-repo invariants. The register is the queue's max_message_bytes: every
// write sets a value no other write sets, at least the 1 MiB default, so
// it never refuses the workload's small messages. Stats are not a
// register: they change through grants, acks and sweeps that no client
// history records, so they stay with the in-repo checker.

// InvNotLinearizable: porcupine found no linearization of a queue's config
// history, or could not decide within its budget (an undecided check is not
// a pass).
const InvNotLinearizable = "config-not-linearizable"

// linearizabilityBudget bounds porcupine's search in Check. Each value is
// written once, so reads pin the state and a linearizable history is
// found quickly; the budget is there for an unlucky pile of unknown
// writes, and running out of it is reported, never passed.
const linearizabilityBudget = 2 * time.Minute

// RegisterKind is a call on the register.
type RegisterKind string

// Calls on a queue's config register.
const (
	RegWrite RegisterKind = "write" // UpdateQueue with update_mask max_message_bytes
	RegRead  RegisterKind = "read"  // GetQueue, linearizable (the default)
)

// RegisterOp is one call on a queue's config register, through one node.
type RegisterOp struct {
	Client int          `json:"client"`
	Node   string       `json:"node"`
	Queue  string       `json:"queue"`
	Kind   RegisterKind `json:"kind"`
	// Value is what a write set or what a read returned.
	Value int64 `json:"value"`
	// Init is the queue's value before any write of the run (a read in
	// the initial state must return it).
	Init    int64     `json:"init"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Outcome Outcome   `json:"outcome"`
	Err     string    `json:"err,omitempty"`
}

// regInput is what porcupine is given for an operation; the output of a
// read is the value it returned (int64), of a write nil.
type regInput struct {
	queue string
	kind  RegisterKind
	value int64 // a write's value
	init  int64
}

// regUnset is the state before the first write: a read must return the
// queue's initial value then.
const regUnset int64 = -1

// registerModel is a single register per queue (porcupine partitions the
// history by queue, so each is checked on its own).
func registerModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byQueue := map[string][]porcupine.Operation{}
			var names []string
			for _, op := range history {
				q := op.Input.(regInput).queue
				if _, ok := byQueue[q]; !ok {
					names = append(names, q)
				}
				byQueue[q] = append(byQueue[q], op)
			}
			slices.Sort(names)
			out := make([][]porcupine.Operation, 0, len(names))
			for _, q := range names {
				out = append(out, byQueue[q])
			}
			return out
		},
		Init: func() any { return regUnset },
		Step: func(state, input, output any) (bool, any) {
			in, cur := input.(regInput), state.(int64)
			if in.kind == RegWrite {
				return true, in.value
			}
			if cur == regUnset {
				cur = in.init
			}
			return output.(int64) == cur, state
		},
		DescribeOperation: func(input, output any) string {
			in := input.(regInput)
			if in.kind == RegWrite {
				return fmt.Sprintf("%s: write %d", in.queue, in.value)
			}
			return fmt.Sprintf("%s: read → %d", in.queue, output.(int64))
		},
		DescribeState: func(state any) string {
			if v := state.(int64); v != regUnset {
				return fmt.Sprint(v)
			}
			return "initial"
		},
	}
}

// registerOperations turns the recorded calls into porcupine's history.
// A call that definitely did not happen (a refused write) or that tells
// nothing (a read with no answer) is left out. A write with an unknown
// outcome may have taken effect at any moment after it was sent, even
// after every other call ended (a proposal can commit late), so it stays
// open to the end: its return is after every other call's.
//
// An unknown write whose value no read returned is left out too, which
// changes no verdict: if the history without it is linearizable, so is it
// with it (linearized last, after every call, it is seen by none); and in
// a linearization with it, no read falls between it and the next write
// (every value is written once, and none read it), so dropping it leaves
// every read's state as it was. Kept, each one doubles the states
// porcupine may have to search (it may or may not have applied, overwritten
// unseen by any later write): a soak with a few hundred of them, from
// clients calling a node cut off by a partition, did not finish in two
// minutes.
func registerOperations(ops []RegisterOp) []porcupine.Operation {
	if len(ops) == 0 {
		return nil
	}
	seen := map[string]map[int64]bool{} // queue → values some read returned
	for _, op := range ops {
		if op.Kind == RegRead && op.Outcome == OK {
			if seen[op.Queue] == nil {
				seen[op.Queue] = map[int64]bool{}
			}
			seen[op.Queue][op.Value] = true
		}
	}
	base := ops[0].Start
	var last time.Time
	for _, op := range ops {
		if op.Start.Before(base) {
			base = op.Start
		}
		if op.End.After(last) {
			last = op.End
		}
	}
	open := last.Sub(base).Nanoseconds() + 1
	var out []porcupine.Operation
	for _, op := range ops {
		in := regInput{queue: op.Queue, kind: op.Kind, value: op.Value, init: op.Init}
		p := porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Start.Sub(base).Nanoseconds(),
			Return: op.End.Sub(base).Nanoseconds(), Metadata: op.Node}
		switch {
		case op.Kind == RegRead && op.Outcome != OK, op.Kind == RegWrite && op.Outcome == Failed:
			continue
		case op.Kind == RegWrite && op.Outcome == Unknown && !seen[op.Queue][op.Value]:
			continue
		case op.Kind == RegRead:
			p.Output = op.Value
		case op.Outcome == Unknown:
			p.Return = open
		}
		out = append(out, p)
	}
	// porcupine reads history order for ties; keep it by call time.
	slices.SortStableFunc(out, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return out
}

// Linearizability is porcupine's verdict on the config registers.
type Linearizability struct {
	Writes        int `json:"writes"`
	UnknownWrites int `json:"unknown_writes"`
	// UnknownUnseen are the unknown writes no read saw, left out of the
	// search (registerOperations says why that changes no verdict).
	UnknownUnseen int    `json:"unknown_unseen"`
	FailedWrites  int    `json:"failed_writes"`
	Reads         int    `json:"reads"`
	FailedReads   int    `json:"failed_reads"`
	Result        string `json:"result"` // porcupine's: Ok, Illegal or Unknown (timed out)
	CheckMs       int64  `json:"check_ms"`

	info porcupine.LinearizationInfo
}

// OK reports whether porcupine found the history linearizable.
func (l *Linearizability) OK() bool { return l.Result == string(porcupine.Ok) }

// CheckLinearizable checks the config register history with porcupine,
// spending at most timeout (past it the result is Unknown, which is not
// a pass).
func CheckLinearizable(ops []RegisterOp, timeout time.Duration) *Linearizability {
	l := &Linearizability{}
	for _, op := range ops {
		switch {
		case op.Kind == RegRead && op.Outcome == OK:
			l.Reads++
		case op.Kind == RegRead:
			l.FailedReads++
		case op.Outcome == OK:
			l.Writes++
		case op.Outcome == Unknown:
			l.UnknownWrites++
		default:
			l.FailedWrites++
		}
	}
	history := registerOperations(ops)
	l.UnknownUnseen = l.Writes + l.UnknownWrites + l.Reads - len(history)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(registerModel(), history, timeout)
	l.CheckMs = time.Since(start).Milliseconds()
	l.Result, l.info = string(res), info
	return l
}

// Violation is the register verdict as a checker violation (nil when OK).
func (l *Linearizability) Violation() *Violation {
	if l.OK() {
		return nil
	}
	why := "porcupine found no linearization of the queues' config history (UpdateQueue writes, GetQueue reads through every node)"
	if l.Result == string(porcupine.Unknown) {
		why = "porcupine could not decide within its time budget whether the queues' config history is linearizable"
	}
	return &Violation{Invariant: InvNotLinearizable, Detail: fmt.Sprintf("%s: %d writes (%d unknown, %d refused), %d reads; see the visualization",
		why, l.Writes+l.UnknownWrites, l.UnknownWrites, l.FailedWrites, l.Reads)}
}

// Visualize writes porcupine's HTML visualization of the check to path.
func (l *Linearizability) Visualize(path string) error {
	return porcupine.VisualizePath(registerModel(), l.info, path)
}
