package host

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftq/raftq/tlsconfig"
)

// tlsWatchInterval is how often a node looks for changed certificate
// files (SIGHUP reloads at once).
const tlsWatchInterval = 5 * time.Second

// reloader reloads the TLS material on SIGHUP and when its files change,
// and the gossip keyring on SIGHUP. Failures are logged; what was loaded
// before stays in use.
type reloader struct {
	log *slog.Logger
	tls *tlsconfig.Source // nil: no TLS
	// sighup: reload on SIGHUP (the process's own node, Config.ReloadOnSIGHUP).
	sighup bool
	// gossip reloads the keyring, set once the node exists: a SIGHUP
	// during the start-up restore reloads TLS alone.
	gossip atomic.Pointer[func() error]
}

// setGossip sets the keyring reload, once the node exists.
func (r *reloader) setGossip(f func() error) { r.gossip.Store(&f) }

// start watches the TLS files and, with sighup, handles SIGHUP (from now
// on: the signal no longer ends the process) until ctx ends; the returned
// channel closes when it stopped.
func (r *reloader) start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var hup chan os.Signal // nil: never ready
	if r.sighup {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
	}
	go func() {
		defer close(done)
		if hup != nil {
			defer signal.Stop(hup)
		}
		var watchDone chan struct{}
		if r.tls != nil {
			watchDone = make(chan struct{})
			go func() { defer close(watchDone); r.tls.Watch(ctx, tlsWatchInterval) }()
		}
		for {
			select {
			case <-ctx.Done():
				if watchDone != nil {
					<-watchDone
				}
				return
			case <-hup:
				r.reload()
			}
		}
	}()
	return done
}

func (r *reloader) reload() {
	r.log.Info("SIGHUP: reloading TLS material and gossip keys")
	if r.tls != nil {
		_ = r.tls.Reload() // logs its own failure
	}
	if f := r.gossip.Load(); f != nil {
		if err := (*f)(); err != nil {
			r.log.Error("gossip keyring not reloaded; the previous keys stay in use", "err", err)
		}
	}
}
