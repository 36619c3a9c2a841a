package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// regHistory builds register calls from a compact description: each call
// is (client, kind, value, start ms, end ms, outcome) on queue q, whose
// initial value is init.
type regCall struct {
	client     int
	kind       RegisterKind
	value      int64
	start, end int64
	out        Outcome
}

func regHistory(q string, init int64, calls ...regCall) []RegisterOp {
	t0 := time.Unix(1_700_000_000, 0)
	var ops []RegisterOp
	for _, c := range calls {
		ops = append(ops, RegisterOp{Client: c.client, Node: "n1", Queue: q, Kind: c.kind, Value: c.value, Init: init,
			Start: t0.Add(time.Duration(c.start) * time.Millisecond), End: t0.Add(time.Duration(c.end) * time.Millisecond), Outcome: c.out})
	}
	return ops
}

// TestRegisterLinearizability: porcupine accepts what a linearizable
// register may show, unknown-outcome writes included, and catches the
// histories no register can produce: a stale read, a value that comes back
// after it was overwritten, a read of a write that was refused.
func TestRegisterLinearizability(t *testing.T) {
	const init = 1 << 20
	w := func(c int, v, s, e int64, o Outcome) regCall { return regCall{c, RegWrite, v, s, e, o} }
	r := func(c int, v, s, e int64) regCall { return regCall{c, RegRead, v, s, e, OK} }
	cases := []struct {
		name string
		ops  []RegisterOp
		ok   bool
	}{
		{"initial value read", regHistory("a", init, r(0, init, 0, 1)), true},
		{"initial value wrong", regHistory("a", init, r(0, 7, 0, 1)), false},
		{"sequential", regHistory("a", init, w(0, 1, 0, 1, OK), r(1, 1, 2, 3), w(0, 2, 4, 5, OK), r(1, 2, 6, 7)), true},
		// A read that begins after a write was acknowledged must see it.
		{"stale read", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 3, OK), r(1, 1, 4, 5)), false},
		// Concurrent with the write, either value is fine.
		{"concurrent read", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 10, OK), r(1, 1, 3, 4), r(2, 2, 5, 6)), true},
		// Once a read saw the new value, a later read may not see the old.
		{"value comes back", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 10, OK), r(1, 2, 3, 4), r(2, 1, 5, 6)), false},
		// A write with no answer may not have happened...
		{"unknown write absent", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 3, Unknown), r(1, 1, 4, 5)), true},
		// ...or may take effect long after its call ended.
		{"unknown write late", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 3, Unknown), r(1, 1, 4, 5), r(1, 2, 8, 9)), true},
		// But it takes effect once: seen, then gone without another write.
		{"unknown write undone", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 3, Unknown), r(1, 2, 4, 5), r(1, 1, 8, 9)), false},
		// Unknown writes no read saw hide nothing: a stale read among
		// them is still caught.
		{"unseen unknown writes keep a stale read", regHistory("a", init, w(0, 1, 0, 1, OK), w(1, 5, 1, 2, Unknown), w(0, 2, 2, 3, OK),
			w(2, 6, 3, 4, Unknown), r(1, 1, 4, 5)), false},
		// A refused write never happened.
		{"refused write seen", regHistory("a", init, w(0, 1, 0, 1, OK), w(0, 2, 2, 3, Failed), r(1, 2, 4, 5)), false},
		// A read with no answer constrains nothing.
		{"failed read ignored", regHistory("a", init, w(0, 1, 0, 1, OK), regCall{1, RegRead, 99, 2, 3, Unknown}), true},
		// Queues are separate registers.
		{"two queues", append(regHistory("a", init, w(0, 1, 0, 1, OK), r(1, 1, 4, 5)), regHistory("b", 5, r(2, 5, 2, 6))...), true},
		{"two queues crossed", append(regHistory("a", init, w(0, 1, 0, 1, OK)), regHistory("b", 5, r(2, 1, 2, 6))...), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := CheckLinearizable(tc.ops, 10*time.Second)
			if l.OK() != tc.ok {
				t.Fatalf("result %s, want linearizable=%v", l.Result, tc.ok)
			}
			if v := l.Violation(); (v == nil) != tc.ok {
				t.Fatalf("violation %+v with result %s", v, l.Result)
			}
		})
	}
}

// TestRegisterManyUnknownWrites: hundreds of writes with no answer, which
// no read saw (a client calling a node cut off by a partition), between
// reads that pin the state, are decided at once.
func TestRegisterManyUnknownWrites(t *testing.T) {
	var calls []regCall
	at := int64(0)
	for i := range 400 {
		v := int64(10 + i)
		calls = append(calls, regCall{0, RegWrite, v, at, at + 1, OK}, regCall{1, RegWrite, 100_000 + v, at + 1, at + 3, Unknown},
			regCall{2, RegRead, v, at + 2, at + 4, OK})
		at += 5
	}
	l := CheckLinearizable(regHistory("a", 1<<20, calls...), 30*time.Second)
	if !l.OK() || l.UnknownWrites != 400 || l.UnknownUnseen != 400 {
		t.Fatalf("result %s, %d unknown writes (%d unseen) in %d ms", l.Result, l.UnknownWrites, l.UnknownUnseen, l.CheckMs)
	}
}

// TestRegisterVisualization: a failed check writes porcupine's HTML, which
// names the operations.
func TestRegisterVisualization(t *testing.T) {
	ops := regHistory("work-a", 1<<20,
		regCall{0, RegWrite, 1048577, 0, 1, OK}, regCall{0, RegWrite, 1048578, 2, 3, OK}, regCall{1, RegRead, 1048577, 4, 5, OK})
	l := CheckLinearizable(ops, 10*time.Second)
	if l.OK() {
		t.Fatal("a stale read passed")
	}
	path := filepath.Join(t.TempDir(), "lin.html")
	if err := l.Visualize(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "work-a: read → 1048577") {
		t.Fatalf("visualization does not describe the stale read (%d bytes)", len(b))
	}
}
