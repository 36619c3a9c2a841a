package test

// BenchmarkUnary measures the path most clients take (Python, Java,
// grpcurl): one message per unary Enqueue and one unary Ack per message,
// each call waited for, from a plain grpc-go client on the generated stubs
// (no SDK streams, no retries, no dedup ids). It runs real `raftq serve`
// processes with default flags (fsync on) plus --pprof, calls the leader
// directly, and reports per run:
//
//	msgs/s                 messages acknowledged per second
//	p50-ms, p99-ms         call latency
//	leader-allocs/msg      heap allocations on the leader per message
//	leader-B/msg           heap bytes allocated on the leader per message
//	leader-cpu-us/msg      leader CPU (user+system) per message
//	follower-cpu-us/msg    one follower's CPU per message (their mean)
//	cluster-cpu-us/msg     the same summed over every node: the server CPU
//	client-cpu-us/msg      this process's CPU per message: the load
//	                       generator (grpc-go client, payloads, latencies)
//	entries/msg            Raft entries committed per message
//	load1                  the machine's 1-minute load average at the end
//
// Phases: enqueue (ubProducers × ubInFlight calls outstanding), sync (one
// call at a time per producer: the latency path) and ack (lease streams,
// one unary Ack per delivery).
//
// Run it (a few minutes; a fixed count skips the framework's ramp-up):
//
//	RAFTQ_TEST_NORACE=1 go test -run '^$' -bench 'Unary/nodes=3' -benchtime 20000x ./test
//
// RAFTQ_BENCH_VARIANTS compares builds or settings in one run: each
// variant is a cluster of its own, all started up front, and each run of
// b.N messages per variant is cut into RAFTQ_BENCH_ROUNDS rounds (default
// 4) that alternate between the variants, so that the load of a shared
// machine falls on every variant alike. Each figure is then reported per
// variant, its unit suffixed with ":name".
//
//	RAFTQ_BENCH_VARIANTS='old,bin=/tmp/raftq-old;new;gogc400,env=GOGC=400'
//
// (name, then bin=PATH for another binary, env=K=V for the nodes'
// environment, arg=FLAG for extra serve flags; default: one variant "head"
// of this checkout). RAFTQ_BENCH_PROFILE=DIR writes each variant's leader
// CPU profile (RAFTQ_BENCH_PROFILE_SECONDS, default 5, from the start of
// its first round of at least 1000 messages) and its allocation profile
// before and after that round, for
// `go tool pprof -sample_index=alloc_space -base before after` (each
// taken after a GC: a heap profile is as of the last GC, so without one
// the window would be shifted to an earlier phase).
// RAFTQ_BENCH_PROFILE also takes the first follower's CPU profile over
// the same window (<name>.follower-cpu.pb.gz).
//
// RAFTQ_BENCH_NODE_CPUS=LIST runs every node under `taskset -c LIST`, so
// that the client and the servers can be told apart on a small machine:
// run the benchmark itself under `taskset -c` on the other cores, e.g.
//
//	RAFTQ_BENCH_NODE_CPUS=1 taskset -c 0 go test -run '^$' -bench 'Unary/nodes=3' ...
//
// CPU per message (from /proc/<pid>/stat and getrusage, before and after
// a fixed number of calls) is what to compare: it moves far less with the
// machine's load than msgs/s or latency do.
// Nothing here fails on speed.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"github.com/raftq/raftq/test/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The workload: 4 producers (connections) × 256 calls in flight,
// 1 KiB payloads; 4 consumers with max_in_flight 64.
const (
	ubProducers   = 4
	ubInFlight    = 256
	ubPayload     = 1024
	ubConsumers   = 4
	ubConsumerWin = 64
)

type benchVariant struct {
	name string
	bin  string
	env  []string
	args []string
}

// benchVariants parses RAFTQ_BENCH_VARIANTS.
func benchVariants(b *testing.B) []benchVariant {
	spec := os.Getenv("RAFTQ_BENCH_VARIANTS")
	if spec == "" {
		spec = "head"
	}
	var out []benchVariant
	for _, one := range strings.Split(spec, ";") {
		parts := strings.Split(strings.TrimSpace(one), ",")
		v := benchVariant{name: parts[0]}
		for _, p := range parts[1:] {
			k, val, ok := strings.Cut(p, "=")
			switch {
			case ok && k == "bin":
				v.bin = val
			case ok && k == "env":
				v.env = append(v.env, val)
			case ok && k == "arg":
				v.args = append(v.args, val)
			default:
				b.Fatalf("RAFTQ_BENCH_VARIANTS: %q: want bin=, env= or arg=", p)
			}
		}
		if v.name == "" {
			b.Fatalf("RAFTQ_BENCH_VARIANTS: a variant without a name in %q", spec)
		}
		out = append(out, v)
	}
	return out
}

var (
	benchBinOnce sync.Once
	benchBin     string
	benchBinErr  error
)

// headBinary is this checkout's raftq without the race detector: the
// package's own binary when RAFTQ_TEST_NORACE is set, else one built here.
func headBinary(b *testing.B) string {
	if os.Getenv("RAFTQ_TEST_NORACE") != "" {
		return binary
	}
	benchBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "raftq-benchbin-")
		if err != nil {
			benchBinErr = err
			return
		}
		benchBin, benchBinErr = harness.Build(context.Background(), dir, false)
	})
	if benchBinErr != nil {
		b.Fatal(benchBinErr)
	}
	return benchBin
}

func BenchmarkUnary(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			vs := benchVariants(b)
			cs := make([]*benchCluster, len(vs))
			for i, v := range vs {
				if v.bin == "" {
					v.bin = headBinary(b)
				}
				cs[i] = startBenchCluster(b, v, nodes)
			}
			b.Run("enqueue", func(b *testing.B) { runRounds(b, cs, (*benchCluster).runEnqueue) })
			b.Run("sync", func(b *testing.B) { runRounds(b, cs, (*benchCluster).runSync) })
			b.Run("ack", func(b *testing.B) { runRounds(b, cs, (*benchCluster).runAck) })
		})
	}
}

// runRounds runs b.N messages on every variant's cluster, in
// RAFTQ_BENCH_ROUNDS rounds (default 4) that alternate between the
// variants (A B C, B C A, ...), so that a shared machine's changing load
// falls on each variant alike; it reports every variant's figures, the
// unit suffixed with its name when there is more than one.
func runRounds(b *testing.B, cs []*benchCluster, phase func(*benchCluster, *testing.B, int) *roundResult) {
	rounds := 4
	if v, err := strconv.Atoi(os.Getenv("RAFTQ_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	rounds = min(rounds, b.N)
	total := make([]*roundResult, len(cs))
	for i := range total {
		total[i] = &roundResult{}
	}
	b.StopTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		for k := range cs {
			i := (r + k) % len(cs)
			total[i].add(phase(cs[i], b, n))
		}
	}
	for i, c := range cs {
		suffix := ""
		if len(cs) > 1 {
			suffix = ":" + c.name
		}
		total[i].report(b, suffix)
	}
}

// benchCluster is the nodes of one variant and a connection per client
// to the leader.
type benchCluster struct {
	name   string
	nodes  []*harness.Node
	leader *harness.Node
	conns  []*grpc.ClientConn // ubProducers (= ubConsumers) connections
	runs   atomic.Int64       // names each run's queue
	// profiled: the benchmarks whose leader profile has been taken.
	profiled map[string]bool
}

func startBenchCluster(b *testing.B, v benchVariant, n int) *benchCluster {
	b.Helper()
	c := &benchCluster{name: v.name, profiled: map[string]bool{}}
	for i := range n {
		node, err := harness.NewNode(harness.NodeConfig{
			ID: fmt.Sprintf("n%d", i+1), Bin: v.bin, Dir: b.TempDir(),
			Env: v.env, Args: append([]string{"--pprof"}, v.args...),
			Wrap: nodeWrap(),
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(node.Kill)
		c.nodes = append(c.nodes, node)
	}
	if n > 1 {
		for _, node := range c.nodes {
			node.Args = append(node.Args, harness.JoinFlags(c.nodes)...)
		}
	}
	for _, node := range c.nodes {
		if err := node.Launch(); err != nil {
			b.Fatal(err)
		}
	}
	cl := harness.Dial(b, c.nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := harness.WaitReady(ctx, cl); err != nil {
		b.Fatal(err)
	}
	waitVoters(b, cl, c.nodes[0], n)
	c.leader = leaderOf(b, c.nodes)
	for range ubProducers {
		conn, err := grpc.NewClient(c.leader.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		c.conns = append(c.conns, conn)
	}
	return c
}

// nodeWrap is `taskset -c $RAFTQ_BENCH_NODE_CPUS`, or nothing.
func nodeWrap() []string {
	if cpus := os.Getenv("RAFTQ_BENCH_NODE_CPUS"); cpus != "" {
		return []string{"taskset", "-c", cpus}
	}
	return nil
}

// follower is a node other than the leader, or nil on one node.
func (c *benchCluster) follower() *harness.Node {
	for _, n := range c.nodes {
		if n != c.leader {
			return n
		}
	}
	return nil
}

func (c *benchCluster) queue(b *testing.B, kind string) string {
	b.Helper()
	name := fmt.Sprintf("%s-%d", kind, c.runs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := raftqv1.NewBrokerClient(c.conns[0]).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name}); err != nil {
		b.Fatal(err)
	}
	return name
}

// drop deletes a queue a round filled (untimed), so that the state, and
// with it the snapshots the nodes write as the log grows, stays small:
// otherwise each round leaves its messages behind, and a snapshot of a
// growing state lands in whichever variant's round it falls on.
func (c *benchCluster) drop(b *testing.B, name string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := raftqv1.NewBrokerClient(c.conns[0]).DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: name}); err != nil {
		b.Fatal(err)
	}
}

// runEnqueue: n single-message unary Enqueues, ubProducers × ubInFlight
// outstanding.
func (c *benchCluster) runEnqueue(b *testing.B, n int) *roundResult {
	return c.enqueueCalls(b, n, ubInFlight)
}

// runSync: n single-message unary Enqueues, one call at a time per
// producer (the latency path: each call waits for its own commit, and
// few calls are there to share an entry).
func (c *benchCluster) runSync(b *testing.B, n int) *roundResult {
	return c.enqueueCalls(b, n, 1)
}

// enqueueCalls: n single-message unary Enqueues from ubProducers
// connections with inFlight calls outstanding on each.
func (c *benchCluster) enqueueCalls(b *testing.B, n, inFlight int) *roundResult {
	queue := c.queue(b, "enq")
	payload := make([]byte, ubPayload)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	var next atomic.Int64
	lat := newLatencies(ubProducers * inFlight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m := c.measure(b, n)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error] // the first error; a Value would panic on a second concrete type
	for p := range ubProducers {
		cl := raftqv1.NewBrokerClient(c.conns[p])
		for w := range inFlight {
			mine := lat.slot(p*inFlight + w)
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					start := time.Now()
					_, err := cl.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: queue, Messages: []*raftqv1.EnqueueMessage{{Payload: payload}}})
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
					*mine = append(*mine, time.Since(start))
				}
			})
		}
	}
	wg.Wait()
	res := m.done(b, n, lat)
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	c.drop(b, queue)
	return res
}

// runAck: n messages (enqueued untimed, 1000 per call) leased by
// ubConsumers Lease streams of max_in_flight ubConsumerWin and each acked
// by one unary Ack as it arrives.
func (c *benchCluster) runAck(b *testing.B, n int) *roundResult {
	queue := c.queue(b, "ack")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl := raftqv1.NewBrokerClient(c.conns[0])
	payload := make([]byte, ubPayload)
	for left := n; left > 0; {
		k := min(left, 1000)
		msgs := make([]*raftqv1.EnqueueMessage, k)
		for i := range msgs {
			msgs[i] = &raftqv1.EnqueueMessage{Payload: payload}
		}
		if _, err := cl.Enqueue(ctx, &raftqv1.EnqueueRequest{Queue: queue, Messages: msgs}); err != nil {
			b.Fatal(err)
		}
		left -= k
	}
	var acked atomic.Int64
	all := make(chan struct{})
	lat := newLatencies(ubConsumers * ubConsumerWin)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	m := c.measure(b, n)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error] // the first error; a Value would panic on a second concrete type
	fail := func(err error) {
		failed.CompareAndSwap(nil, &err)
		stop()
	}
	for i := range ubConsumers {
		cl := raftqv1.NewBrokerClient(c.conns[i])
		stream, err := cl.Lease(lctx, &raftqv1.LeaseRequest{Queue: queue, MaxInFlight: ubConsumerWin})
		if err != nil {
			b.Fatal(err)
		}
		// Ackers: one per slot of the window, each acking one delivery
		// at a time.
		work := make(chan *raftqv1.Delivery, ubConsumerWin)
		for w := range ubConsumerWin {
			mine := lat.slot(i*ubConsumerWin + w)
			wg.Go(func() {
				for d := range work {
					start := time.Now()
					resp, err := cl.Ack(lctx, &raftqv1.AckRequest{Queue: queue, Acks: []*raftqv1.LeaseRef{{MessageId: d.Id, LeaseToken: d.LeaseToken}}})
					if err != nil {
						fail(err)
						continue
					}
					if r := resp.Results[0]; !r.Ok {
						fail(fmt.Errorf("ack %s: %s", d.Id, r.Error))
						continue
					}
					*mine = append(*mine, time.Since(start))
					if acked.Add(1) == int64(n) {
						close(all)
					}
				}
			})
		}
		wg.Go(func() {
			defer close(work)
			for {
				resp, err := stream.Recv()
				if err != nil {
					return
				}
				for _, d := range resp.Messages {
					work <- d
				}
			}
		})
	}
	select {
	case <-all:
	case <-lctx.Done():
	}
	res := m.done(b, n, lat)
	stop()
	wg.Wait()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	return res
}

// latencies holds one slice per caller goroutine (no lock on the path).
type latencies struct{ per [][]time.Duration }

func newLatencies(n int) *latencies { return &latencies{per: make([][]time.Duration, n)} }

func (l *latencies) slot(i int) *[]time.Duration { return &l.per[i] }

// roundResult is what one or more rounds on one cluster measured.
type roundResult struct {
	msgs           int
	elapsed        time.Duration
	lat            []time.Duration
	leaderCPU      time.Duration
	clusterCPU     time.Duration
	clientCPU      time.Duration // this process's
	followers      int
	mallocs, bytes float64 // the leader's
	entries        uint64  // Raft entries committed
	load1          float64 // the last round's
}

func (r *roundResult) add(o *roundResult) {
	r.msgs += o.msgs
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	r.leaderCPU += o.leaderCPU
	r.clusterCPU += o.clusterCPU
	r.clientCPU += o.clientCPU
	r.followers = o.followers
	r.mallocs += o.mallocs
	r.bytes += o.bytes
	r.entries += o.entries
	r.load1 = o.load1
}

func (r *roundResult) report(b *testing.B, suffix string) {
	n := float64(r.msgs)
	slices.Sort(r.lat)
	q := func(f float64) float64 {
		if len(r.lat) == 0 {
			return 0
		}
		return float64(r.lat[min(len(r.lat)-1, int(f*float64(len(r.lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(n/r.elapsed.Seconds(), "msgs/s"+suffix)
	b.ReportMetric(q(0.5), "p50-ms"+suffix)
	b.ReportMetric(q(0.99), "p99-ms"+suffix)
	b.ReportMetric(r.mallocs/n, "leader-allocs/msg"+suffix)
	b.ReportMetric(r.bytes/n, "leader-B/msg"+suffix)
	b.ReportMetric(float64(r.leaderCPU.Microseconds())/n, "leader-cpu-us/msg"+suffix)
	if r.followers > 0 {
		b.ReportMetric(float64((r.clusterCPU-r.leaderCPU).Microseconds())/n/float64(r.followers), "follower-cpu-us/msg"+suffix)
	}
	b.ReportMetric(float64(r.clusterCPU.Microseconds())/n, "cluster-cpu-us/msg"+suffix)
	b.ReportMetric(float64(r.clientCPU.Microseconds())/n, "client-cpu-us/msg"+suffix)
	b.ReportMetric(float64(r.entries)/n, "entries/msg"+suffix)
	b.ReportMetric(r.load1, "load1")
}

// measurement is what the nodes had used when a round started.
type measurement struct {
	c        *benchCluster
	start    time.Time
	cpu      []time.Duration // per node
	self     time.Duration   // this process's
	mallocs  float64         // leader's
	bytes    float64
	commit   uint64     // the leader's commit index
	profile  chan error // the leader's and a follower's CPU profiles, when taken
	profDir  string
	profName string
}

func (c *benchCluster) measure(b *testing.B, n int) *measurement {
	b.Helper()
	m := &measurement{c: c}
	for _, n := range c.nodes {
		m.cpu = append(m.cpu, nodeCPU(b, n))
	}
	m.mallocs, m.bytes = leaderAllocs(b, c.leader)
	m.commit = c.commitIndex(b)
	if dir := os.Getenv("RAFTQ_BENCH_PROFILE"); dir != "" && n >= 1000 && !c.profiled[b.Name()] {
		c.profiled[b.Name()] = true
		m.profDir = dir
		m.profName = strings.NewReplacer("/", "_", "=", "").Replace(b.Name()) + "_" + c.name
		secs := os.Getenv("RAFTQ_BENCH_PROFILE_SECONDS")
		if secs == "" {
			secs = "5"
		}
		if err := fetchTo(c.leader, "/debug/pprof/allocs?gc=1", filepath.Join(dir, m.profName+".allocs-before.pb.gz")); err != nil {
			b.Fatal(err)
		}
		m.profile = make(chan error, 2)
		go func() {
			m.profile <- fetchTo(c.leader, "/debug/pprof/profile?seconds="+secs, filepath.Join(dir, m.profName+".cpu.pb.gz"))
		}()
		f := c.follower()
		go func() {
			if f == nil {
				m.profile <- nil
				return
			}
			m.profile <- fetchTo(f, "/debug/pprof/profile?seconds="+secs, filepath.Join(dir, m.profName+".follower-cpu.pb.gz"))
		}()
	}
	b.StartTimer()
	m.self = selfCPU(b)
	m.start = time.Now()
	return m
}

func (m *measurement) done(b *testing.B, n int, lat *latencies) *roundResult {
	b.Helper()
	elapsed := time.Since(m.start)
	self := selfCPU(b) - m.self
	b.StopTimer()
	r := &roundResult{msgs: n, elapsed: elapsed, clientCPU: self, followers: len(m.c.nodes) - 1, load1: load1()}
	mallocs, bytes := leaderAllocs(b, m.c.leader)
	r.mallocs, r.bytes = mallocs-m.mallocs, bytes-m.bytes
	r.entries = m.c.commitIndex(b) - m.commit
	for i, node := range m.c.nodes {
		d := nodeCPU(b, node) - m.cpu[i]
		r.clusterCPU += d
		if node == m.c.leader {
			r.leaderCPU = d
		}
	}
	for _, p := range lat.per {
		r.lat = append(r.lat, p...)
	}
	if m.profile != nil {
		for range 2 {
			if err := <-m.profile; err != nil {
				b.Fatal(err)
			}
		}
		if err := fetchTo(m.c.leader, "/debug/pprof/allocs?gc=1", filepath.Join(m.profDir, m.profName+".allocs-after.pb.gz")); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// commitIndex is the leader's Raft commit index.
func (c *benchCluster) commitIndex(b *testing.B) uint64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := raftqv1.NewClusterClient(c.conns[0]).Status(ctx, &raftqv1.StatusRequest{})
	if err != nil {
		b.Fatal(err)
	}
	return st.CommitIndex
}

// nodeCPU is the user+system CPU time the node's process has used.
func nodeCPU(b *testing.B, n *harness.Node) time.Duration {
	b.Helper()
	pid, err := n.Pid()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) in ")".
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// utime and stime are fields 14 and 15 of stat, 12 and 13 here.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}

// selfCPU is the user+system CPU time this process (the load generator)
// has used.
func selfCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// leaderAllocs reads the Go runtime's cumulative allocation counters from
// the node's /metrics.
func leaderAllocs(b *testing.B, n *harness.Node) (mallocs, bytes float64) {
	b.Helper()
	resp, err := http.Get("http://" + n.HTTP + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var dst *float64
		switch name {
		case "go_memstats_mallocs_total":
			dst = &mallocs
		case "go_memstats_alloc_bytes_total":
			dst = &bytes
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(val, 64); err != nil {
			b.Fatal(err)
		}
		found++
	}
	if found != 2 {
		b.Fatalf("%s/metrics: go_memstats_mallocs_total or go_memstats_alloc_bytes_total missing", n.HTTP)
	}
	return mallocs, bytes
}

func fetchTo(n *harness.Node, path, file string) error {
	resp, err := http.Get("http://" + n.HTTP + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func load1() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(raw))
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
