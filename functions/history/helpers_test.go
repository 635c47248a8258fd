package historyfn_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	applyhistoryfn "github.com/videngage/engagement/functions/applyhistory"
	historyfn "github.com/videngage/engagement/functions/history"
	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/ratelimit"
)

func TestMain(m *testing.M) {
	// The handler's access and error logs would bury the test output.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	emulatortest.Main(m)
}

const audience = "history-test"

// RSA keys are slow to make under -race: two issuers serve every test, the
// second one to sign tokens with a key the verifier does not know.
var issuers = sync.OnceValues(func() ([2]*localauth.Issuer, error) {
	var out [2]*localauth.Issuer
	for i := range out {
		is, err := localauth.New(audience)
		if err != nil {
			return out, err
		}
		out[i] = is
	}
	return out, nil
})

// loopback is the history topic and its push subscription in one, into
// the real ApplyHistory consumer.
type loopback struct{ *pushtest.Loopback }

func newLoopback(t testing.TB, consume http.Handler) *loopback {
	return &loopback{&pushtest.Loopback{T: t, Consume: consume, Subscription: "history-apply",
		Check: func(data []byte) error { _, err := history.DecodeBatch(data); return err }}}
}

// watches returns the watches published so far.
func (p *loopback) watches() []history.Watch {
	var out []history.Watch
	for _, m := range p.Published() {
		b, err := history.DecodeBatch(m.Data)
		if err == nil {
			out = append(out, b.Watches...)
		}
	}
	return out
}

// pushBody is the body of a Pub/Sub push of a message.
func pushBody(_ testing.TB, messageID string, data []byte, attrs map[string]string) []byte {
	return bus.PushBody(bus.Message{ID: messageID, Data: data, Attributes: attrs}, "history-apply")
}

// env is one test's deployment of the History function: real stores on the
// emulators, real token verification, the loopback bus.
type env struct {
	t       *testing.T
	cfg     *config.Config
	clients *host.Clients
	url     string
	issuer  *localauth.Issuer
	other   *localauth.Issuer // a key the verifier does not trust
	store   *historystore.Store
	bus     *loopback
}

type option func(*env, *historyfn.Deps)

// withLimit puts the Bigtable rate limiter in front of history writes.
func withLimit(perMinute int) option {
	return func(e *env, d *historyfn.Deps) {
		d.Limiter = ratelimit.NewBigtable(e.clients.Bigtable, "history", perMinute)
	}
}

// withOtherLimit limits the deletions and the settings changes, each to
// perMinute, as deployed (RATE_LIMIT_OTHER_WRITES).
func withOtherLimit(perMinute int) option {
	return func(e *env, d *historyfn.Deps) {
		d.Deletes = ratelimit.NewBigtable(e.clients.Bigtable, "history-delete", perMinute)
		d.SettingsLimiter = ratelimit.NewBigtable(e.clients.Bigtable, "history-settings", perMinute)
	}
}

// withRetention sets the table's retention the reads apply.
func withRetention(d time.Duration) option {
	return func(_ *env, deps *historyfn.Deps) { deps.Retention = d }
}

// withNow fixes the handler's clock.
func withNow(now time.Time) option {
	return func(_ *env, d *historyfn.Deps) { d.Now = func() time.Time { return now } }
}

// withRequestTimeout sets the request deadline of the standard middleware.
func withRequestTimeout(d time.Duration) option {
	return func(e *env, _ *historyfn.Deps) { e.cfg.HTTP.RequestTimeout = d }
}

// withPublisher replaces the loopback bus.
func withPublisher(p func(*env) historyfn.Publisher) option {
	return func(e *env, d *historyfn.Deps) { d.Publisher = p(e) }
}

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	is, err := issuers()
	if err != nil {
		t.Fatal(err)
	}
	cfg := emulatortest.New(t)
	clients, err := host.New(context.Background(), cfg, host.NeedBigtable|host.NeedFirestore|host.NeedPubSub)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	t.Cleanup(func() { clients.Close() })

	jwks := httptest.NewServer(is[0].JWKSHandler())
	t.Cleanup(jwks.Close)
	verifier, err := auth.NewVerifier(context.Background(), config.Auth{Audience: audience, JWKSURL: jwks.URL, TokenCache: config.Defaults().Auth.TokenCache})
	if err != nil {
		t.Fatal(err)
	}

	// A deadline far above the 10 s default: a loaded test machine must not
	// turn slow emulators into 503s (TestPublisherDown sets a short one).
	cfg.HTTP.RequestTimeout = time.Minute
	e := &env{t: t, cfg: cfg, clients: clients, issuer: is[0], other: is[1]}
	e.store = historystore.New(clients.Bigtable)
	e.bus = newLoopback(t, applyhistoryfn.New(e.store, nil))
	d := historyfn.Deps{
		Verifier:  verifier,
		Store:     e.store,
		Settings:  historystore.NewSettings(clients.Firestore),
		Publisher: e.bus,
		Tokens:    history.NewPageTokens(cfg.HTTP.PageTokenSecret),
		Retention: time.Duration(cfg.History.MaxAgeDays) * 24 * time.Hour, // as deployed
	}
	for _, o := range opts {
		o(e, &d)
	}
	// As deployed: the standard middleware around the handler.
	srv := httptest.NewServer(httpx.Standard("History", cfg.Project, cfg.HTTP.AllowedOrigins, cfg.HTTP.RequestTimeout)(historyfn.New(d)))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// token is a valid ID token of uid.
func (e *env) token(uid string, opts ...localauth.MintOption) string {
	e.t.Helper()
	tok, err := e.issuer.Mint(uid, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// do sends a request to the function and checks its answer against the
// document (apitest.Request); token "" sends no Authorization header.
func (e *env) do(method, path, token string, body any) apitest.Answer {
	e.t.Helper()
	return apitest.Request(e.t, method, e.url+path, token, body)
}

// listJSON is the body of GET /v1/history.
type listJSON struct {
	Entries []struct {
		VideoID         string  `json:"videoId"`
		WatchedAt       string  `json:"watchedAt"`
		PositionSeconds float64 `json:"positionSeconds"`
	} `json:"entries"`
	NextPageToken string `json:"nextPageToken"`
}

// listAll follows nextPageToken through every page, returning the video ids
// and times ("id@time") in order.
func (e *env) listAll(uid string, pageSize int) []string {
	e.t.Helper()
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			e.t.Fatal("paging never ends")
		}
		path := fmt.Sprintf("/v1/history?pageSize=%d", pageSize)
		if token != "" {
			path += "&pageToken=" + token
		}
		r := e.do("GET", path, e.token(uid), nil).Want(e.t, http.StatusOK, "GET "+path)
		var l listJSON
		apitest.DecodeStrict(e.t, r.Body, &l)
		if len(l.Entries) > pageSize {
			e.t.Fatalf("page of %d entries for pageSize %d", len(l.Entries), pageSize)
		}
		for _, en := range l.Entries {
			got = append(got, en.VideoID+"@"+en.WatchedAt)
		}
		if l.NextPageToken == "" {
			return got
		}
		token = l.NextPageToken
	}
}
