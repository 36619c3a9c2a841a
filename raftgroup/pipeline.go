package raftgroup

import (
	"sync"

	"github.com/hashicorp/raft"
)

// drainedTransport is hashicorp/raft's network transport with one change:
// the answers of a pipelined AppendEntries are always read off the
// connection, whether or not Raft still reads them.
//
// Why: the network pipeline hands each answer to Raft over an unbuffered
// channel (its buffers are MaxRPCsInFlight-2). When Raft's decoder stops
// on a newer term or a refused append, it no longer reads that channel,
// but the sender may still push one more request; the pipeline's reader
// then waits on Raft and the sender on the reader, for good. The follower
// gets no more entries and Raft.Shutdown never returns (seen as a
// 14-minute hang in the cluster tests, and reported by others running
// hashicorp/raft v1.7). Reading every answer into a queue here breaks the
// cycle and keeps pipelining; disabling pipelining was the alternative,
// rejected because every commit would then wait for the previous one's
// round trip. The queue holds answers only between Raft's decoder
// stopping and the pipeline's Close, so it stays as short as the
// requests sent in that window.
//
// Embedding the pointer keeps every optional interface Raft looks for
// (WithClose, WithPeers, WithPreVote, ...).
//
// Its RPCs reach Raft through votes (voteGuard), which refuses votes while
// the node has no Raft state.
type drainedTransport struct {
	*raft.NetworkTransport
	votes *voteGuard
}

// Consumer is the vote guard's channel, not the network transport's.
func (t drainedTransport) Consumer() <-chan raft.RPC { return t.votes.Consumer() }

// AppendEntriesPipeline wraps the network transport's pipeline.
func (t drainedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newDrainedPipeline(p), nil
}

// drainedPipeline reads its inner pipeline's answers as they come and
// hands them to Raft in order when Raft reads them.
type drainedPipeline struct {
	raft.AppendPipeline
	out       chan raft.AppendFuture
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

func newDrainedPipeline(p raft.AppendPipeline) *drainedPipeline {
	d := &drainedPipeline{
		AppendPipeline: p,
		out:            make(chan raft.AppendFuture),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
	}
	go d.drain(p.Consumer())
	return d
}

func (d *drainedPipeline) drain(in <-chan raft.AppendFuture) {
	defer close(d.done)
	var queue []raft.AppendFuture
	for {
		// A nil channel never sends: with nothing queued only reads run.
		var out chan raft.AppendFuture
		var next raft.AppendFuture
		if len(queue) > 0 {
			out, next = d.out, queue[0]
		}
		select {
		case f := <-in:
			queue = append(queue, f)
		case out <- next:
			queue[0] = nil
			queue = queue[1:]
		case <-d.stop:
			return
		}
	}
}

// Consumer returns the answers in the order the requests were sent.
func (d *drainedPipeline) Consumer() <-chan raft.AppendFuture { return d.out }

// Close stops the reader and closes the inner pipeline; it is safe to
// call more than once.
func (d *drainedPipeline) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.closeErr = d.AppendPipeline.Close()
		<-d.done
	})
	return d.closeErr
}
