package main

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/raftq/raftq/fsm"
)

// msOf converts a duration flag to the milliseconds the API carries. The
// broker keeps durations in whole milliseconds, where 0 means "the
// default": a positive duration under 1ms would silently become the
// default (--visibility-timeout 1ns meaning 30s), so it is refused, and
// so is a fraction of a millisecond, which would be dropped without a word
// (--delay 1.5ms meaning 1ms).
func msOf(flag string, d time.Duration) (int64, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("--%s must not be negative (got %s)", flag, d)
	case d > 0 && d < time.Millisecond:
		return 0, fmt.Errorf("--%s %s is less than 1ms, the broker's resolution; give 1ms or more, or 0 for the default", flag, d)
	case d%time.Millisecond != 0:
		return 0, fmt.Errorf("--%s %s has a fraction of a millisecond, the broker's resolution; give %s or %s", flag, d, d.Truncate(time.Millisecond), d.Truncate(time.Millisecond)+time.Millisecond)
	case d.Milliseconds() > fsm.MaxDurationMs:
		return 0, fmt.Errorf("--%s %s is more than %s, the longest the broker accepts", flag, fsm.HumanMs(d.Milliseconds()), fsm.HumanMs(fsm.MaxDurationMs))
	}
	return d.Milliseconds(), nil
}

// grpcTooLarge matches gRPC's refusal of an oversized message.
var grpcTooLarge = regexp.MustCompile(`(?:received|sent|trying to send) message larger than max \((\d+) vs\. (\d+)\)`)

// plainTooLarge rewrites gRPC's "received message larger than max (N vs.
// M)" in the units a person reads; ok is false for any other message.
func plainTooLarge(msg string) (string, bool) {
	m := grpcTooLarge.FindStringSubmatch(msg)
	if m == nil {
		return "", false
	}
	got, _ := strconv.ParseInt(m[1], 10, 64)
	limit, _ := strconv.ParseInt(m[2], 10, 64)
	return fmt.Sprintf("the request is %s, more than the %s a node accepts in one call; the largest payload a queue takes is %s (its max_message_bytes, 1 MiB by default)",
		fsm.HumanBytes(got), fsm.HumanBytes(limit), fsm.HumanBytes(fsm.MaxMessageBytesCap)), true
}
