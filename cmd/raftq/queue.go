package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/raftq/raftq/client"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
)

func newQueueCmd(a *app) *cobra.Command {
	cmd := group("queue", "Create, change, inspect and delete queues")
	cmd.AddCommand(
		newQueueCreateCmd(a),
		newQueueUpdateCmd(a),
		newQueueDeleteCmd(a),
		newQueueListCmd(a),
		newQueueGetCmd(a),
		newQueuePurgeCmd(a),
		newQueuePauseCmd(a),
		newQueueResumeCmd(a),
	)
	return cmd
}

// configFlags are the QueueConfig flags shared by create and update.
type configFlags struct {
	visibility      time.Duration
	maxDeliveries   int32
	deadLetterQueue string
	maxDepth        int64
	maxBytes        int64
	messageTTL      time.Duration
	dedupWindow     time.Duration
	maxMessageBytes int64
	fairnessQuantum int32
	throttles       []string
	clearThrottles  bool
	concurrency     int32
	concurrencyKeys []string
	clearConcKeys   bool
	retryInitial    time.Duration
	retryMax        time.Duration
	retryMultiplier float64
	retryJitter     float64
	clearRetry      bool
}

// retryFlags are the flags of QueueConfig.retry, set together: any of them
// replaces the whole policy (update-mask path "retry").
var retryFlags = []string{"retry-initial", "retry-max", "retry-multiplier", "retry-jitter"}

func (f *configFlags) register(fs *pflag.FlagSet, update bool) {
	fs.DurationVar(&f.visibility, "visibility-timeout", 0, "lease length of a delivery (0 = 30s)")
	fs.Int32Var(&f.maxDeliveries, "max-deliveries", 0, "deliveries before a message is dead-lettered (0 = 10)")
	fs.StringVar(&f.deadLetterQueue, "dead-letter-queue", "", "dead-letter queue name (default <name>.dlq)")
	fs.Int64Var(&f.maxDepth, "max-depth", 0, "most messages the queue holds (0 = unlimited)")
	fs.Int64Var(&f.maxBytes, "max-bytes", 0, "most bytes the queue's messages may cost: payload, headers, keys and a per-message overhead (0 = unlimited)")
	fs.DurationVar(&f.messageTTL, "message-ttl", 0, "time from enqueue after which a message is dead-lettered (0 = none)")
	fs.DurationVar(&f.dedupWindow, "dedup-window", 0, "how long a dedup id is remembered (0 = 2m)")
	fs.Int64Var(&f.maxMessageBytes, "max-message-bytes", 0, "largest payload accepted (0 = 1 MiB)")
	fs.Int32Var(&f.fairnessQuantum, "fairness-quantum", 0, "messages per weight unit per fairness round (0 = 1)")
	help := "throttle rule key=rate[:burst], rate per second (repeatable)"
	if update {
		help += "; replaces all of the queue's rules"
		fs.BoolVar(&f.clearThrottles, "clear-throttles", false, "remove all throttle rules")
	}
	fs.StringArrayVar(&f.throttles, "throttle", nil, help)
	fs.Int32Var(&f.concurrency, "concurrency", 0, "most messages in flight per concurrency key (0 = no cap; 1 = one at a time, in order)")
	help = "cap of one concurrency key key=N, overriding --concurrency (0 = uncapped; repeatable)"
	if update {
		help += "; replaces all of the queue's per-key caps"
		fs.BoolVar(&f.clearConcKeys, "clear-concurrency-keys", false, "remove all per-key concurrency caps")
	}
	fs.StringArrayVar(&f.concurrencyKeys, "concurrency-key", nil, help)
	fs.DurationVar(&f.retryInitial, "retry-initial", 0, "backoff before the 2nd attempt after a nack without a delay or an expired lease (with --retry-max)")
	fs.DurationVar(&f.retryMax, "retry-max", 0, "longest backoff: attempt n+1 waits min(max, initial × multiplier^(n-1))")
	fs.Float64Var(&f.retryMultiplier, "retry-multiplier", 2, "backoff growth per attempt (>= 1; 1 = constant)")
	fs.Float64Var(&f.retryJitter, "retry-jitter", 0, "spread each backoff by ± this fraction of it (0-1)")
	if update {
		fs.BoolVar(&f.clearRetry, "clear-retry", false, "remove the retry policy (redeliver at once)")
	}
}

// buildRetry returns the policy the --retry-* flags give (set: any was
// given), or nil with set for --clear-retry.
func (f *configFlags) buildRetry(fs *pflag.FlagSet) (p *raftqv1.RetryPolicy, set bool, err error) {
	given := false
	for _, name := range retryFlags {
		given = given || fs.Changed(name)
	}
	if f.clearRetry {
		if given {
			return nil, false, fmt.Errorf("--clear-retry and --retry-* conflict")
		}
		return nil, true, nil
	}
	if !given {
		return nil, false, nil
	}
	if !fs.Changed("retry-initial") || !fs.Changed("retry-max") {
		return nil, false, fmt.Errorf("a retry policy needs --retry-initial and --retry-max (any --retry-* flag replaces the whole policy)")
	}
	initial, err := msOf("retry-initial", f.retryInitial)
	if err != nil {
		return nil, false, err
	}
	maxMs, err := msOf("retry-max", f.retryMax)
	if err != nil {
		return nil, false, err
	}
	return &raftqv1.RetryPolicy{InitialDelayMs: initial, MaxDelayMs: maxMs, Multiplier: f.retryMultiplier, Jitter: f.retryJitter}, true, nil
}

// build returns the config from the flags and the update mask: the
// QueueConfig field of every flag that was set, in a fixed order.
func (f *configFlags) build(fs *pflag.FlagSet) (*raftqv1.QueueConfig, []string, error) {
	cfg := &raftqv1.QueueConfig{}
	var mask []string
	durations := []struct {
		flag, path string
		v          time.Duration
		dst        *int64
	}{
		{"visibility-timeout", "visibility_timeout_ms", f.visibility, &cfg.VisibilityTimeoutMs},
		{"message-ttl", "message_ttl_ms", f.messageTTL, &cfg.MessageTtlMs},
		{"dedup-window", "dedup_window_ms", f.dedupWindow, &cfg.DedupWindowMs},
	}
	for _, d := range durations {
		if !fs.Changed(d.flag) {
			continue
		}
		v, err := msOf(d.flag, d.v)
		if err != nil {
			return nil, nil, err
		}
		*d.dst = v
		mask = append(mask, d.path)
	}
	others := []struct {
		flag, path string
		set        func()
	}{
		{"max-deliveries", "max_deliveries", func() { cfg.MaxDeliveries = f.maxDeliveries }},
		{"dead-letter-queue", "dead_letter_queue", func() { cfg.DeadLetterQueue = f.deadLetterQueue }},
		{"max-depth", "max_depth", func() { cfg.MaxDepth = f.maxDepth }},
		{"max-bytes", "max_bytes", func() { cfg.MaxBytes = f.maxBytes }},
		{"max-message-bytes", "max_message_bytes", func() { cfg.MaxMessageBytes = f.maxMessageBytes }},
		{"fairness-quantum", "fairness_quantum", func() { cfg.FairnessQuantum = f.fairnessQuantum }},
		{"concurrency", "concurrency_limit", func() { cfg.ConcurrencyLimit = f.concurrency }},
	}
	for _, o := range others {
		if fs.Changed(o.flag) {
			o.set()
			mask = append(mask, o.path)
		}
	}
	if fs.Changed("throttle") || f.clearThrottles {
		if f.clearThrottles && len(f.throttles) > 0 {
			return nil, nil, fmt.Errorf("--clear-throttles and --throttle conflict")
		}
		for _, spec := range f.throttles {
			key, rule, err := parseThrottle(spec)
			if err != nil {
				return nil, nil, err
			}
			if cfg.Throttles == nil {
				cfg.Throttles = map[string]*raftqv1.ThrottleRule{}
			}
			cfg.Throttles[key] = rule
		}
		mask = append(mask, "throttles")
	}
	if fs.Changed("concurrency-key") || f.clearConcKeys {
		if f.clearConcKeys && len(f.concurrencyKeys) > 0 {
			return nil, nil, fmt.Errorf("--clear-concurrency-keys and --concurrency-key conflict")
		}
		for _, spec := range f.concurrencyKeys {
			i := strings.LastIndexByte(spec, '=')
			n, err := strconv.ParseInt(spec[i+1:], 10, 32)
			if i <= 0 || err != nil || n < 0 {
				return nil, nil, fmt.Errorf("--concurrency-key %q: want key=N, N a non-negative integer", spec)
			}
			if cfg.ConcurrencyLimits == nil {
				cfg.ConcurrencyLimits = map[string]int32{}
			}
			cfg.ConcurrencyLimits[spec[:i]] = int32(n)
		}
		mask = append(mask, "concurrency_limits")
	}
	retry, set, err := f.buildRetry(fs)
	if err != nil {
		return nil, nil, err
	}
	if set {
		cfg.Retry = retry
		mask = append(mask, "retry")
	}
	return cfg, mask, nil
}

// parseThrottle reads key=rate[:burst]. The key may itself contain '=' or
// ':'; the rate part is after the last '='.
func parseThrottle(spec string) (string, *raftqv1.ThrottleRule, error) {
	i := strings.LastIndexByte(spec, '=')
	if i <= 0 {
		return "", nil, fmt.Errorf("--throttle %q: want key=rate[:burst]", spec)
	}
	key, val := spec[:i], spec[i+1:]
	rateStr, burstStr, hasBurst := strings.Cut(val, ":")
	rate, err := strconv.ParseFloat(rateStr, 64)
	if err != nil || rate <= 0 {
		return "", nil, fmt.Errorf("--throttle %q: rate must be a positive number per second", spec)
	}
	rule := &raftqv1.ThrottleRule{RatePerSec: rate}
	if hasBurst {
		burst, err := strconv.ParseInt(burstStr, 10, 32)
		if err != nil || burst < 0 {
			return "", nil, fmt.Errorf("--throttle %q: burst must be a non-negative integer", spec)
		}
		rule.Burst = int32(burst)
	}
	return key, rule, nil
}

func (a *app) printQueue(ctx context.Context, c *client.Client, q *raftqv1.QueueInfo) error {
	if a.json {
		return printJSON(a.out, q)
	}
	var origins []string
	if q.GetIsDeadLetterQueue() {
		// A queue names its DLQ, not the other way round: one listing
		// finds the queues that dead-letter into q. Without it (a
		// principal that may not list) the output says "another queue".
		if qs, err := c.ListQueues(ctx, ""); err == nil {
			origins = deadLetterOrigins(qs)[q.GetName()]
		}
	}
	return printQueue(a.out, q, origins)
}

func newQueueCreateCmd(a *app) *cobra.Command {
	var f configFlags
	var group string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue (and its dead-letter queue)",
		Args:  cobra.ExactArgs(1),
	}
	f.register(cmd.Flags(), false)
	cmd.Flags().StringVar(&group, "group", "", "the data group to place the queue on (default: the cluster chooses; a queue whose dead-letter queue exists goes to that queue's group)")
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		cfg, _, err := f.build(cmd.Flags())
		if err != nil {
			return err
		}
		q, err := c.CreateQueueIn(ctx, group, args[0], cfg)
		if err != nil {
			return err
		}
		return a.printQueue(ctx, c, q)
	})
	return cmd
}

func newQueueUpdateCmd(a *app) *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change the given settings of a queue; others keep their values",
		Args:  cobra.ExactArgs(1),
	}
	f.register(cmd.Flags(), true)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		cfg, mask, err := f.build(cmd.Flags())
		if err != nil {
			return err
		}
		// An empty mask would reset every setting to its default.
		if len(mask) == 0 {
			return fmt.Errorf("nothing to update: give at least one setting flag")
		}
		q, err := c.UpdateQueue(ctx, args[0], cfg, mask...)
		if err != nil {
			return err
		}
		return a.printQueue(ctx, c, q)
	})
	return cmd
}

// contents describes what a queue holds, for a confirmation question.
func contents(q *raftqv1.QueueInfo) string {
	st := q.GetStats()
	return fmt.Sprintf("%d ready, %d delayed, %d in flight, %d dead-lettered", st.GetReady(), st.GetDelayed(), st.GetInFlight(), st.GetDeadLettered())
}

func newQueueDeleteCmd(a *app) *cobra.Command {
	var force, ifEmpty, ifUnused bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a queue and its messages (and its own dead-letter queue)",
		Long: "Delete a queue, every message in it and its auto-created dead-letter queue.\n" +
			"On a terminal it asks first; otherwise it needs --force. --if-empty refuses\n" +
			"a queue that holds messages (checked as the delete commits), and needs no\n" +
			"confirmation since nothing can be lost; --if-unused refuses one with consumers.",
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete without asking")
	cmd.Flags().BoolVar(&ifEmpty, "if-empty", false, "refuse if the queue (or its dead-letter queue) holds messages from it")
	cmd.Flags().BoolVar(&ifUnused, "if-unused", false, "refuse if consumers are attached")
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		name := args[0]
		var conds []client.DeleteCondition
		if ifEmpty {
			conds = append(conds, client.IfEmpty)
		}
		if ifUnused {
			conds = append(conds, client.IfUnused)
		}
		if !ifEmpty && !force {
			q, err := c.GetQueue(ctx, name, false)
			if err != nil {
				return err
			}
			if err := a.confirm(force, "delete queue "+name,
				fmt.Sprintf("Delete queue %s and its messages (%s)?", name, contents(q))); err != nil {
				return err
			}
		}
		if err := c.DeleteQueue(ctx, name, conds...); err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, &raftqv1.DeleteQueueResponse{})
		}
		_, err := fmt.Fprintf(a.out, "deleted queue %s\n", args[0])
		return err
	})
	return cmd
}

func newQueueListCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List queues, optionally those whose names start with PREFIX",
		Args:  cobra.MaximumNArgs(1),
	}
	read := addStaleFlag(cmd)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		prefix := ""
		if len(args) == 1 {
			prefix = args[0]
		}
		qs, err := c.ListQueues(read(ctx), prefix)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, &raftqv1.ListQueuesResponse{Queues: qs})
		}
		return printQueueTable(a.out, qs)
	})
	return cmd
}

func newQueueGetCmd(a *app) *cobra.Command {
	var keys bool
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a queue's settings and stats",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&keys, "keys", false, "also show per-fairness-key and per-throttle-key stats")
	read := addStaleFlag(cmd)
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		q, err := c.GetQueue(read(ctx), args[0], keys)
		if err != nil {
			return err
		}
		return a.printQueue(ctx, c, q)
	})
	return cmd
}

func newQueuePurgeCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "purge NAME",
		Short: "Remove a queue's ready and delayed messages (leased ones stay)",
		Long: "Remove a queue's ready and delayed messages (leased ones stay). On a\n" +
			"terminal it asks first; otherwise it needs --force.",
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&force, "force", false, "purge without asking")
	cmd.RunE = a.unary(func(ctx context.Context, c *client.Client, args []string) error {
		if !force {
			q, err := c.GetQueue(ctx, args[0], false)
			if err != nil {
				return err
			}
			st := q.GetStats()
			if err := a.confirm(force, "purge queue "+args[0],
				fmt.Sprintf("Remove the messages of queue %s (%d ready, %d delayed)?", args[0], st.GetReady(), st.GetDelayed())); err != nil {
				return err
			}
		}
		n, err := c.PurgeQueue(ctx, args[0])
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.out, &raftqv1.PurgeQueueResponse{Purged: n})
		}
		_, err = fmt.Fprintf(a.out, "purged %s from %s\n", plural(n, "message"), args[0])
		return err
	})
	return cmd
}
