package server

import (
	"net/http"
)

// GET /readyz.

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if err := s.Ready(r.Context()); err != nil {
		problem(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
		return
	}
	st := s.state.Load()
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "store": s.opts.StoreName, "config": st.cfg.Source, "policies": len(st.order)})
}
