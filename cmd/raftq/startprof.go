package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"time"
)

// startupProfileFor bounds how long a startup profile waits for the node
// to lead with its log applied (a follower never does).
const startupProfileFor = 5 * time.Minute

// startupProfile records a CPU profile (PREFIX.cpu.pprof) and an execution
// trace (PREFIX.trace) of a node's start (the hidden --startup-profile):
// the restore of a large state happens before the operator port serves
// anything but /healthz, so /debug/pprof cannot see it. It runs from the
// start of serve until stop; the files are complete once stop returns.
type startupProfile struct {
	cpu, tr *os.File
}

func startStartupProfile(prefix string) (*startupProfile, error) {
	p := &startupProfile{}
	var err error
	if p.cpu, err = os.Create(prefix + ".cpu.pprof"); err != nil {
		return nil, fmt.Errorf("--startup-profile: %w", err)
	}
	if p.tr, err = os.Create(prefix + ".trace"); err != nil {
		_ = p.cpu.Close()
		return nil, fmt.Errorf("--startup-profile: %w", err)
	}
	if err = pprof.StartCPUProfile(p.cpu); err != nil {
		_ = p.cpu.Close()
		_ = p.tr.Close()
		return nil, fmt.Errorf("--startup-profile: %w", err)
	}
	if err = trace.Start(p.tr); err != nil {
		pprof.StopCPUProfile()
		_ = p.cpu.Close()
		_ = p.tr.Close()
		return nil, fmt.Errorf("--startup-profile: %w", err)
	}
	return p, nil
}

// stopWhen stops the profile once ready says so, ctx ends or
// startupProfileFor has passed, polling every 10 ms.
func (p *startupProfile) stopWhen(ctx context.Context, log *slog.Logger, ready func() bool) {
	ctx, cancel := context.WithTimeout(ctx, startupProfileFor)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-ctx.Done():
			p.stop(log)
			return
		case <-tick.C:
		}
	}
	p.stop(log)
}

func (p *startupProfile) stop(log *slog.Logger) {
	trace.Stop()
	pprof.StopCPUProfile()
	if err := errors.Join(p.tr.Close(), p.cpu.Close()); err != nil {
		log.Warn("startup profile", "err", err)
		return
	}
	log.Info("startup profile written", "cpu", p.cpu.Name(), "trace", p.tr.Name())
}
