package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func TestQueueUpdateSendsOnlySetFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantMask []string
		wantCfg  *raftqv1.QueueConfig
		wantErr  string
	}{
		{
			name:     "durations, a zero and throttles",
			args:     []string{"--visibility-timeout", "5s", "--max-depth", "0", "--throttle", "a=10:5", "--throttle", "b:x=2.5"},
			wantMask: []string{"visibility_timeout_ms", "max_depth", "throttles"},
			wantCfg: &raftqv1.QueueConfig{VisibilityTimeoutMs: 5000, Throttles: map[string]*raftqv1.ThrottleRule{
				"a": {RatePerSec: 10, Burst: 5}, "b:x": {RatePerSec: 2.5},
			}},
		},
		{
			name:     "every other field",
			args:     []string{"--max-deliveries", "3", "--dead-letter-queue", "shared", "--max-bytes", "1024", "--message-ttl", "1h", "--dedup-window", "1m", "--max-message-bytes", "2048", "--fairness-quantum", "4"},
			wantMask: []string{"message_ttl_ms", "dedup_window_ms", "max_deliveries", "dead_letter_queue", "max_bytes", "max_message_bytes", "fairness_quantum"},
			wantCfg: &raftqv1.QueueConfig{MaxDeliveries: 3, DeadLetterQueue: "shared", MaxBytes: 1024, MessageTtlMs: 3600000,
				DedupWindowMs: 60000, MaxMessageBytes: 2048, FairnessQuantum: 4},
		},
		{
			name:     "clear throttles",
			args:     []string{"--clear-throttles"},
			wantMask: []string{"throttles"},
			wantCfg:  &raftqv1.QueueConfig{},
		},
		{
			name:     "concurrency caps",
			args:     []string{"--concurrency", "5", "--concurrency-key", "tenant-a=2", "--concurrency-key", "a=b=0"},
			wantMask: []string{"concurrency_limit", "concurrency_limits"},
			wantCfg:  &raftqv1.QueueConfig{ConcurrencyLimit: 5, ConcurrencyLimits: map[string]int32{"tenant-a": 2, "a=b": 0}},
		},
		{
			name:     "clear concurrency keys",
			args:     []string{"--clear-concurrency-keys"},
			wantMask: []string{"concurrency_limits"},
			wantCfg:  &raftqv1.QueueConfig{},
		},
		{name: "bad concurrency key", args: []string{"--concurrency-key", "tenant-a"}, wantErr: "want key=N"},
		{name: "negative concurrency key", args: []string{"--concurrency-key", "t=-1"}, wantErr: "non-negative"},
		{name: "clear and set keys", args: []string{"--clear-concurrency-keys", "--concurrency-key", "a=1"}, wantErr: "conflict"},
		{name: "nothing set", wantErr: "nothing to update"},
		{name: "bad throttle", args: []string{"--throttle", "a=fast"}, wantErr: "rate must be"},
		{name: "negative duration", args: []string{"--visibility-timeout", "-1s"}, wantErr: "must not be negative"},
		{name: "clear and set", args: []string{"--clear-throttles", "--throttle", "a=1"}, wantErr: "conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{}
			r := raftq(t, serve(t, f), "", append([]string{"queue", "update", "q"}, tc.args...)...)
			reqs := requests[*raftqv1.UpdateQueueRequest](f)
			if tc.wantErr != "" {
				if r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) {
					t.Fatalf("exit %d, stderr %q, want error containing %q", r.code, r.stderr, tc.wantErr)
				}
				if len(reqs) != 0 {
					t.Fatal("a bad update reached the broker")
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if len(reqs) != 1 {
				t.Fatalf("%d UpdateQueue calls", len(reqs))
			}
			if got := reqs[0].GetUpdateMask().GetPaths(); !slices.Equal(got, tc.wantMask) {
				t.Errorf("mask = %v, want %v", got, tc.wantMask)
			}
			if got := reqs[0].GetConfig(); !proto.Equal(got, tc.wantCfg) {
				t.Errorf("config = %v, want %v", got, tc.wantCfg)
			}
		})
	}
}

func TestParseThrottle(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		key     string
		rule    *raftqv1.ThrottleRule
		wantErr bool
	}{
		{spec: "api=10", key: "api", rule: &raftqv1.ThrottleRule{RatePerSec: 10}},
		{spec: "api=0.5:3", key: "api", rule: &raftqv1.ThrottleRule{RatePerSec: 0.5, Burst: 3}},
		{spec: "host=a.example:443=2:0", key: "host=a.example:443", rule: &raftqv1.ThrottleRule{RatePerSec: 2}},
		{spec: "api", wantErr: true},
		{spec: "=5", wantErr: true},
		{spec: "api=0", wantErr: true},
		{spec: "api=-1", wantErr: true},
		{spec: "api=5:-1", wantErr: true},
		{spec: "api=5:x", wantErr: true},
	} {
		key, rule, err := parseThrottle(tc.spec)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseThrottle(%q) err = %v, want error %v", tc.spec, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && (key != tc.key || !proto.Equal(rule, tc.rule)) {
			t.Errorf("parseThrottle(%q) = %q %v, want %q %v", tc.spec, key, rule, tc.key, tc.rule)
		}
	}
}

func TestQueueCreateAndJSON(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	r := raftq(t, addr, "", "--json", "queue", "create", "jobs", "--visibility-timeout", "45s", "--throttle", "api=5:2", "--concurrency", "1", "--concurrency-key", "bulk=10")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	reqs := requests[*raftqv1.CreateQueueRequest](f)
	want := &raftqv1.CreateQueueRequest{Name: "jobs", Config: &raftqv1.QueueConfig{
		VisibilityTimeoutMs: 45000, Throttles: map[string]*raftqv1.ThrottleRule{"api": {RatePerSec: 5, Burst: 2}},
		ConcurrencyLimit: 1, ConcurrencyLimits: map[string]int32{"bulk": 10},
	}}
	// The create carries an idempotency key (docs/api.md, Retries), a
	// fresh one per call.
	if len(reqs) != 1 || reqs[0].GetIdempotencyKey() == "" {
		t.Fatalf("requests = %v, want one with an idempotency key", reqs)
	}
	got := proto.Clone(reqs[0]).(*raftqv1.CreateQueueRequest)
	got.IdempotencyKey = ""
	if !proto.Equal(got, want) {
		t.Fatalf("requests = %v, want %v", reqs, want)
	}
	var q raftqv1.QueueInfo
	if err := protojson.Unmarshal([]byte(r.stdout), &q); err != nil {
		t.Fatalf("stdout is not a QueueInfo: %v\n%s", err, r.stdout)
	}
	if q.GetName() != "jobs" || !strings.Contains(r.stdout, `"visibility_timeout_ms"`) {
		t.Fatalf("stdout = %s", r.stdout)
	}
}

// TestQueueCreateGroup: --group goes into CreateQueueRequest.group (the
// SDK's CreateQueueIn); without it the request names none.
func TestQueueCreateGroup(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	for _, args := range [][]string{{"queue", "create", "a", "--group", "g2"}, {"queue", "create", "b"}} {
		if r := raftq(t, addr, "", args...); r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
	}
	reqs := requests[*raftqv1.CreateQueueRequest](f)
	if len(reqs) != 2 || reqs[0].GetGroup() != "g2" || reqs[1].GetGroup() != "" {
		t.Fatalf("requests = %v, want group g2, then none", reqs)
	}
}

func TestQueueHumanOutput(t *testing.T) {
	addr := serve(t, &fake{})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"queue", "get", "q", "--keys"}, []string{"visibility timeout:", "30s", "api=5/s burst 2", "3 per key; bulk=uncapped, tenant-a=1", "ready:", "tenant-a", "1.50", "drain:", "empties in ~30s at the current rate (-5.00/s net, 5.50 deliveries/s)"}},
		// A DLQ's messages arrive by dead-lettering, not enqueue: its
		// ENQUEUED is "-", not a 0 beside the 3 messages it holds.
		// and its DLQ column names the queues that dead-letter into it.
		{[]string{"queue", "list", "ord"}, []string{"NAME", "orders.dlq  3      0        0          0              0          -         0      (DLQ of orders)"}},
		{[]string{"queue", "get", "orders.dlq"}, []string{"dead-letter queue of:", "orders\n"}},
		{[]string{"redrive", "q", "--limit", "7"}, []string{"moved 7 messages back to q"}},
		// What the CLI counts is counted in words: 1 message, not 1 messages.
		{[]string{"redrive", "orders"}, []string{"moved 1 message back to orders\n"}},
		{[]string{"queue", "purge", "one", "--force"}, []string{"purged 1 message from one\n"}},
	} {
		r := raftq(t, addr, "", tc.args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

func TestEnqueue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		stdin    string
		payloads []string
		check    func(t *testing.T, m *raftqv1.EnqueueMessage)
		wantErr  string
	}{
		{name: "stdin lines", stdin: "a\r\nb\n\nc", payloads: []string{"a", "b", "c"}},
		{name: "args", args: []string{"x", "y"}, payloads: []string{"x", "y"}},
		{name: "args and stdin", args: []string{"x", "-", "y"}, stdin: "s1\ns2\n", payloads: []string{"x", "s1", "s2", "y"}},
		{
			name: "message flags", args: []string{"p", "--priority", "5", "--fairness-key", "tenant", "--weight", "3",
				"--throttle-key", "api", "--throttle-key", "db", "--delay", "2s", "--ttl", "1m", "--header", "k=v=w", "--dedup-id", "d1", "--concurrency-key", "order-7"},
			payloads: []string{"p"},
			check: func(t *testing.T, m *raftqv1.EnqueueMessage) {
				want := &raftqv1.EnqueueMessage{Payload: []byte("p"), Priority: 5, FairnessKey: "tenant", Weight: 3, ConcurrencyKey: "order-7",
					ThrottleKeys: []string{"api", "db"}, DelayMs: 2000, TtlMs: 60000, Headers: map[string]string{"k": "v=w"}, DedupId: "d1"}
				if !proto.Equal(m, want) {
					t.Errorf("message = %v, want %v", m, want)
				}
			},
		},
		{name: "dedup id on two messages", args: []string{"a", "b", "--dedup-id", "d"}, wantErr: "single message"},
		{name: "stdin twice", args: []string{"-", "-"}, wantErr: "more than once"},
		{name: "bad header", args: []string{"a", "--header", "novalue"}, wantErr: "key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{}
			r := raftq(t, serve(t, f), tc.stdin, append([]string{"enqueue", "q"}, tc.args...)...)
			reqs := requests[*raftqv1.EnqueueRequest](f)
			if tc.wantErr != "" {
				if r.code == 0 || !strings.Contains(r.stderr, tc.wantErr) {
					t.Fatalf("exit %d, stderr %q, want error containing %q", r.code, r.stderr, tc.wantErr)
				}
				if len(reqs) != 0 {
					t.Fatal("enqueued despite the error")
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var got, ids []string
			dedup := map[string]bool{}
			for _, req := range reqs {
				if req.GetQueue() != "q" {
					t.Errorf("queue = %q", req.GetQueue())
				}
				for _, m := range req.GetMessages() {
					got = append(got, string(m.GetPayload()))
					ids = append(ids, "id-"+string(m.GetPayload()))
					if m.GetDedupId() == "" || dedup[m.GetDedupId()] {
						t.Errorf("message %q: dedup id %q missing or reused", m.GetPayload(), m.GetDedupId())
					}
					dedup[m.GetDedupId()] = true
					if tc.check != nil {
						tc.check(t, m)
					}
				}
			}
			if !slices.Equal(got, tc.payloads) {
				t.Errorf("payloads = %q, want %q", got, tc.payloads)
			}
			if want := strings.Join(ids, "\n") + "\n"; r.stdout != want {
				t.Errorf("stdout = %q, want %q", r.stdout, want)
			}
		})
	}
}

func TestEnqueueBatchesLargeInput(t *testing.T) {
	f := &fake{}
	var in strings.Builder
	for i := range maxBatchMessages + 10 {
		in.WriteString(strings.Repeat("x", i%7+1) + "\n")
	}
	r := raftq(t, serve(t, f), in.String(), "enqueue", "q")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	total := 0
	for _, req := range requests[*raftqv1.EnqueueRequest](f) {
		if n := len(req.GetMessages()); n > maxBatchMessages {
			t.Fatalf("batch of %d messages", n)
		}
		total += len(req.GetMessages())
	}
	if total != maxBatchMessages+10 {
		t.Fatalf("enqueued %d, want %d", total, maxBatchMessages+10)
	}
}

func deliveries(n int) []*raftqv1.Delivery {
	var ds []*raftqv1.Delivery
	for i := range n {
		id := string(rune('a' + i))
		ds = append(ds, &raftqv1.Delivery{Id: id, Queue: "q", Payload: []byte("payload-" + id), Attempt: 1, LeaseToken: "tok-" + id})
	}
	return ds
}

func TestConsume(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		wantLines   int
		wantAcked   int
		wantNacked  int
		wantInLight int32
		json        bool
		fate        string // printed before the payload
		wantDead    bool   // nacks ask for the dead-letter queue
	}{
		{name: "count", args: []string{"--count", "2"}, wantLines: 2, wantAcked: 2, wantInLight: 2},
		{name: "count json", args: []string{"--count", "3", "--json"}, wantLines: 3, wantAcked: 3, wantInLight: 3, json: true},
		{name: "nack", args: []string{"--count", "2", "--nack", "--nack-delay", "1s"}, wantLines: 2, wantNacked: 2, wantInLight: 2,
			fate: "nacked (redelivered; dead-lettered after the queue's max deliveries)\t"},
		{name: "nack to the DLQ", args: []string{"--count", "1", "--nack", "--dead-letter", "--nack-delay", "1s"}, wantLines: 1, wantNacked: 1, wantInLight: 1,
			fate: "nacked (to the dead-letter queue)\t", wantDead: true},
		{name: "idle timeout", args: []string{"--timeout", "200ms", "--max-in-flight", "8"}, wantLines: 4, wantAcked: 4, wantInLight: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{deliveries: deliveries(4)}
			r := raftq(t, serve(t, f), "", append([]string{"consume", "q"}, tc.args...)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if len(lines) != tc.wantLines {
				t.Fatalf("printed %d lines, want %d:\n%s", len(lines), tc.wantLines, r.stdout)
			}
			for i, line := range lines {
				if tc.json {
					var d raftqv1.Delivery
					if err := protojson.Unmarshal([]byte(line), &d); err != nil || d.GetLeaseToken() == "" {
						t.Fatalf("line %d is not a Delivery: %v: %s", i, err, line)
					}
				} else if want := f.deliveries[i].GetId() + "\tattempt=1\t" + tc.fate + "payload-" + f.deliveries[i].GetId(); line != want {
					t.Fatalf("line %d = %q, want %q", i, line, want)
				}
			}
			acked, nacked := 0, 0
			for _, a := range requests[*raftqv1.AckRequest](f) {
				acked += len(a.GetAcks())
			}
			for _, n := range requests[*raftqv1.NackRequest](f) {
				nacked += len(n.GetNacks())
				for _, item := range n.GetNacks() {
					if item.GetDelayMs() != 1000 || item.GetDeadLetter() != tc.wantDead {
						t.Errorf("nack delay = %d, dead_letter %t", item.GetDelayMs(), item.GetDeadLetter())
					}
				}
			}
			if acked != tc.wantAcked || nacked != tc.wantNacked {
				t.Fatalf("acked %d nacked %d, want %d and %d", acked, nacked, tc.wantAcked, tc.wantNacked)
			}
			if l := requests[*raftqv1.LeaseRequest](f); len(l) != 1 || l[0].GetMaxInFlight() != tc.wantInLight {
				t.Fatalf("lease requests = %v, want max_in_flight %d", l, tc.wantInLight)
			}
		})
	}
}

// An ack the broker refuses (the lease ran out) means the message comes
// again: consume says so and exits non-zero instead of reporting success.
func TestConsumeFailsWhenAnAckFails(t *testing.T) {
	for _, tc := range []struct {
		count int
		want  string
	}{
		{1, "1 of 1 message printed was not acked"},
		{2, "2 of 2 messages printed were not acked"},
	} {
		f := &fake{deliveries: deliveries(2), refuseAcks: true}
		r := raftq(t, serve(t, f), "", "consume", "q", "--count", strconv.Itoa(tc.count))
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "delivered again") {
			t.Fatalf("--count %d: exit %d, stderr %q, want a failure containing %q", tc.count, r.code, r.stderr, tc.want)
		}
		if n := strings.Count(r.stdout, "\n"); n != tc.count {
			t.Fatalf("printed %d lines, want %d: %q", n, tc.count, r.stdout)
		}
	}
}

// Redrive names the queue the messages came from; naming the DLQ itself
// moves nothing, which is said with the command that would move them.
func TestRedriveOfADLQSuggestsItsOrigin(t *testing.T) {
	r := raftq(t, serve(t, &fake{}), "", "redrive", "orders.dlq")
	for _, want := range []string{"orders.dlq is a dead-letter queue", "raftq redrive orders"} {
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Fatalf("exit %d, stdout %q, stderr %q, want a failure containing %q", r.code, r.stdout, r.stderr, want)
		}
	}
}

func TestPeek(t *testing.T) {
	f := &fake{deliveries: deliveries(2)}
	addr := serve(t, f)
	r := raftq(t, addr, "", "peek", "q", "--limit", "5", "--dlq")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "ORIGIN") || !strings.Contains(r.stdout, "payload-b") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	reqs := requests[*raftqv1.PeekRequest](f)
	if want := (&raftqv1.PeekRequest{Queue: "q", Limit: 5, DeadLetter: true}); len(reqs) != 1 || !proto.Equal(reqs[0], want) {
		t.Fatalf("requests = %v", reqs)
	}
	r = raftq(t, addr, "", "--json", "peek", "q")
	if n := strings.Count(r.stdout, "\n"); n != 2 {
		t.Fatalf("--json printed %d lines, want one per delivery:\n%s", n, r.stdout)
	}
}

func TestClusterCommands(t *testing.T) {
	f := &fake{
		status: &raftqv1.StatusResponse{LeaderId: "n1", LeaderAddr: "10.0.0.1:7400", Term: 3, ClusterVersion: 1, Nodes: []*raftqv1.Node{
			{Id: "n1", State: "leader", Suffrage: "voter", Healthy: true, MaxLogVersion: 2},
			{Id: "n2", State: "follower", Suffrage: "voter", Healthy: true, LastContactMs: 12, MaxLogVersion: 1, DiskLow: true},
		}},
		verify: &raftqv1.VerifyResponse{Nodes: []*raftqv1.NodeDigest{
			{Id: "n1", AppliedIndex: 9, Digest: "ab", CountersOk: true},
			{Id: "n2", AppliedIndex: 9, Digest: "cd", CountersOk: true},
		}},
	}
	addr := serve(t, f)
	r := raftq(t, addr, "", "cluster", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "n1 (10.0.0.1:7400)") || !strings.Contains(r.stdout, "follower") {
		t.Fatalf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Mid-upgrade: n2 runs an older build, so the cluster stays at version 1.
	if !regexp.MustCompile(`log version:\s+1\n`).MatchString(r.stdout) ||
		!regexp.MustCompile(`n2\s+follower\s+voter\s+true\s+0\s+\S+\s+low\s+1\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`n1\s+leader\s+voter\s+true\s+0\s+-\s+ok\s+2\s`).MatchString(r.stdout) {
		t.Fatalf("status does not show the cluster's and each node's log version and disk:\n%s", r.stdout)
	}
	r = raftq(t, addr, "", "cluster", "verify")
	if r.code != 1 || !strings.Contains(r.stdout, "consistent: false") || !strings.Contains(r.stderr, "not consistent") {
		t.Fatalf("verify of differing digests: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A caller who is not an admin gets the leader and each node's id, API
// address, role and health; the rest is withheld, and shown as such rather
// than as zeros that read like a broken cluster.
func TestClusterStatusShowsWithheldFields(t *testing.T) {
	f := &fake{status: &raftqv1.StatusResponse{LeaderId: "n1", LeaderAddr: "10.0.0.1:7400", Withheld: true, Nodes: []*raftqv1.Node{
		{Id: "n1", GrpcAddr: "10.0.0.1:7400", Suffrage: "voter", State: "leader", Healthy: true},
		{Id: "n2", GrpcAddr: "10.0.0.2:7400", Suffrage: "voter", State: "follower", Healthy: true},
	}}}
	r := raftq(t, serve(t, f), "", "cluster", "status")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, re := range []string{
		`leader:\s+n1 \(10\.0\.0\.1:7400\)\n`,
		`term:\s+\(admin only\)\n`, `commit index:\s+\(admin only\)\n`, `applied index:\s+\(admin only\)\n`,
		`log version:\s+\(admin only\)\n`, `held:\s+\(admin only\)\n`,
		`\nID\s+STATE\s+SUFFRAGE\s+HEALTHY\s+GRPC\n`,
		`\nn2\s+follower\s+voter\s+true\s+10\.0\.0\.2:7400\n`,
		`\(admin only:.*RAFT and HTTP`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("output does not match %s:\n%s", re, r.stdout)
		}
	}
	if strings.Contains(r.stdout, ": 0\n") || regexp.MustCompile(`:\s+0( bytes)?\n`).MatchString(r.stdout) {
		t.Errorf("a withheld field is shown as 0:\n%s", r.stdout)
	}
}

// TestClusterSet: `cluster set max-queued-bytes N`, `cluster set
// max-queues N`, `cluster set groups N` and `cluster set replicas N`
// send the one setting each names; anything else is refused before a
// call is made (the range of groups and replicas is the server's).
func TestClusterSet(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	r := raftq(t, addr, "", "cluster", "set", "max-queued-bytes", "1073741824")
	if r.code != 0 || r.stdout != "max-queued-bytes is now 1073741824 (1 GiB)\n" {
		t.Fatalf("cluster set: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = raftq(t, addr, "", "cluster", "set", "max-queues", "20000")
	if r.code != 0 || r.stdout != "max-queues is now 20000\n" {
		t.Fatalf("cluster set max-queues: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = raftq(t, addr, "", "cluster", "set", "groups", "3")
	if r.code != 0 || r.stdout != "groups is now 3\n" {
		t.Fatalf("cluster set groups: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = raftq(t, addr, "", "cluster", "set", "replicas", "5")
	if r.code != 0 || r.stdout != "replicas is now 5\n" {
		t.Fatalf("cluster set replicas: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	bad := []struct{ args []string }{
		{[]string{"max-queued-bytes", "-1"}},
		{[]string{"max-queued-bytes", "1GB"}},
		{[]string{"max-queues", "-1"}},
		{[]string{"max-queues", "10k"}},
		{[]string{"max-pending-bytes", "10"}},
		{[]string{"groups", "-1"}},
		{[]string{"groups", "three"}},
		{[]string{"replicas", "4294967296"}},
	}
	for _, b := range bad {
		if r := raftq(t, addr, "", append([]string{"cluster", "set"}, b.args...)...); r.code == 0 {
			t.Fatalf("cluster set %v: exit 0\n%s", b.args, r.stdout)
		}
	}
	reqs := requests[*raftqv1.SetClusterSettingsRequest](f)
	if len(reqs) != 4 || reqs[0].MaxQueuedBytes == nil || reqs[0].GetMaxQueuedBytes() != 1<<30 || reqs[0].MaxQueues != nil ||
		reqs[1].MaxQueues == nil || reqs[1].GetMaxQueues() != 20000 || reqs[1].MaxQueuedBytes != nil ||
		reqs[2].Groups == nil || reqs[2].GetGroups() != 3 || reqs[2].Replicas != nil || reqs[2].MaxQueues != nil ||
		reqs[3].Replicas == nil || reqs[3].GetReplicas() != 5 || reqs[3].Groups != nil {
		t.Fatalf("requests = %v", reqs)
	}
}

// TestVerifyNamesNodesThatDidNotAnswer: a voter without an answer makes
// `cluster verify` exit non-zero, naming it.
func TestVerifyNamesNodesThatDidNotAnswer(t *testing.T) {
	f := &fake{verify: &raftqv1.VerifyResponse{
		Nodes: []*raftqv1.NodeDigest{
			{Id: "n1", AppliedIndex: 9, Digest: "ab", CountersOk: true},
			{Id: "n2", Error: "connection refused"},
		},
		InconsistentIds: []string{"n2"},
	}}
	r := raftq(t, serve(t, f), "", "cluster", "verify")
	if r.code != 1 || !strings.Contains(r.stdout, "consistent: false\ninconsistent: n2\n") ||
		!strings.Contains(r.stderr, "not consistent: n2 did not answer or differ") {
		t.Fatalf("verify with n2 down: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestClusterRemoveForce: --force asks the broker to remove a voter even
// below --bootstrap-expect; without it the broker keeps that floor.
func TestClusterRemoveForce(t *testing.T) {
	f := &fake{}
	addr := serve(t, f)
	for _, args := range [][]string{{"n2"}, {"n3", "--force"}} {
		if r := raftq(t, addr, "", append([]string{"cluster", "remove"}, args...)...); r.code != 0 || r.stdout != "removed node "+args[0]+"\n" {
			t.Fatalf("cluster remove %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	reqs := requests[*raftqv1.RemoveNodeRequest](f)
	want := []*raftqv1.RemoveNodeRequest{{Id: "n2"}, {Id: "n3", Force: true}}
	if len(reqs) != len(want) || !proto.Equal(reqs[0], want[0]) || !proto.Equal(reqs[1], want[1]) {
		t.Fatalf("requests = %v, want %v", reqs, want)
	}
}

func TestFormatDrain(t *testing.T) {
	for _, tc := range []struct {
		in   *raftqv1.DrainEstimate
		want string
	}{
		{&raftqv1.DrainEstimate{State: "draining", DepthChangePerSec: -2, DeliveriesPerSec: 3, EmptiesInSec: 89.6}, "empties in ~1m30s at the current rate (-2.00/s net, 3.00 deliveries/s)"},
		{&raftqv1.DrainEstimate{State: "growing", DepthChangePerSec: 1.5, DeliveriesPerSec: 0}, "growing (+1.50/s net, 0.00 deliveries/s)"},
		{&raftqv1.DrainEstimate{State: "steady", DeliveriesPerSec: 4}, "steady (4.00 deliveries/s)"},
		{&raftqv1.DrainEstimate{State: "empty"}, "empty"},
		{&raftqv1.DrainEstimate{State: "unknown"}, "estimating (needs two samples)"},
	} {
		if got := formatDrain(tc.in); got != tc.want {
			t.Errorf("formatDrain(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Errors found before any call speak in the user's terms: durations the
// broker would silently turn into a default, payloads no queue takes, an
// argument that looks like a flag.
func TestPlainErrorsBeforeAnyCall(t *testing.T) {
	big := strings.Repeat("x", 17<<20)
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"sub-millisecond visibility", "", []string{"queue", "create", "jobs", "--visibility-timeout", "1ns"}, "--visibility-timeout 1ns is less than 1ms"},
		{"fraction of a millisecond", "", []string{"enqueue", "jobs", "x", "--delay", "1.5ms"}, "--delay 1.5ms has a fraction of a millisecond, the broker's resolution; give 1ms or 2ms"},
		{"negative ttl", "", []string{"enqueue", "jobs", "--ttl", "-1s", "x"}, "--ttl must not be negative"},
		{"duration over the limit", "", []string{"queue", "update", "jobs", "--message-ttl", "9000h"}, "is more than 366 days"},
		{"sub-millisecond nack delay", "", []string{"consume", "jobs", "--nack", "--nack-delay", "10us"}, "--nack-delay 10µs is less than 1ms"},
		{"oversized payload", big + "\n", []string{"enqueue", "jobs"}, "message 1 is 17 MiB; no queue accepts a payload over 16 MiB (queue jobs"},
		{"dash argument", "", []string{"queue", "delete", "-jobs"}, "goes after --"},
		{"negative count", "", []string{"consume", "jobs", "--count", "-1"}, "--count must not be negative (got -1)"},
		{"zero max in flight", "", []string{"consume", "jobs", "--max-in-flight", "0"}, "--max-in-flight must be at least 1 (got 0)"},
		{"negative idle timeout", "", []string{"consume", "jobs", "--timeout", "-1s"}, "--timeout must not be negative (got -1s)"},
		{"lease too short to ack", "", []string{"consume", "jobs", "--visibility-timeout", "1ms", "--count", "1"}, "--visibility-timeout 1ms is shorter than 1s"},
		{"lease just under the minimum", "", []string{"consume", "jobs", "--visibility-timeout", "999ms"}, "--visibility-timeout 999ms is shorter than 1s"},
		{"negative restart-after", "", []string{"dev", "--restart-after", "-1s"}, "--restart-after must not be negative (got -1s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{}
			r := raftq(t, serve(t, f), tc.stdin, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q, want it to contain %q", r.code, r.stderr, tc.want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.reqs) != 0 {
				t.Fatalf("%d requests reached the broker", len(f.reqs))
			}
		})
	}
}

// A mistyped flag gets the flag it most likely meant; only an argument
// that starts with a single '-' (a name or a number, since raftq's flags
// take two dashes) gets the hint about putting it after --.
func TestFlagTypoHints(t *testing.T) {
	const dashHint = "goes after --"
	for _, tc := range []struct {
		args     []string
		want     string
		wantDash bool
	}{
		{[]string{"queue", "list", "--jsn"}, "unknown flag --jsn: did you mean --json?", false},
		{[]string{"consume", "jobs", "--vis", "1s"}, "did you mean --visibility-timeout?", false},
		{[]string{"peek", "jobs", "--dql"}, "did you mean --dlq?", false},
		{[]string{"queue", "list", "-json"}, "did you mean --json? (flags take two dashes)", false},
		{[]string{"queue", "list", "--zzzzzz"}, "raftq queue list --help lists its flags", false},
		{[]string{"queue", "delete", "-jobs"}, "queue delete -- -jobs", true},
		{[]string{"enqueue", "jobs", "-5"}, "enqueue jobs -- -5", true},
	} {
		r := raftq(t, "127.0.0.1:1", "", tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, dashHint) != tc.wantDash {
			t.Errorf("%v: exit %d, stderr %q, want %q and the -- hint %t", tc.args, r.code, r.stderr, tc.want, tc.wantDash)
		}
	}
}

func TestPlainTooLarge(t *testing.T) {
	got, ok := plainTooLarge("grpc: received message larger than max (104857700 vs. 17825792)")
	if want := "the request is 100.0 MiB, more than the 17 MiB a node accepts in one call"; !ok || !strings.HasPrefix(got, want) {
		t.Fatalf("got %q, want prefix %q", got, want)
	}
	if _, ok := plainTooLarge("queue not found: q"); ok {
		t.Fatal("rewrote an unrelated message")
	}
}

func TestVersion(t *testing.T) {
	r := raftq(t, "127.0.0.1:1", "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "raftq ") || !strings.Contains(r.stdout, "\ngo: "+runtime.Version()+"\n") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	flag := raftq(t, "127.0.0.1:1", "", "--version")
	if flag.code != 0 || flag.stdout != r.stdout {
		t.Fatalf("--version printed %q, want what version prints, %q", flag.stdout, r.stdout)
	}
	j := raftq(t, "127.0.0.1:1", "", "version", "--json")
	var bi raftqv1.BuildInfo
	if err := protojson.Unmarshal([]byte(j.stdout), &bi); err != nil || bi.GetGoVersion() != runtime.Version() || bi.GetVersion() == "" {
		t.Fatalf("version --json: %q (%v)", j.stdout, err)
	}
	if !strings.Contains(j.stdout, `"go_version"`) {
		t.Fatalf("version --json uses other than the proto field names: %s", j.stdout)
	}
}

func TestBuildInfoDescribe(t *testing.T) {
	for _, tc := range []struct {
		b    buildInfo
		want string
	}{
		{buildInfo{version: "v1.2.0"}, "v1.2.0"},
		{buildInfo{version: "v1.2.0", commit: "0123456789abcdef0123"}, "v1.2.0 (0123456789ab)"},
		{buildInfo{version: "v1.2.0", commit: "0123456789abcdef0123", modified: true}, "v1.2.0 (0123456789ab-dirty)"},
		// git describe already names the commit.
		{buildInfo{version: "v1.2.0-3-g0123456", commit: "0123456789abcdef0123"}, "v1.2.0-3-g0123456"},
	} {
		if got := tc.b.describe(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.b, got, tc.want)
		}
	}
}

// runTerminal runs the command line as if stdin were a terminal on which
// the user types answer.
func runTerminal(t *testing.T, addr, answer string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	a := &app{in: strings.NewReader(answer), out: &out, errOut: &errOut, getenv: func(string) string { return "" },
		isTerminal: func() bool { return true }}
	root := newRootCmd(a)
	root.SetArgs(append([]string{"--addr", addr, "--rpc-timeout", "3s"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := 0
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(&errOut, "raftq: %s\n", describeError(err))
		code = 1
	}
	return result{code, out.String(), errOut.String()}
}

func TestDeleteAndPurgeConfirm(t *testing.T) {
	for _, tc := range []struct {
		name     string
		terminal bool
		answer   string
		args     []string
		wantDone bool
		want     string // in stdout when done, in stderr otherwise
	}{
		{"delete, no terminal", false, "", []string{"queue", "delete", "q"}, false, "stdin is not a terminal; pass --force"},
		{"delete --force", false, "", []string{"queue", "delete", "q", "--force"}, true, "deleted queue q"},
		{"delete --if-empty needs no confirmation", false, "", []string{"queue", "delete", "q", "--if-empty"}, true, "deleted queue q"},
		{"delete, terminal, yes", true, "y\n", []string{"queue", "delete", "q"}, true, "deleted queue q"},
		{"delete, terminal, no", true, "n\n", []string{"queue", "delete", "q"}, false, "not confirmed"},
		{"delete, terminal, no answer", true, "", []string{"queue", "delete", "q"}, false, "no answer"},
		{"purge, no terminal", false, "", []string{"queue", "purge", "q"}, false, "pass --force"},
		{"purge --force", false, "", []string{"queue", "purge", "q", "--force"}, true, "purged 3 messages from q"},
		{"purge, terminal, yes", true, "yes\n", []string{"queue", "purge", "q"}, true, "purged 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{}
			addr := serve(t, f)
			var r result
			if tc.terminal {
				r = runTerminal(t, addr, tc.answer, tc.args...)
			} else {
				r = raftq(t, addr, tc.answer, tc.args...)
			}
			done := len(requests[*raftqv1.DeleteQueueRequest](f))+len(requests[*raftqv1.PurgeQueueRequest](f)) > 0
			if done != tc.wantDone {
				t.Fatalf("done = %t, want %t (exit %d, stderr %q)", done, tc.wantDone, r.code, r.stderr)
			}
			out := r.stderr
			if tc.wantDone {
				out = r.stdout
			}
			if (r.code == 0) != tc.wantDone || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, tc.want)
			}
			if tc.terminal && !strings.Contains(r.stderr, "[y/N]") {
				t.Fatalf("no question asked: %q", r.stderr)
			}
		})
	}
	// The conditions reach the broker.
	f := &fake{}
	if r := raftq(t, serve(t, f), "", "queue", "delete", "q", "--if-empty", "--if-unused"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if d := requests[*raftqv1.DeleteQueueRequest](f); len(d) != 1 || !d[0].GetIfEmpty() || !d[0].GetIfUnused() {
		t.Fatalf("requests %v", d)
	}
	// One delete is one idempotency key, the same in its retry after a
	// lost answer (so the retry cannot delete a queue created in
	// between); another delete has another.
	f = &fake{loseDeletes: 1}
	addr := serve(t, f)
	for range 2 {
		if r := raftq(t, addr, "", "queue", "delete", "q", "--force"); r.code != 0 {
			t.Fatal(r.stderr)
		}
	}
	d := requests[*raftqv1.DeleteQueueRequest](f)
	if len(d) != 3 || d[0].GetIdempotencyKey() == "" || d[1].GetIdempotencyKey() != d[0].GetIdempotencyKey() || d[2].GetIdempotencyKey() == d[0].GetIdempotencyKey() {
		t.Fatalf("delete, its retry, another delete: %v; want one key for the first two and another for the third", d)
	}
}

// Tab completion of a queue argument lists the cluster's queues, for
// every command whose first argument names an existing queue; the
// completion script itself comes from cobra.
func TestCompletion(t *testing.T) {
	addr := serve(t, &fake{})
	for _, path := range [][]string{
		{"queue", "get"}, {"queue", "update"}, {"queue", "delete"}, {"queue", "purge"}, {"queue", "pause"}, {"queue", "resume"},
		{"enqueue"}, {"consume"}, {"consumers"}, {"peek"}, {"redrive"}, {"message", "show"},
	} {
		r := raftq(t, addr, "", append(append([]string{"__complete"}, path...), "ord")...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "orders\norders.dlq\n:4\n") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", strings.Join(path, " "), r.code, r.stdout, r.stderr)
		}
	}
	// Only the first argument is a queue.
	if r := raftq(t, addr, "", "__complete", "enqueue", "orders", ""); strings.Contains(r.stdout, "orders\n") {
		t.Fatalf("completed a payload as a queue: %q", r.stdout)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if r := raftq(t, addr, "", "completion", shell); r.code != 0 || !strings.Contains(r.stdout, "raftq") {
			t.Fatalf("completion %s: exit %d, %q", shell, r.code, r.stderr)
		}
	}
}

// Stdin at /dev/null (cron, systemd, `docker run` without -t, `< /dev/null`
// in a script) is a character device but no terminal: nobody can answer,
// so delete and purge need --force, and say so, instead of asking.
func TestConfirmDevNullIsNoTerminal(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, args := range [][]string{{"queue", "delete", "q"}, {"queue", "purge", "q"}} {
		f := &fake{}
		addr := serve(t, f)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out, errOut bytes.Buffer
		code := run(ctx, append([]string{"--addr", addr, "--rpc-timeout", "3s"}, args...), null, &out, &errOut, func(string) string { return "" })
		cancel()
		if code == 0 || !strings.Contains(errOut.String(), "stdin is not a terminal; pass --force") || strings.Contains(errOut.String(), "[y/N]") {
			t.Fatalf("%v: exit %d, stderr %q; want a refusal naming --force, no question", args, code, errOut.String())
		}
		if n := len(requests[*raftqv1.DeleteQueueRequest](f)) + len(requests[*raftqv1.PurgeQueueRequest](f)); n != 0 {
			t.Fatalf("%v: %d delete/purge calls sent", args, n)
		}
	}
}
