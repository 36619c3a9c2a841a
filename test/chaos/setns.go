//go:build linux

package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNamespace runs fn on an OS thread switched into the named network
// namespace, so that the sockets fn creates (listeners, dials) belong to
// that namespace and keep belonging to it afterwards. The thread switches
// back before it is released; if it cannot, it stays locked and dies with
// its goroutine instead of carrying the namespace to other goroutines.
func inNamespace(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(filepath.Join("/var/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := setns(self); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", ns, err))
			return // the thread stays locked and exits with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// setns moves the calling OS thread into the network namespace f names.
// x/sys/unix knows the syscall number on every Linux architecture, so
// latency faults work wherever the chaos tests run.
func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}
