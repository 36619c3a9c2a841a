package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/raftq/raftq/transport/tlsconfig"
)

// tlsWatchInterval is how often a node looks for changed certificate
// files (SIGHUP reloads at once).
const tlsWatchInterval = 5 * time.Second

// checkBinds is the secure-by-default rule: a node without TLS binds only
// loopback addresses unless --insecure says otherwise, so `raftq serve`
// with no flags is a dev node and a node on the network is never open by
// accident. TLS flags come all three or none.
func checkBinds(o *serveOptions) error {
	if o.tls.Enabled() {
		if o.tls.Cert == "" || o.tls.Key == "" || o.tls.CA == "" {
			return errors.New("TLS needs all of --tls-cert, --tls-key and --tls-ca")
		}
		return nil
	}
	if o.insecure {
		return nil
	}
	for _, b := range []struct{ flag, addr string }{
		{"--grpc-addr", o.grpcAddr}, {"--raft-addr", o.raftAddr}, {"--gossip-addr", o.gossipAddr}, {"--http-addr", o.httpAddr},
	} {
		if b.addr == "" {
			continue
		}
		if !loopbackBind(b.addr) {
			return fmt.Errorf("refusing to bind %s %s without TLS: anyone who reaches the port would own the cluster. "+
				"Give --tls-cert, --tls-key and --tls-ca (see `raftq cert` and docs/security.md), "+
				"bind a loopback address, or pass --insecure to run without TLS anyway", b.flag, b.addr)
		}
	}
	return nil
}

// loopbackBind reports whether addr binds only loopback: a loopback IP,
// or a name that resolves to loopback addresses alone. An empty host or
// 0.0.0.0 binds every interface.
func loopbackBind(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// startReloader reloads the TLS material on SIGHUP and when its files
// change, until ctx ends; the returned channel closes when it has
// stopped. Reload failures are logged by tlsconfig (the old material
// stays in use).
func startReloader(ctx context.Context, log *slog.Logger, src *tlsconfig.Source) <-chan struct{} {
	done := make(chan struct{})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		var watchDone chan struct{}
		if src != nil {
			watchDone = make(chan struct{})
			go func() { defer close(watchDone); src.Watch(ctx, tlsWatchInterval) }()
		}
		for {
			select {
			case <-ctx.Done():
				if watchDone != nil {
					<-watchDone
				}
				return
			case <-hup:
				log.Info("SIGHUP: reloading TLS material")
				if src != nil {
					_ = src.Reload()
				}
			}
		}
	}()
	return done
}
