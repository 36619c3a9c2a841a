// Package hclogslog adapts hclog, the logger hashicorp/raft and
// memberlist (through its StandardLogger) log to, to log/slog, so they log
// where the rest of the node does.
package hclogslog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// slogLevelTrace is the slog level hclog's Trace maps to.
const slogLevelTrace = slog.LevelDebug - 4

// hclogAdapter is an hclog.Logger that writes through a *slog.Logger, so
// hashicorp/raft (and, via StandardLogger, memberlist) log where the rest of
// the node does.
type hclogAdapter struct {
	base    *slog.Logger // without implied args
	l       *slog.Logger // with implied args and name
	name    string
	implied []any
	// level is an extra floor (hclog.Level) settable with SetLevel; shared
	// by loggers derived with With/Named, as in hclog.
	level *atomic.Int32
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// New returns an hclog.Logger writing to l.
func New(l *slog.Logger, name string) hclog.Logger {
	lv := new(atomic.Int32)
	lv.Store(int32(hclog.Trace))
	return newHCAdapter(l, name, nil, lv)
}

func newHCAdapter(base *slog.Logger, name string, implied []any, level *atomic.Int32) *hclogAdapter {
	l := base
	if name != "" {
		l = l.With(slog.String("logger", name))
	}
	if len(implied) > 0 {
		l = l.With(formatArgs(implied)...)
	}
	return &hclogAdapter{base: base, l: l, name: name, implied: implied, level: level}
}

// toSlogLevel maps an hclog level; ok is false for levels that never log.
func toSlogLevel(level hclog.Level) (slog.Level, bool) {
	switch level {
	case hclog.Trace:
		return slogLevelTrace, true
	case hclog.Debug:
		return slog.LevelDebug, true
	case hclog.Info, hclog.NoLevel:
		return slog.LevelInfo, true
	case hclog.Warn:
		return slog.LevelWarn, true
	case hclog.Error:
		return slog.LevelError, true
	default: // hclog.Off
		return 0, false
	}
}

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	if level == hclog.Off || (level != hclog.NoLevel && level < hclog.Level(a.level.Load())) {
		return false
	}
	sl, ok := toSlogLevel(level)
	return ok && a.l.Enabled(context.Background(), sl)
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if !a.enabled(level) {
		return
	}
	sl, _ := toSlogLevel(level)
	if sl >= slog.LevelError && closedConnection(args) {
		// hashicorp/raft's transport logs a connection that this node
		// closed (its own stop, a peer's connection pool shrinking) as
		// "failed to decode incoming command" at ERROR: every clean stop
		// printed one. It is routine, so it is logged at DEBUG.
		if !a.l.Enabled(context.Background(), slog.LevelDebug) {
			return
		}
		sl = slog.LevelDebug
	}
	a.l.Log(context.Background(), sl, msg, formatArgs(args)...)
}

// closedConnection reports whether an hclog call's error argument says the
// connection was closed on this side (net.ErrClosed).
func closedConnection(args []any) bool {
	for _, v := range args {
		if err, ok := v.(error); ok && errors.Is(err, net.ErrClosed) {
			return true
		}
	}
	return false
}

// formatArgs renders the values hclog formats lazily: hashicorp/raft logs
// hclog.Fmt("%+v", servers), which slog would print as the format and its
// arguments ("[%+v [...]]").
func formatArgs(args []any) []any {
	var out []any
	for i, v := range args {
		f, ok := v.(hclog.Format)
		if !ok || len(f) == 0 {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		if format, ok := f[0].(string); ok {
			out[i] = fmt.Sprintf(format, f[1:]...)
		} else {
			out[i] = fmt.Sprint(f...)
		}
	}
	if out == nil {
		return args
	}
	return out
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return append([]any(nil), a.implied...) }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	implied := append(append([]any(nil), a.implied...), args...)
	return newHCAdapter(a.base, a.name, implied, a.level)
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return newHCAdapter(a.base, name, a.implied, a.level)
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return newHCAdapter(a.base, name, a.implied, a.level)
}

func (a *hclogAdapter) SetLevel(level hclog.Level) { a.level.Store(int32(level)) }

func (a *hclogAdapter) GetLevel() hclog.Level {
	if lv := hclog.Level(a.level.Load()); lv > hclog.Trace {
		return lv
	}
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := &stdLogWriter{a: a, force: hclog.NoLevel}
	if opts != nil {
		w.infer = opts.InferLevels || opts.InferLevelsWithTimestamp
		w.force = opts.ForceLevel
	}
	return w
}

// stdLogWriter turns lines of a standard *log.Logger into structured records.
// With infer set it reads the level from a "[DEBUG]"-style prefix, as
// memberlist writes them.
type stdLogWriter struct {
	a     *hclogAdapter
	infer bool
	force hclog.Level
}

func (w *stdLogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\r\n"), []byte{'\n'}) {
		msg := strings.TrimSpace(string(line))
		if msg == "" {
			continue
		}
		level := hclog.Info
		if w.force != hclog.NoLevel {
			level = w.force
		} else if w.infer {
			level, msg = inferLevel(msg)
		}
		w.a.Log(level, msg)
	}
	return len(p), nil
}

// inferLevel strips a leading "[LEVEL]" tag (possibly after a timestamp).
func inferLevel(msg string) (hclog.Level, string) {
	tags := []struct {
		tag   string
		level hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[WARNING]", hclog.Warn}, {"[ERR]", hclog.Error},
		{"[ERROR]", hclog.Error},
	}
	for _, t := range tags {
		if i := strings.Index(msg, t.tag); i >= 0 && i < 32 {
			return t.level, strings.TrimSpace(msg[i+len(t.tag):])
		}
	}
	return hclog.Info, msg
}
