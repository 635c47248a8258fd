package httpx

import (
	"net/http"
	"strings"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/telemetry"
)

// HandlerFunc is a handler that returns its error; Router writes it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Router is a ServeMux whose "no such route" and "wrong method" answers are
// the spec's error bodies (with Allow on 405).
type Router struct {
	mux *http.ServeMux
}

// NewRouter returns an empty router.
func NewRouter() *Router { return &Router{mux: http.NewServeMux()} }

// Handle registers h for a ServeMux pattern such as "PUT /v1/reactions/{id}".
func (rt *Router) Handle(pattern string, h HandlerFunc) {
	rt.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		telemetry.SetRoute(r.Context(), pattern)
		if err := h(w, r); err != nil {
			WriteError(w, r, err)
		}
	})
}

func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveMux(rt.mux, w, r)
}

// ServeMux serves mux with its "no such route" and "wrong method" answers
// in the spec's error body, as Router does: for a server whose mux holds
// plain handlers (the local stack's).
func ServeMux(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveMux(mux, w, r) })
}

func serveMux(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	h, pattern := mux.Handler(r)
	if pattern != "" {
		// ServeHTTP, not h: it sets the request's path values.
		mux.ServeHTTP(w, r)
		return
	}
	// Let the mux decide between 404 and 405 (it computes Allow), then
	// answer in our format.
	telemetry.SetRoute(r.Context(), telemetry.RouteUnmatched)
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if probe.status == http.StatusMethodNotAllowed {
		WriteError(w, r, MethodNotAllowed(strings.Split(probe.header.Get("Allow"), ", ")...))
		return
	}
	WriteError(w, r, NotFound(errs.UnknownPath, "no such resource: %s", r.URL.Path))
}

type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int)        { p.status = code }
