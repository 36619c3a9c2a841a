package systems

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftq/raftq/test/bench/workload"
)

// StartPerf samples pid's CPU with `perf record` (linux-perf; a Go binary
// keeps its symbols, so no pprof endpoint is needed) into file until the
// returned function is called; that function returns the flat profile's
// top entries.
func StartPerf(ctx context.Context, log *slog.Logger, pid int, file string) func() workload.Profile {
	prof := workload.Profile{Tool: "perf record -e cpu-clock -F 999 -g", File: file}
	perf, err := exec.LookPath("perf")
	if err != nil {
		prof.Error = "perf not found (apt-get install linux-perf)"
		return func() workload.Profile { return prof }
	}
	p, err := startProcess("perf", file+".log", nil, perf, "record", "-e", "cpu-clock", "-F", "999", "-g",
		"-p", strconv.Itoa(pid), "-o", file)
	if err != nil {
		prof.Error = err.Error()
		return func() workload.Profile { return prof }
	}
	return func() workload.Profile {
		// SIGINT: perf writes its file and exits.
		_ = p.Signal(syscall.SIGINT, 30*time.Second)
		top, err := perfTop(ctx, perf, file, 15, false, "")
		if err != nil {
			prof.Error = fmt.Sprintf("%v; perf said: %s", err, p.LogTail(2000))
			log.Warn("perf report", "err", prof.Error)
		}
		prof.Top = top
		// Cumulative time of raftq's own functions says which part of the
		// broker the flat runtime/kernel entries are spent for.
		prof.TopRaftq, _ = perfTop(ctx, perf, file, 15, true, "raftq/raftq/")
		return prof
	}
}

// perfLine matches "  12.50%  raftq  [.] symbol" (with --children, two
// percentages); perf may append "-" columns (IPC) after the symbol.
var (
	perfLine     = regexp.MustCompile(`^\s*([0-9.]+)%\s+(?:[0-9.]+%\s+)?\S+\s+\[[.k]\]\s+(.+?)\s*$`)
	perfTrailing = regexp.MustCompile(`(\s+-)+$`)
)

// perfTop reads the flat (self time) profile of file, or with children
// the cumulative one, keeping symbols that contain filter.
func perfTop(ctx context.Context, perf, file string, n int, children bool, filter string) ([]workload.ProfileEntry, error) {
	mode := "--no-children"
	if children {
		mode = "--children"
	}
	cmd := exec.CommandContext(ctx, perf, "report", "-i", file, "--stdio", mode, "-g", "none",
		"--sort", "dso,symbol", "--percent-limit", "0.3")
	cmd.Dir = filepath.Dir(file)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("perf report: %w", err)
	}
	return parsePerfReport(out, n, filter), nil
}

func parsePerfReport(out []byte, n int, filter string) []workload.ProfileEntry {
	var top []workload.ProfileEntry
	for _, line := range strings.Split(string(out), "\n") {
		m := perfLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pct, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		sym := perfTrailing.ReplaceAllString(m[2], "")
		if filter != "" && !strings.Contains(sym, filter) {
			continue
		}
		top = append(top, workload.ProfileEntry{Percent: pct, Symbol: sym})
		if len(top) == n {
			break
		}
	}
	return top
}
