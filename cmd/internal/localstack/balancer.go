package localstack

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
)

// Balancer is the local stack's load balancer in front of its regions: it
// passes each request to a live region, as the global load balancer does
// in prod. A region is live while its /healthz answers 200 (checked every
// HealthEvery) and until a connection to it fails. A request that never
// reached a region (its connection failed) goes to the next one; one that
// may have reached a region is never sent again, except a GET or HEAD: it
// is answered 503 with Retry-After for the client to retry, as a write may
// have been done.
type Balancer struct {
	backends []*backend
	next     atomic.Uint64
}

// HealthEvery is how often the balancer checks each region's /healthz.
const HealthEvery = 500 * time.Millisecond

type backend struct {
	name  string
	base  *url.URL
	proxy *httputil.ReverseProxy
	live  atomic.Bool
}

// Backend is a region behind the balancer: its name and the address it
// serves on.
type Backend struct {
	Name, Addr string
}

// proxyFailure is the error of an attempt, and whether the request may
// have reached the region.
type proxyFailure struct {
	err       error
	connected bool
}

type failureKey struct{}

// NewBalancer returns the balancer of the regions bs, each taken as live
// until a check says otherwise. Watch keeps their state.
func NewBalancer(bs []Backend) *Balancer {
	b := &Balancer{}
	for _, r := range bs {
		be := &backend{name: r.Name, base: &url.URL{Scheme: "http", Host: r.Addr}}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.MaxIdleConnsPerHost = 256
		be.proxy = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(be.base)
				pr.Out.Host = pr.In.Host
				pr.SetXForwarded()
			},
			Transport: transport,
			// Nothing is written on a failure: ServeHTTP decides whether
			// another region may take the request.
			ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
				if f, ok := r.Context().Value(failureKey{}).(*proxyFailure); ok {
					f.err = err
				}
			},
		}
		be.live.Store(true)
		b.backends = append(b.backends, be)
	}
	return b
}

// Watch checks every region's /healthz every HealthEvery until ctx ends.
func (b *Balancer) Watch(ctx context.Context) {
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(HealthEvery)
	defer tick.Stop()
	for {
		for _, be := range b.backends {
			go b.check(ctx, client, be)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (b *Balancer) check(ctx context.Context, client *http.Client, be *backend) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, be.base.String()+"/healthz", nil)
	if err != nil {
		return
	}
	resp, err := client.Do(req)
	live := err == nil && resp.StatusCode == http.StatusOK
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if ctx.Err() != nil {
		return
	}
	b.mark(be, live, err)
}

func (b *Balancer) mark(be *backend, live bool, why error) {
	if was := be.live.Swap(live); was != live {
		if live {
			slog.Info("balancer: region live", "region", be.name)
		} else {
			args := []any{"region", be.name}
			if why != nil {
				args = append(args, "error", why.Error())
			}
			slog.Warn("balancer: region not live", args...)
		}
	}
}

// Live returns the names of the regions taken as live now.
func (b *Balancer) Live() []string {
	var out []string
	for _, be := range b.backends {
		if be.live.Load() {
			out = append(out, be.name)
		}
	}
	return out
}

// order returns the regions to try: the live ones from the next in turn,
// then the others, in case a check is behind.
func (b *Balancer) order() []*backend {
	n := len(b.backends)
	start := int(b.next.Add(1) % uint64(n))
	var live, rest []*backend
	for i := range n {
		be := b.backends[(start+i)%n]
		if be.live.Load() {
			live = append(live, be)
		} else {
			rest = append(rest, be)
		}
	}
	return append(live, rest...)
}

func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The body is read by one attempt at most: an attempt that never
	// connected read none of it, and a failed one that did is not retried
	// (but for GET and HEAD, whose bodies are not read).
	body := r.Body
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead
	var last error
	for _, be := range b.order() {
		f := &proxyFailure{}
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { f.connected = true }}
		ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), failureKey{}, f), trace)
		attempt := r.WithContext(ctx)
		if body != nil && body != http.NoBody {
			attempt.Body = io.NopCloser(body)
		}
		be.proxy.ServeHTTP(w, attempt)
		if f.err == nil {
			return
		}
		last = f.err
		if r.Context().Err() != nil {
			return // the caller is gone
		}
		if !f.connected {
			// Never reached: the region is not taking connections.
			b.mark(be, false, f.err)
			continue
		}
		if safe {
			continue
		}
		slog.Warn("balancer: a request that may have reached a region failed; not sent again", "region", be.name, "method", r.Method, "path", r.URL.Path, "error", f.err.Error())
		httpx.WriteError(w, r, httpx.Unavailable(errs.BackendUnavailable, time.Second, "the region serving the request did not answer; retry"))
		return
	}
	if last == nil {
		last = errors.New("no region")
	}
	slog.Warn("balancer: no region answers", "error", last.Error())
	httpx.WriteError(w, r, httpx.Unavailable(errs.BackendUnavailable, time.Second, "no region answers"))
}
