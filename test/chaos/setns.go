//go:build linux

package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
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

func setns(f *os.File) error {
	if sysSetns < 0 {
		return syscall.ENOSYS
	}
	if _, _, e := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		return e
	}
	return nil
}
