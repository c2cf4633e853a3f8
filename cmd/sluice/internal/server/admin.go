package server

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/cmd/sluice/internal/store"
	"github.com/sluicehq/sluice/valkeystore"
)

// The admin routes: peek at and reset a key, behind a bearer token.

// admin guards h with the admin bearer token. Without a configured token
// the routes are off (404).
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := s.state.Load()
		if st.adminHash == nil {
			problem(w, http.StatusNotFound, "admin routes are off: configure admin.token_env or admin.token_file")
			return
		}
		auth := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(auth, " ")
		if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			problem(w, http.StatusUnauthorized, "an admin bearer token is required (Authorization: Bearer <token>)")
			return
		}
		if !st.authorized(strings.TrimSpace(token)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice", error="invalid_token"`)
			if ok, held := s.wrongToken.allow(); ok {
				s.log.Warn("admin request with a wrong token (logged at most every 10s)", "method", r.Method, "path", r.URL.Path,
					"remote", r.RemoteAddr, "not_logged_since_last", held)
			}
			problem(w, http.StatusUnauthorized, "the admin token is wrong")
			return
		}
		h(w, r)
	}
}

func (s *Server) keyRoute(r *http.Request) (*policy, string, error) {
	st := s.state.Load()
	p, err := st.policy(r.PathValue("policy"), "")
	if err != nil {
		return nil, "", err
	}
	key := r.PathValue("key")
	if key == "" || len(key) > MaxKeyLen {
		return nil, "", bad(http.StatusBadRequest, "key must be 1 to %d bytes", MaxKeyLen)
	}
	return p, key, nil
}

func (s *Server) handlePeek(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.keyRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if p.cfg.Grants {
		s.fail(w, r, bad(http.StatusBadRequest, "policy %q has grants: this instance knows only its own grant of the key, and a peek here would take one; sluice inspect %s KEY reads the key's grants and their holders from Valkey", p.cfg.Name, p.cfg.Name))
		return
	}
	// ?plan=NAME peeks under the key's plan: the answer is then the rule
	// in force for a request naming that plan.
	plan := r.URL.Query().Get("plan")
	if err := p.checkPlan(plan, "", 0); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := p.limiter.AllowPlan(r.Context(), key, plan, 0)
	if err != nil {
		s.fail(w, r, s.decisionError(err, p))
		return
	}
	writeJSON(w, http.StatusOK, toResult(p, key, plan, 0, res))
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	p, key, err := s.keyRoute(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := p.limiter.ResetNotify(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("key reset", "policy", p.cfg.Name, "key", key, "remote", r.RemoteAddr, "notified", n)
	// What the reset guarantees: the state is gone, and every process
	// whose deny cache may hold the key (each subscribed to the prefix's
	// notices, notified of them counts those reached now) stops refusing
	// it from the cache within notice_bound_ms.
	out := map[string]any{"policy": p.cfg.Name, "key": key, "reset": true, "notified": n,
		"notice_bound_ms": valkeystore.NoticeBound.Milliseconds()}
	if _, ok := s.opts.Store.(*store.Valkey); !ok {
		out["notice_bound_ms"] = 0 // in-process store: told before the answer
	}
	writeJSON(w, http.StatusOK, out)
}
