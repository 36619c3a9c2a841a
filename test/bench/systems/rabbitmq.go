package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// RabbitStarter starts n RabbitMQ nodes (Debian's rabbitmq-server, from
// dir) on one machine as one cluster — distinct node names, ports, data
// dirs and a private epmd — and drives quorum queues over AMQP 0-9-1.
func RabbitStarter(name, dir string, n int) Starter {
	return Starter{Name: name, Start: func(ctx context.Context, log *slog.Logger) (*System, error) {
		return startRabbit(ctx, log, name, dir, n)
	}}
}

func startRabbit(ctx context.Context, log *slog.Logger, name, binDir string, n int) (*System, error) {
	server := filepath.Join(binDir, "rabbitmq-server")
	ctl := filepath.Join(binDir, "rabbitmqctl")
	for _, b := range []string{server, ctl} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("rabbitmq: %w (apt-get install rabbitmq-server)", err)
		}
	}
	epmd, err := exec.LookPath("epmd")
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: epmd: %w", err)
	}
	dir, err := os.MkdirTemp("", "raftq-bench-rabbit-")
	if err != nil {
		return nil, err
	}
	var procs []*harness.Process
	cleanup := func() {
		for i := len(procs) - 1; i >= 0; i-- { // nodes first, epmd last
			procs[i].Kill()
		}
		_ = os.RemoveAll(dir)
	}
	// The Erlang cookie is read from $HOME; every node and rabbitmqctl
	// share this one.
	if err := os.WriteFile(filepath.Join(dir, ".erlang.cookie"), []byte("RAFTQBENCHCOOKIE"), 0o400); err != nil {
		cleanup()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		cleanup()
		return nil, err
	}
	ports, err := harness.FreePorts(1 + 2*n)
	if err != nil {
		cleanup()
		return nil, err
	}
	epmdPort := ports[0]
	env := []string{"HOME=" + dir, fmt.Sprintf("ERL_EPMD_PORT=%d", epmdPort)}
	ep, err := startProcess("epmd", filepath.Join(dir, "epmd.log"), env, epmd, "-port", fmt.Sprint(epmdPort))
	if err != nil {
		cleanup()
		return nil, err
	}
	procs = append(procs, ep)
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("rabbit%d@localhost", i+1))
	}
	var urls []string
	var nodeProcs []*harness.Process
	for i := range n {
		id := fmt.Sprintf("rabbit%d", i+1)
		conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\n", ports[1+i])
		if n > 1 {
			conf += "cluster_formation.peer_discovery_backend = classic_config\n"
			for j, nn := range names {
				conf += fmt.Sprintf("cluster_formation.classic_config.nodes.%d = %s\n", j+1, nn)
			}
		}
		cf := filepath.Join(dir, id+".conf")
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			cleanup()
			return nil, err
		}
		nodeEnv := append(slices.Clone(env),
			"RABBITMQ_NODENAME="+names[i],
			fmt.Sprintf("RABBITMQ_DIST_PORT=%d", ports[1+n+i]),
			"RABBITMQ_CONFIG_FILE="+cf,
			"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, id, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(dir, id, "log"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
			"RABBITMQ_PID_FILE="+filepath.Join(dir, id+".pid"),
		)
		p, err := startProcess(id, filepath.Join(dir, id+".out"), nodeEnv, append(serverWrap(), server)...)
		if err != nil {
			cleanup()
			return nil, err
		}
		procs = append(procs, p)
		nodeProcs = append(nodeProcs, p)
		urls = append(urls, fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", ports[1+i]))
	}
	ctlRun := func(ctx context.Context, args ...string) error {
		cmd := exec.CommandContext(ctx, ctl, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for i, nn := range names {
		err := poll(ctx, 90*time.Second, 500*time.Millisecond, "rabbitmq "+nn+" startup", func(ctx context.Context) error {
			if !nodeProcs[i].Running() {
				return errors.New(nn + " exited: " + nodeProcs[i].LogTail(2000))
			}
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			return ctlRun(cctx, "-n", nn, "await_startup")
		})
		if err != nil {
			cleanup()
			return nil, err
		}
	}
	if n > 1 {
		err := poll(ctx, 60*time.Second, 500*time.Millisecond, "rabbitmq cluster", func(ctx context.Context) error {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			return ctlRun(cctx, "-n", names[0], "await_online_nodes", fmt.Sprint(n))
		})
		if err != nil {
			cleanup()
			return nil, err
		}
	}
	var wp []workload.Proc
	for i, p := range nodeProcs {
		wp = append(wp, workload.Proc{Name: fmt.Sprintf("r%d", i+1), Pid: p.Pid()})
	}
	return &System{
		Target: workload.Target{
			Name: name, Nodes: n, Driver: &rabbitDriver{url: urls[0]},
			Procs: func() []workload.Proc { return wp },
			Notes: []string{fmt.Sprintf("%d RabbitMQ 3.10 nodes on one machine, quorum queues (declared on and clients connected to r1), persistent messages, publisher confirms, manual acks, prefetch = max-in-flight; unary and sdk: one publish whose confirm is awaited per call, one ack per message; batch: a batch of publishes whose confirms are awaited together", n)},
		},
		close: cleanup,
	}, nil
}

// rabbitDriver drives quorum queues with amqp091-go: one connection and
// channel per producer (confirm mode) and per consumer (basic.qos).
type rabbitDriver struct {
	url string
}

func (d *rabbitDriver) channel() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(d.url)
	if err != nil {
		return nil, nil, fmt.Errorf("amqp dial: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("amqp channel: %w", err)
	}
	return conn, ch, nil
}

// quorumArgs declares a quorum queue.
func quorumArgs() amqp.Table { return amqp.Table{"x-queue-type": "quorum"} }

func (d *rabbitDriver) CreateQueue(ctx context.Context, q workload.QueueSpec) error {
	conn, ch, err := d.channel()
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ch.QueueDeclare(q.Name, true, false, false, false, quorumArgs())
	return err
}

type rabbitProducer struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
}

func (d *rabbitDriver) NewProducer(ctx context.Context, queue string) (workload.Producer, error) {
	conn, ch, err := d.channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp confirm mode: %w", err)
	}
	return &rabbitProducer{conn: conn, ch: ch, queue: queue}, nil
}

func (p *rabbitProducer) Enqueue(ctx context.Context, payloads [][]byte) error {
	dcs := make([]*amqp.DeferredConfirmation, 0, len(payloads))
	for _, b := range payloads {
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", p.queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/octet-stream",
			Body:         b,
		})
		if err != nil {
			return err
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("amqp: publish nacked by the broker")
		}
	}
	return nil
}

func (p *rabbitProducer) Close() error { return p.conn.Close() }

type rabbitConsumer struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	done chan struct{}
	once sync.Once
	err  error
}

func (d *rabbitDriver) StartConsumer(ctx context.Context, queue string, maxInFlight int, handle func([]byte)) (workload.Consumer, error) {
	conn, ch, err := d.channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(maxInFlight, 0, false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp qos: %w", err)
	}
	ds, err := ch.Consume(queue, "bench", false, false, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("amqp consume: %w", err)
	}
	c := &rabbitConsumer{conn: conn, ch: ch, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for m := range ds {
			handle(m.Body)
			_ = m.Ack(false)
		}
	}()
	return c, nil
}

// Stop cancels the consumer; deliveries already sent are handled and
// acked before the channel closes.
func (c *rabbitConsumer) Stop(ctx context.Context) error {
	c.once.Do(func() {
		c.err = c.ch.Cancel("bench", false)
		select {
		case <-c.done:
		case <-ctx.Done():
			c.err = errors.Join(c.err, ctx.Err())
		}
		c.err = errors.Join(c.err, c.conn.Close())
	})
	return c.err
}

func (d *rabbitDriver) Depth(ctx context.Context, queue string) (int64, error) {
	conn, ch, err := d.channel()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, quorumArgs())
	if err != nil {
		return 0, err
	}
	return int64(q.Messages), nil
}
