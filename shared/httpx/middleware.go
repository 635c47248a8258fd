package httpx

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/telemetry"
)

// Middleware wraps a handler.
type Middleware func(http.Handler) http.Handler

// Chain applies the middlewares so that the first is the outermost.
func Chain(h http.Handler, mws ...Middleware) http.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Standard is the middleware every HTTP function gets: the trace span and
// request metric outermost (the route falls back to the function's name),
// then the security headers, panics and logs, CORS, the query check and the
// request deadline.
func Standard(function, project string, allowedOrigins []string, timeout time.Duration) Middleware {
	route := func(*http.Request) string { return function }
	return func(h http.Handler) http.Handler {
		return Chain(h, telemetry.Middleware(route), SecurityHeaders, Recover, Log(project), CORS(allowedOrigins), StrictQuery, Timeout(timeout))
	}
}

// SecurityHeaders sets the headers every answer carries: Strict-Transport-
// Security, so that a browser that once reached the API over HTTPS never
// sends a token over plain HTTP, and X-Content-Type-Options: nosniff, so
// that no answer is ever sniffed and run as HTML or script.
func SecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// StrictQuery refuses a request whose query string does not parse, or that
// sends a parameter more than once. URL.Query drops the pairs it cannot
// decode without a word, so "pageToken=%%" would otherwise read as no token
// at all and answer the first page; and every handler reads each parameter
// with Query().Get, its first value, so "ids=a&ids=b" would answer for a
// alone. No parameter of the API is taken twice (a list such as ids is one
// comma-separated value), so a repeat is refused here, for every route.
// Parameters a route does not take are ignored.
func StrictQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			WriteError(w, r, InvalidArgument(errs.InvalidQuery, "the query string is not valid: percent-encode its names and values"))
			return
		}
		if name, n := repeated(q); n > 1 {
			WriteError(w, r, InvalidField(errs.RepeatedParameter, name,
				"the query parameter %q is sent %d times; send it once (a list is one comma-separated value, such as ids=a,b)", name, n))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// repeated names a parameter of q sent more than once (the first by name,
// so that the answer does not depend on map order) and how many times.
func repeated(q url.Values) (string, int) {
	var name string
	for k, v := range q {
		if len(v) > 1 && (name == "" || k < name) {
			name = k
		}
	}
	return name, len(q[name])
}

// Recover answers 500 instead of dropping the connection when a handler panics.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				slog.ErrorContext(r.Context(), "panic", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				WriteError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// Timeout bounds the request context, so that a backend that hangs yields a
// 503 before the platform kills the request.
func Timeout(d time.Duration) Middleware {
	return func(next http.Handler) http.Handler {
		if d <= 0 {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

var (
	corsAllowHeaders  = "Authorization, If-Match, Idempotency-Key, Content-Type, Session-Token"
	corsExposeHeaders = "ETag, Retry-After, Session-Token"
	corsAllowMethods  = "GET, POST, PUT, DELETE, OPTIONS"
)

// CORS answers preflights and decorates answers for the allowed origins
// ("*" allows any origin). Tokens travel in the Authorization header, not in
// cookies, so credentials are not allowed.
func CORS(allowed []string) Middleware {
	any := slices.Contains(allowed, "*")
	// The answer depends on Origin, also when none is sent: a shared cache
	// (Cloud CDN) must not serve an answer without
	// Access-Control-Allow-Origin to a cross-origin caller.
	vary := !any && len(allowed) > 0
	return cors(any, vary, func(origin string) bool { return slices.Contains(allowed, origin) })
}

// CORSFor is CORS for the origins that allow accepts, each answered by name
// (the local stack's token issuer: loopback origins only).
func CORSFor(allow func(origin string) bool) Middleware {
	return cors(false, true, allow)
}

func cors(any, vary bool, allow func(string) bool) Middleware {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			origin := r.Header.Get("Origin")
			ok := origin != "" && (any || allow(origin))
			if vary {
				w.Header().Add("Vary", "Origin")
			}
			if ok {
				h := w.Header()
				if any {
					h.Set("Access-Control-Allow-Origin", "*")
				} else {
					h.Set("Access-Control-Allow-Origin", origin)
				}
				h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
			}
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				if !ok {
					WriteError(w, r, PermissionDenied(errs.OriginNotAllowed, "origin %q is not allowed", origin))
					return
				}
				h := w.Header()
				h.Set("Access-Control-Allow-Methods", corsAllowMethods)
				h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
				h.Set("Access-Control-Max-Age", "3600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// Log writes one access log line per request. Its trace fields, and those
// of every line the request logs, come from the span telemetry.Middleware
// (outside it) put in the context.
func Log(project string) Middleware {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ctx := r.Context()
			if p := r.Pattern; p != "" {
				telemetry.SetRoute(ctx, p)
			}
			rec := &telemetry.StatusRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r.WithContext(ctx))
			level := slog.LevelInfo
			if rec.Status >= 500 {
				level = slog.LevelError
			}
			// Cloud Logging's HttpRequest fields, as a group of typed
			// attributes: no map or reflection per request.
			slog.LogAttrs(ctx, level, "request", slog.Group("httpRequest",
				slog.String("requestMethod", r.Method),
				slog.String("requestUrl", r.URL.Path),
				slog.Int("status", rec.Status),
				slog.String("latency", strconv.FormatFloat(time.Since(start).Seconds(), 'f', 6, 64)+"s"),
				slog.String("userAgent", r.UserAgent()),
			))
		})
	}
}

// ParsePageSize reads pageSize: def when absent, else 1..max.
func ParsePageSize(q string, def, max int) (int, error) {
	if q == "" {
		return def, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || strconv.Itoa(n) != q || n < 1 || n > max {
		return 0, InvalidField(errs.InvalidValue, "pageSize", "pageSize must be a whole number from 1 to %d", max)
	}
	return n, nil
}
