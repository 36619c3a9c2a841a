package transport

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/raftq/raftq/meta"
	raftqv1 "github.com/raftq/raftq/proto/raftq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// listFanOut bounds the groups asked for their queues at once.
const listFanOut = 16

// listQueues serves ListQueues across every data group: each group's
// part from its leader (this node's replica when it leads, else
// forwarded there with listGroupKey; with the stale header this node's
// replica, or a replica of a group it runs none of), merged by name and
// paged. A call that names one group (listGroupKey: a part asked for by
// the node that fans out) is served for that group alone.
func (s *Server) listQueues(ctx context.Context, req *raftqv1.ListQueuesRequest, handler grpc.UnaryHandler, stale bool) (any, error) {
	if len(req.GetPrefix()) > meta.MaxQueueLen {
		return handler(ctx, req) // its INVALID_ARGUMENT
	}
	if req.GetPageSize() < 0 {
		return nil, invalid("page_size is %d; it must not be negative (0 = every queue)", req.GetPageSize())
	}
	serve := func(ctx context.Context, t target, req *raftqv1.ListQueuesRequest) (any, error) {
		if stale {
			return s.serveStale(ctx, t, raftqv1.Broker_ListQueues_FullMethodName, req, handler)
		}
		return s.serveAt(ctx, t, raftqv1.Broker_ListQueues_FullMethodName, req, handler, true)
	}
	p := s.placements()
	if id := listGroup(ctx); id != "" {
		if p == nil {
			return serve(ctx, target{id: s.legacy.id, local: s.legacy, list: true}, req)
		}
		t, err := s.groupTarget(p, "", id, 0)
		if err != nil {
			return nil, err
		}
		t.list = true
		return serve(ctx, t, req)
	}
	targets := s.listTargets(p)
	if len(targets) == 1 {
		// One group (today's cluster): its leader answers the call as it
		// came, paging included.
		return serve(ctx, targets[0], req)
	}
	// Each group is asked for one more than a page: the merge then knows
	// whether anything is left after the page.
	part := proto.Clone(req).(*raftqv1.ListQueuesRequest)
	if part.PageSize > 0 {
		part.PageSize++
	}
	pages := make([][]*raftqv1.QueueInfo, len(targets))
	errs := make([]error, len(targets))
	slots := make(chan struct{}, listFanOut)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			t.list = true
			resp, err := serve(ctx, t, part)
			if err != nil {
				errs[i] = err
				return
			}
			pages[i] = resp.(*raftqv1.ListQueuesResponse).GetQueues()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	queues, next := mergePages(pages, int(req.GetPageSize()))
	return &raftqv1.ListQueuesResponse{Queues: queues, NextPageToken: next}, nil
}

// listTargets is every data group, by id: meta's record and the legacy
// group (which is all there is without meta).
func (s *Server) listTargets(p Placements) []target {
	out := []target{{id: s.legacy.id, local: s.legacy}}
	if p == nil {
		return out
	}
	groups, _ := p.Groups()
	for _, g := range groups {
		if g.ID != s.legacy.id {
			out = append(out, target{id: g.ID, local: s.localGroup(g.ID)})
		}
	}
	slices.SortFunc(out, func(a, b target) int { return strings.Compare(a.id, b.id) })
	return out
}

// mergePages merges each group's queues (each sorted by name, each at
// most size+1 long when size > 0) into one list sorted by name, a name
// met twice kept once (the first group's, by id), and cuts it to size;
// next is the page token of what follows, "" when nothing does.
func mergePages(pages [][]*raftqv1.QueueInfo, size int) (queues []*raftqv1.QueueInfo, next string) {
	for _, p := range pages {
		queues = append(queues, p...)
	}
	slices.SortStableFunc(queues, func(a, b *raftqv1.QueueInfo) int { return strings.Compare(a.GetName(), b.GetName()) })
	queues = slices.CompactFunc(queues, func(a, b *raftqv1.QueueInfo) bool { return a.GetName() == b.GetName() })
	if size > 0 && len(queues) > size {
		queues = queues[:size]
		next = queues[size-1].GetName()
	}
	return queues, next
}

// listGroup is the group a forwarded ListQueues asks about ("" = all).
func listGroup(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, listGroupKey); len(v) == 1 {
		return v[0]
	}
	return ""
}

// pageQueues is one group's part of a listing: the queues after token,
// at most size (0 = all); next is set when more follow.
func pageQueues(qs []*raftqv1.QueueInfo, token string, size int) (page []*raftqv1.QueueInfo, next string) {
	if token != "" {
		i, _ := slices.BinarySearchFunc(qs, token, func(q *raftqv1.QueueInfo, t string) int { return strings.Compare(q.GetName(), t) })
		for i < len(qs) && qs[i].GetName() <= token {
			i++
		}
		qs = qs[i:]
	}
	if size > 0 && len(qs) > size {
		return qs[:size], qs[size-1].GetName()
	}
	return qs, ""
}
