package systems

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/raftq/raftq/test/bench/workload"
	"github.com/raftq/raftq/test/harness"
)

// NATSStarter starts n nats-server processes of bin as one JetStream
// cluster with file storage; syncAlways sets `sync_interval: always`
// (fsync every write, like raftq) instead of NATS's default (fsync every
// two minutes). Queues are R=n WorkQueue streams.
func NATSStarter(name, bin string, n int, syncAlways bool) Starter {
	return Starter{Name: name, Start: func(ctx context.Context, log *slog.Logger) (*System, error) {
		return startNATS(ctx, log, name, bin, n, syncAlways)
	}}
}

func startNATS(ctx context.Context, log *slog.Logger, name, bin string, n int, syncAlways bool) (*System, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("nats-server binary %q: %w (make bench-peers installs it into ./bin)", bin, err)
	}
	dir, err := os.MkdirTemp("", "raftq-bench-nats-")
	if err != nil {
		return nil, err
	}
	var procs []*harness.Process
	cleanup := func() {
		for _, p := range procs {
			p.Kill()
		}
		_ = os.RemoveAll(dir)
	}
	ports, err := harness.FreePorts(2 * n)
	if err != nil {
		cleanup()
		return nil, err
	}
	var routes, urls []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	syncConf := ""
	if syncAlways {
		syncConf = "\n  sync_interval: always"
	}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q%s
}
`, id, ports[i], filepath.Join(dir, id), syncConf)
		if n > 1 {
			conf += fmt.Sprintf(`cluster {
  name: bench
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, ports[n+i], strings.Join(routes, ", "))
		}
		cf := filepath.Join(dir, id+".conf")
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			cleanup()
			return nil, err
		}
		p, err := startProcess("nats-"+id, filepath.Join(dir, id+".log"), nil, append(serverWrap(), bin, "-c", cf)...)
		if err != nil {
			cleanup()
			return nil, err
		}
		procs = append(procs, p)
	}
	d := &natsDriver{urls: strings.Join(urls, ","), replicas: n}
	err = poll(ctx, 60*time.Second, 200*time.Millisecond, "nats jetstream ready", func(ctx context.Context) error {
		for _, p := range procs {
			if !p.Running() {
				return errors.New(p.Name() + " exited: " + p.LogTail(2000))
			}
		}
		nc, js, err := d.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(cctx)
		return err
	})
	if err != nil {
		cleanup()
		return nil, err
	}
	var wp []workload.Proc
	for i, p := range procs {
		wp = append(wp, workload.Proc{Name: fmt.Sprintf("n%d", i+1), Pid: p.Pid()})
	}
	syncNote := "default sync (fsync every 2 min: an acknowledged publish is in the page cache of a quorum)"
	if syncAlways {
		syncNote = "sync_interval: always (fsync on every write)"
	}
	return &System{
		Target: workload.Target{
			Name: name, Nodes: n, Driver: d,
			Procs: func() []workload.Proc { return wp },
			Notes: []string{fmt.Sprintf("%d nats-server, JetStream R%d WorkQueue stream, file storage, %s; unary and sdk: js.Publish (one outstanding per goroutine) and msg.Ack(); batch: a batch of PublishAsync awaited together", n, n, syncNote)},
		},
		close: cleanup,
	}, nil
}

// natsDriver drives JetStream with nats.go's jetstream API: Publish (one
// outstanding per goroutine), PublishAsync for batches, and one shared
// durable pull consumer per stream read with Consume.
type natsDriver struct {
	urls     string
	replicas int
}

func (d *natsDriver) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(d.urls, nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("nats connect: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

const natsDurable = "bench"

func (d *natsDriver) CreateQueue(ctx context.Context, q workload.QueueSpec) error {
	nc, js, err := d.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	// Right after startup the meta leader may not know every peer yet.
	return poll(ctx, 60*time.Second, 200*time.Millisecond, "nats create stream "+q.Name, func(ctx context.Context) error {
		s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:      q.Name,
			Subjects:  []string{q.Name},
			Retention: jetstream.WorkQueuePolicy,
			Storage:   jetstream.FileStorage,
			Replicas:  d.replicas,
		})
		if err != nil {
			return err
		}
		_, err = s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       natsDurable,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: q.Consumers * q.MaxInFlight,
			Replicas:      d.replicas,
		})
		return err
	})
}

type natsProducer struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
}

func (d *natsDriver) NewProducer(ctx context.Context, queue string) (workload.Producer, error) {
	nc, js, err := d.connect()
	if err != nil {
		return nil, err
	}
	return &natsProducer{nc: nc, js: js, subject: queue}, nil
}

func (p *natsProducer) Enqueue(ctx context.Context, payloads [][]byte) error {
	if len(payloads) == 1 {
		_, err := p.js.Publish(ctx, p.subject, payloads[0])
		return err
	}
	futs := make([]jetstream.PubAckFuture, 0, len(payloads))
	for _, b := range payloads {
		f, err := p.js.PublishAsync(p.subject, b)
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *natsProducer) Close() error { p.nc.Close(); return nil }

type natsConsumer struct {
	nc   *nats.Conn
	cc   jetstream.ConsumeContext
	once sync.Once
	err  error
}

func (d *natsDriver) StartConsumer(ctx context.Context, queue string, maxInFlight int, handle func([]byte)) (workload.Consumer, error) {
	nc, js, err := d.connect()
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, queue, natsDurable)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		handle(m.Data())
		_ = m.Ack()
	}, jetstream.PullMaxMessages(maxInFlight))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats consume: %w", err)
	}
	return &natsConsumer{nc: nc, cc: cc}, nil
}

// Stop drains the consume loop (handling what was already pulled), then
// flushes the acks and closes the connection.
func (c *natsConsumer) Stop(ctx context.Context) error {
	c.once.Do(func() {
		c.cc.Drain()
		select {
		case <-c.cc.Closed():
		case <-ctx.Done():
			c.err = ctx.Err()
		}
		if err := c.nc.FlushWithContext(ctx); err != nil {
			c.err = errors.Join(c.err, err)
		}
		c.nc.Close()
	})
	return c.err
}

func (d *natsDriver) Depth(ctx context.Context, queue string) (int64, error) {
	nc, js, err := d.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	s, err := js.Stream(ctx, queue)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int64(info.State.Msgs), nil
}
