package host

import (
	"net/http"
	"sync/atomic"
)

// startingHandler serves the operator port while the node starts: the
// process is alive (/healthz 200) but not ready (everything else 503),
// until ready installs the node's own handler.
type startingHandler struct {
	node atomic.Pointer[http.Handler]
}

func (h *startingHandler) ready(node http.Handler) { h.node.Store(&node) }

func (h *startingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if node := h.node.Load(); node != nil {
		(*node).ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/healthz" {
		_, _ = w.Write([]byte("starting\n"))
		return
	}
	http.Error(w, "starting: restoring state from the data dir", http.StatusServiceUnavailable)
}
