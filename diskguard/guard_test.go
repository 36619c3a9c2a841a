package diskguard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	errStatfs := errors.New("statfs failed")
	for _, tc := range []struct {
		name             string
		free, minFree    uint64
		reserve          uint64
		statfsErr        error
		wantLow, refused bool
	}{
		{name: "room", free: 100 << 20, minFree: 10 << 20},
		{name: "exactly the limit", free: 10 << 20, minFree: 10 << 20},
		{name: "one byte short", free: 10<<20 - 1, minFree: 10 << 20, wantLow: true, refused: true},
		{name: "reserve for the snapshot counts", free: 15 << 20, minFree: 10 << 20, reserve: 6 << 20, wantLow: true, refused: true},
		{name: "reserve met", free: 16 << 20, minFree: 10 << 20, reserve: 6 << 20},
		{name: "default margin", free: DefaultMinFree - 1, wantLow: true, refused: true},
		{name: "unmeasurable refuses nothing", statfsErr: errStatfs},
		{name: "unsupported platform refuses nothing", statfsErr: ErrUnmeasured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(Config{
				Node: "n7", Dir: "/data/raftq", MinFree: tc.minFree,
				Reserve: func() uint64 { return tc.reserve },
				Free: func(dir string) (uint64, error) {
					if dir != "/data/raftq" {
						t.Errorf("measured %q", dir)
					}
					return tc.free, tc.statfsErr
				},
			})
			err := g.Check()
			if got := err != nil; got != tc.refused {
				t.Fatalf("Check() = %v, want refused %t", err, tc.refused)
			}
			if err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Errorf("%v does not wrap ErrNoSpace", err)
				}
				for _, want := range []string{"node n7", "/data/raftq", "--min-free-disk-bytes"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%q does not name %q", err, want)
					}
				}
			}
			r, ok := g.Last()
			if ok != (tc.statfsErr == nil) || r.Low != tc.wantLow {
				t.Fatalf("Last() = %+v, %t", r, ok)
			}
		})
	}
}

// TestRunReportsChanges: the loop reports the first low reading and each
// change after it, and nothing while the state holds.
func TestRunReportsChanges(t *testing.T) {
	var mu sync.Mutex
	frees := []uint64{50, 50, 5, 5, 5, 50, 50, 5} // then 5 forever
	g := New(Config{Dir: "d", MinFree: 10, Free: func(string) (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		f := frees[0]
		if len(frees) > 1 {
			frees = frees[1:]
		}
		return f, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan bool, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Run(ctx, time.Millisecond, func(r Reading) { changes <- r.Low })
	}()
	for i, want := range []bool{true, false, true} {
		select {
		case got := <-changes:
			if got != want {
				t.Fatalf("change %d: low %t, want %t", i, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("change %d never reported", i)
		}
	}
	cancel()
	<-done
	if len(changes) != 0 {
		t.Fatalf("%d more changes reported while the disk stayed low", len(changes))
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5<<30 + 512<<20: "5.5 GiB"} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q, want %q", n, got, want)
		}
	}
}
