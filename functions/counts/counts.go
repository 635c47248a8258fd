// Package countsfn is the Counts function.
//
// GET /v1/counts?ids=a,b,… (1–50) is public: the same answer for every
// caller, whatever Authorization header it sends, so that Cloud CDN and the
// instances may cache it. Cloud CDN stores a response only if it has
// Cache-Control: public and a max-age, no Set-Cookie, no no-store, no-cache
// or private directive, and no Vary header other than Accept,
// Accept-Encoding or Origin (https://cloud.google.com/cdn/docs/caching,
// "Cacheable content" and "Non-cacheable content"): an answer that varied on
// Authorization would never be cached, and one that did not while carrying
// a caller's own data would be served to others. Hence the split:
//
// GET /v1/me/counts?ids=… (token required) is the caller's view: the public
// counts plus the caller's own changes not yet counted (read-your-own-writes,
// each exactly once) and the caller's reactions; private, never stored.
package countsfn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/session"
	"github.com/videngage/engagement/shared/spannerdb"
)

func init() {
	host.RegisterHTTP("Counts", host.NeedSpanner|host.NeedVerifier,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			d, err := Build(c)
			if err != nil {
				return nil, err
			}
			return New(d), nil
		})
}

// Build makes the handler's Deps from an instance's clients and config.
func Build(c *host.Clients) (Deps, error) {
	cfg := c.Config
	return Deps{
		Verifier:     c.Verifier,
		Store:        countstore.New(spannerdb.Wrap(c.Spanner, cfg)),
		MaxAge:       cfg.HTTP.CountsMaxAge,
		MaxStaleness: cfg.Counters.CountsMaxStaleness,
		CacheTTL:     cfg.HTTP.CountsCacheTTL,
		CacheEntries: cfg.HTTP.CountsCacheEntries,
		OwnInFlight:  cfg.HTTP.CountsOwnInFlight,
	}, nil
}

// Interfaces of what the handler uses.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Store interface {
		Public(ctx context.Context, ids []string, maxStaleness time.Duration) (countstore.Snapshot, error)
		OwnMany(ctx context.Context, qs []countstore.OwnQuery) ([]countstore.Own, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier Verifier
	Store    Store
	// MaxAge is the max-age a public answer grants shared caches (Cloud
	// CDN): COUNTS_MAX_AGE, as the spec sets it. An answer
	// is at most CacheTTL + MaxAge (+ MaxStaleness) old when a cache
	// serves it.
	MaxAge time.Duration
	// MaxStaleness bounds how old Spanner's public reads may be.
	MaxStaleness time.Duration
	// CacheTTL is how long an instance holds public counts (0: not at all).
	CacheTTL time.Duration
	// CacheEntries bounds the ids an instance holds (not positive:
	// COUNTS_CACHE_ENTRIES's default).
	CacheEntries int
	// OwnInFlight is how many reads of signed-in callers' own rows run at
	// once; the requests that arrive meanwhile are read together in the
	// next one, those with a session token apart from those without (0:
	// each request reads alone).
	OwnInFlight int
}

// maxOwnBatch bounds the signed-in requests read together (50 ids each).
const maxOwnBatch = 64

// MaxIDs is the most ids one request names.
const MaxIDs = 50

type handler struct {
	Deps
	cache        *publicCache
	own          *batch.Batcher[countstore.OwnQuery, countstore.Own]
	cacheControl string
}

// New builds the Counts handler.
func New(d Deps) http.Handler {
	if d.CacheEntries <= 0 {
		d.CacheEntries = config.Defaults().HTTP.CountsCacheEntries
	}
	h := &handler{Deps: d, cache: &publicCache{
		load: d.Store.Public, maxStaleness: d.MaxStaleness, ttl: d.CacheTTL, max: d.CacheEntries, now: time.Now,
	}}
	if d.OwnInFlight > 0 {
		h.own = batch.NewBatcherBy(batch.BatcherOptions{MaxItems: maxOwnBatch, MaxInFlight: d.OwnInFlight, Timeout: fetchTimeout}, strong, d.Store.OwnMany)
	}
	h.cacheControl = fmt.Sprintf("public, max-age=%d", int(d.MaxAge/time.Second))
	rt := httpx.NewRouter()
	rt.Handle("GET /v1/counts", h.public)
	rt.Handle("GET /v1/me/counts", h.mine)
	return rt
}

// ReactionBody is one of the viewer's reactions.
type ReactionBody struct {
	Reaction string `json:"reaction"`
	Version  int64  `json:"version"`
}

// ViewerBody is the viewer part of the answer.
type ViewerBody struct {
	Reactions map[string]ReactionBody `json:"reactions"`
}

// Body is the answer.
type Body struct {
	Counts map[string]counter.Values `json:"counts"`
	Viewer *ViewerBody               `json:"viewer,omitempty"`
}

// public answers GET /v1/counts. It never looks at Authorization.
func (h *handler) public(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query().Get("ids")
	ids, err := httpx.ParseIDs(q, MaxIDs)
	if err != nil {
		return err
	}
	if canonical := canonicalIDs(ids); canonical != q {
		redirectToCanonical(w, r, canonical)
		return nil
	}
	vals, err := h.cache.get(r.Context(), ids)
	if err != nil {
		return err
	}
	body := Body{Counts: make(map[string]counter.Values, len(ids))}
	for _, id := range ids {
		body.Counts[id] = vals[id].Clamped()
	}
	return h.write(w, r, h.cacheControl, body)
}

// mine answers GET /v1/me/counts: the held public counts where the
// caller's view is the same, the rest and the caller's own rows read
// (countstore.Store.Own) strongly, or with a session token at its
// timestamp or later (readTime); the ids it did not hold it holds from then
// on.
func (h *handler) mine(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	ids, err := httpx.ParseIDs(r.URL.Query().Get("ids"), MaxIDs)
	if err != nil {
		return err
	}
	token, err := sessionToken(r)
	if err != nil {
		return err
	}
	held, since, missing := h.cache.peek(ids)
	cached := make([]string, 0, len(held))
	for id := range held {
		cached = append(cached, id)
	}
	q := countstore.OwnQuery{Viewer: user.ID, IDs: ids, Cached: cached, Since: since}
	if !token.IsZero() {
		q.At = h.readTime(token, since)
	}
	own, err := h.readOwn(r.Context(), q)
	if err != nil {
		return err
	}
	// The ids not held were read whole at ReadTime: public values as good
	// as a public read's, so the instance holds them for the next reader.
	h.cache.hold(missing, countstore.Snapshot{Values: own.Fresh, ReadTime: own.ReadTime})
	body := Body{Counts: own.Merge(ids, held), Viewer: &ViewerBody{Reactions: make(map[string]ReactionBody, len(ids))}}
	for _, id := range ids {
		vr, ok := own.Reactions[id]
		if !ok {
			vr = countstore.ViewerReaction{Reaction: "none"}
		}
		body.Viewer.Reactions[id] = ReactionBody{Reaction: vr.Reaction, Version: vr.Version}
	}
	return h.write(w, r, "private, no-store", body)
}

// canonicalIDs is the one spelling of a set of ids that the public counts
// answer: sorted, each once. Cloud CDN keys its cache by the ids query
// parameter as sent, so every other order of the same ids would be another
// cache entry, read from the origin again.
func canonicalIDs(ids []string) string {
	return strings.Join(slices.Sorted(slices.Values(ids)), ",")
}

// canonicalMaxAge is how long a cache may keep a redirect to the canonical
// spelling: it depends on the query alone and never changes.
const canonicalMaxAge = 24 * time.Hour

// redirectToCanonical answers 301 to the same path with ids spelled as
// canonical, so that the counts of a set of ids are one cache entry
// whatever order a client names them in. Cloud CDN caches a 301 (not a
// 308) with Cache-Control: public and a Content-Length, so the redirect
// itself is served from the edge.
func redirectToCanonical(w http.ResponseWriter, r *http.Request, canonical string) {
	u := url.URL{Path: r.URL.Path, RawQuery: "ids=" + canonical}
	h := w.Header()
	h.Set("Location", u.RequestURI())
	h.Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(canonicalMaxAge/time.Second)))
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusMovedPermanently)
}

// maxTokenLead is how far past the instance's clock a session token may
// be: the clock skew between the instance and Spanner's commit timestamps
// (on the emulator, its clock's lead); one further ahead is refused. A
// token ahead at all is read alone (readOwn).
const maxTokenLead = time.Second

// sessionToken is the commit timestamp of the request's Session-Token
// (zero when it sends none).
func sessionToken(r *http.Request) (time.Time, error) {
	if n := len(r.Header.Values(session.Header)); n > 1 {
		return time.Time{}, httpx.InvalidField(errs.RepeatedParameter, session.Header, "send one %s, the latest write's, not %d", session.Header, n)
	}
	v := r.Header.Get(session.Header)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := session.Parse(v)
	if err != nil {
		return time.Time{}, httpx.InvalidField(errs.InvalidSession, session.Header, "%s is not a token this service issued: send the %s of a write's answer, or none", session.Header, session.Header)
	}
	if time.Until(t) > maxTokenLead {
		return time.Time{}, httpx.InvalidField(errs.InvalidSession, session.Header, "%s is from the future: send the %s of a write's answer, or none", session.Header, session.Header)
	}
	return t, nil
}

// readTime is the timestamp a signed-in read with a session token reads
// at: the newest of the token's, that of the public values the instance
// holds (since), and the oldest a public read may be (MaxStaleness ago),
// so that an old token reads no staler than an anonymous caller does and
// never older than Spanner keeps versions.
func (h *handler) readTime(token, since time.Time) time.Time {
	t := time.Now().Add(-h.MaxStaleness)
	for _, c := range []time.Time{token, since} {
		if c.After(t) {
			t = c
		}
	}
	return t
}

// readOwn reads the caller's part of a signed-in read: together with the
// other signed-in requests of its kind (strong) waiting for a read when
// batched, else alone. A read at a timestamp ahead of the instance's clock
// is always alone: it waits until then, and a batch reads at the newest
// timestamp its requests name, so batched it would make every other
// request in the batch wait with it.
func (h *handler) readOwn(ctx context.Context, q countstore.OwnQuery) (countstore.Own, error) {
	if h.own != nil && !q.At.After(time.Now()) {
		return h.own.Do(ctx, q)
	}
	out, err := h.Store.OwnMany(ctx, []countstore.OwnQuery{q})
	if err != nil {
		return countstore.Own{}, err
	}
	return out[0], nil
}

// strong reports whether q is read strongly: it names no timestamp (no
// session token). Strong and timestamped queries are batched apart: a batch
// of timestamped ones reads at the newest timestamp they name, which holds
// each caller's writes, with no round trip to the leader; a batch with a
// strong one reads strongly, and would make the others wait for it. A
// strong read starts after its request arrived, so it sees every write
// acknowledged before it.
func strong(q countstore.OwnQuery) bool { return q.At.IsZero() }

// write answers body with a strong ETag over its bytes, or 304 when the
// caller's If-None-Match already names it.
func (h *handler) write(w http.ResponseWriter, r *http.Request, cacheControl string, body Body) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("counts: encode: %w", err)
	}
	b = append(b, '\n')
	sum := sha256.Sum256(b)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	hdr := w.Header()
	hdr.Set("Cache-Control", cacheControl)
	hdr.Set("ETag", etag)
	if matches(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return nil
}

// matches reports whether an If-None-Match header names etag: "*", or
// etag in the list, compared weakly as RFC 9110 §13.1.2 requires.
func matches(headers []string, etag string) bool {
	for _, h := range headers {
		for _, t := range strings.Split(h, ",") {
			t = strings.TrimSpace(t)
			if t == "*" || strings.TrimPrefix(t, "W/") == etag {
				return true
			}
		}
	}
	return false
}
