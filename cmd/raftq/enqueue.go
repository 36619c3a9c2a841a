package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

// Enqueue batch limits: large stdin input is sent as several batches, each
// all-or-nothing, well under the broker's request size limit.
const (
	maxBatchMessages = 256
	maxBatchBytes    = 1 << 20
)

type enqueueFlags struct {
	priority     int32
	fairnessKey  string
	concKey      string
	weight       uint32
	throttleKeys []string
	delay        time.Duration
	ttl          time.Duration
	dedupID      string
	headers      []string
}

// template is the message every payload is enqueued with.
func (f *enqueueFlags) template() (*raftqv1.EnqueueMessage, error) {
	delay, err := msOf("delay", f.delay)
	if err != nil {
		return nil, err
	}
	ttl, err := msOf("ttl", f.ttl)
	if err != nil {
		return nil, err
	}
	m := &raftqv1.EnqueueMessage{
		Priority:       f.priority,
		FairnessKey:    f.fairnessKey,
		ConcurrencyKey: f.concKey,
		Weight:         f.weight,
		ThrottleKeys:   f.throttleKeys,
		DelayMs:        delay,
		TtlMs:          ttl,
		DedupId:        f.dedupID,
	}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--header %q: want key=value", h)
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = v
	}
	return m, nil
}

func newEnqueueCmd(a *app) *cobra.Command {
	var f enqueueFlags
	cmd := &cobra.Command{
		Use:   "enqueue QUEUE [PAYLOAD...]",
		Short: "Enqueue messages: one per PAYLOAD, or one per stdin line",
		Long: "Enqueue one message per PAYLOAD argument. With no PAYLOAD, or for a PAYLOAD\n" +
			"of \"-\", each non-empty line of stdin is a message; lines are sent in\n" +
			"batches as they arrive. Prints the new message ids, one per line.",
		Args: cobra.MinimumNArgs(1),
	}
	fs := cmd.Flags()
	fs.Int32Var(&f.priority, "priority", 0, "priority (higher is delivered first)")
	fs.StringVar(&f.fairnessKey, "fairness-key", "", "fairness key (messages share delivery fairly across keys)")
	fs.StringVar(&f.concKey, "concurrency-key", "", "concurrency key (the queue's --concurrency caps how many of its messages are in flight)")
	fs.Uint32Var(&f.weight, "weight", 0, "fairness weight of the key (0 = 1)")
	fs.StringArrayVar(&f.throttleKeys, "throttle-key", nil, "throttle key (repeatable)")
	fs.DurationVar(&f.delay, "delay", 0, "deliver no sooner than this from now")
	fs.DurationVar(&f.ttl, "ttl", 0, "dead-letter the message if not acked this long after enqueue")
	fs.StringVar(&f.dedupID, "dedup-id", "", "dedup id (one message only; default: a random id per message)")
	fs.StringArrayVar(&f.headers, "header", nil, "header key=value (repeatable)")

	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		tmpl, err := f.template()
		if err != nil {
			return err
		}
		c, err := a.dial(cmd)
		if err != nil {
			return err
		}
		defer c.Close()
		e := &enqueuer{a: a, c: c, cmd: cmd, queue: args[0], tmpl: tmpl}
		payloads := args[1:]
		if len(payloads) == 0 {
			payloads = []string{"-"}
		}
		stdinRead := false
		for _, p := range payloads {
			if p != "-" {
				if err := e.add([]byte(p)); err != nil {
					return err
				}
				continue
			}
			if stdinRead {
				return errors.New(`"-" (stdin) given more than once`)
			}
			stdinRead = true
			if err := e.addLines(a.in); err != nil {
				return err
			}
		}
		return e.flush()
	}
	return cmd
}

// enqueuer accumulates messages and sends them in batches.
type enqueuer struct {
	a     *app
	c     *client.Client
	cmd   *cobra.Command
	queue string
	tmpl  *raftqv1.EnqueueMessage

	batch []*raftqv1.EnqueueMessage
	bytes int
	total int
}

func (e *enqueuer) add(payload []byte) error {
	if e.tmpl.DedupId != "" && e.total > 0 {
		// One dedup id on two messages would silently drop the second.
		return errors.New("--dedup-id names a single message, but more than one was given")
	}
	if len(payload) > fsm.MaxMessageBytesCap {
		// gRPC would refuse the request with "received message larger
		// than max"; no queue could take it anyway.
		return fmt.Errorf("message %d is %s; no queue accepts a payload over %s (queue %s takes at most its max_message_bytes, 1 MiB by default)",
			e.total+1, fsm.HumanBytes(int64(len(payload))), fsm.HumanBytes(fsm.MaxMessageBytesCap), e.queue)
	}
	m := &raftqv1.EnqueueMessage{
		Payload:        payload,
		Headers:        e.tmpl.Headers,
		Priority:       e.tmpl.Priority,
		FairnessKey:    e.tmpl.FairnessKey,
		ConcurrencyKey: e.tmpl.ConcurrencyKey,
		Weight:         e.tmpl.Weight,
		ThrottleKeys:   e.tmpl.ThrottleKeys,
		DelayMs:        e.tmpl.DelayMs,
		DedupId:        e.tmpl.DedupId,
		TtlMs:          e.tmpl.TtlMs,
	}
	e.batch = append(e.batch, m)
	e.bytes += len(payload)
	e.total++
	if len(e.batch) >= maxBatchMessages || e.bytes >= maxBatchBytes {
		return e.flush()
	}
	return nil
}

// addLines enqueues each non-empty line of r. It sends what it has
// whenever reading further would wait for input, so a slow producer piping
// into raftq sees its messages enqueued as it writes them.
func (e *enqueuer) addLines(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > 0 {
			if aerr := e.add(line); aerr != nil {
				return aerr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
		if br.Buffered() == 0 && e.tmpl.DedupId == "" {
			if err := e.flush(); err != nil {
				return err
			}
		}
	}
}

func (e *enqueuer) flush() error {
	if len(e.batch) == 0 {
		return nil
	}
	ctx, cancel := e.a.callCtx(e.cmd.Context())
	defer cancel()
	ids, err := e.c.Enqueue(ctx, e.queue, e.batch...)
	if err != nil {
		return err
	}
	e.batch, e.bytes = nil, 0
	if e.a.json {
		return printJSON(e.a.out, &raftqv1.EnqueueResponse{MessageIds: ids})
	}
	_, err = fmt.Fprintln(e.a.out, strings.Join(ids, "\n"))
	return err
}
