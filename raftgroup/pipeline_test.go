package raftgroup

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fakePipeline keeps the network pipeline's channel shape: requests and
// answers pass over unbuffered channels (MaxRPCsInFlight 2), and one
// goroutine moves each request's answer to the consumer in order.
type fakePipeline struct {
	inprogress chan *fakeAppend
	answers    chan raft.AppendFuture
	shutdown   chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

type fakeAppend struct{ seq uint64 }

func (f *fakeAppend) Error() error     { return nil }
func (f *fakeAppend) Start() time.Time { return time.Time{} }
func (f *fakeAppend) Request() *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{PrevLogEntry: f.seq}
}
func (f *fakeAppend) Response() *raft.AppendEntriesResponse { return &raft.AppendEntriesResponse{} }

func newFakePipeline() *fakePipeline {
	p := &fakePipeline{inprogress: make(chan *fakeAppend), answers: make(chan raft.AppendFuture), shutdown: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case f := <-p.inprogress:
				select {
				case p.answers <- f:
				case <-p.shutdown:
					return
				}
			case <-p.shutdown:
				return
			}
		}
	}()
	return p
}

func (p *fakePipeline) AppendEntries(args *raft.AppendEntriesRequest, _ *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &fakeAppend{seq: args.PrevLogEntry}
	select {
	case p.inprogress <- f:
		return f, nil
	case <-p.shutdown:
		return nil, raft.ErrPipelineShutdown
	}
}

func (p *fakePipeline) Consumer() <-chan raft.AppendFuture { return p.answers }

func (p *fakePipeline) Close() error {
	p.once.Do(func() { close(p.shutdown) })
	p.wg.Wait()
	return nil
}

// Raft's decoder stops reading answers on a newer term while its sender
// may still send; the sends must not block for good (they did with the
// network pipeline, and Raft.Shutdown hung behind them).
func TestPipelineSendsWhileNobodyReadsAnswers(t *testing.T) {
	inner := newFakePipeline()
	p := newDrainedPipeline(inner)
	const sends = 100
	sent := make(chan error, 1)
	go func() {
		for i := range uint64(sends) {
			if _, err := p.AppendEntries(&raft.AppendEntriesRequest{PrevLogEntry: i}, &raft.AppendEntriesResponse{}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sends blocked while nobody read the answers")
	}
	// Raft reading again (a new decoder) gets every answer, in order.
	for i := range uint64(sends) {
		select {
		case f := <-p.Consumer():
			if got := f.Request().PrevLogEntry; got != i {
				t.Fatalf("answer %d is for request %d", i, got)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("answer %d never came", i)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	select {
	case <-p.done:
	default:
		t.Fatal("reader still running after Close")
	}
}

// Close must end the reader even while answers wait for a reader.
func TestPipelineCloseWithQueuedAnswers(t *testing.T) {
	p := newDrainedPipeline(newFakePipeline())
	for i := range uint64(5) {
		if _, err := p.AppendEntries(&raft.AppendEntriesRequest{PrevLogEntry: i}, &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}); err == nil {
		t.Fatal("send after Close succeeded")
	}
}
