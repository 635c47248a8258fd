package auth

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/shared/config"
)

const testAudience = "test-project"

// Keys are slow to generate under -race: three issuers serve every test.
var testIssuers = sync.OnceValues(func() ([3]*localauth.Issuer, error) {
	var out [3]*localauth.Issuer
	for n := range out {
		i, err := localauth.New(testAudience)
		if err != nil {
			return out, err
		}
		out[n] = i
	}
	return out, nil
})

func issuers(t testing.TB) (a, b, c *localauth.Issuer) {
	t.Helper()
	is, err := testIssuers()
	if err != nil {
		t.Fatalf("localauth.New: %v", err)
	}
	return is[0], is[1], is[2]
}

// fakeClock is a settable time source shared by tokens and the verifier.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now().Truncate(time.Second)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// jwksServer serves the keys of some issuers, or fails while down.
type jwksServer struct {
	*httptest.Server
	hits atomic.Int64

	mu           sync.Mutex
	body         []byte
	cacheControl string
	down         bool
	delay        time.Duration
}

func newJWKSServer(t testing.TB, is ...*localauth.Issuer) *jwksServer {
	t.Helper()
	s := &jwksServer{cacheControl: "public, max-age=300"}
	s.serve(t, is...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		body, cc, down, delay := s.body, s.cacheControl, s.down, s.delay
		s.mu.Unlock()
		time.Sleep(delay)
		if down {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", cc)
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// serve replaces the published key set by the keys of is.
func (s *jwksServer) serve(t testing.TB, is ...*localauth.Issuer) {
	t.Helper()
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	for _, i := range is {
		var one struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal(i.JWKS(), &one); err != nil {
			t.Fatalf("issuer JWKS: %v", err)
		}
		set.Keys = append(set.Keys, one.Keys...)
	}
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	s.setBody(body)
}

func (s *jwksServer) setBody(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = body
}

func (s *jwksServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *jwksServer) setCacheControl(cc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cacheControl = cc
}

func (s *jwksServer) setDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

func testConfig(jwksURL string) config.Auth {
	c := config.Defaults().Auth
	c.Audience, c.JWKSURL = testAudience, jwksURL
	return c
}

func newTestVerifier(t testing.TB, url string, clock *fakeClock, opts ...Option) *Verifier {
	t.Helper()
	opts = append([]Option{
		WithClock(clock.now),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}, opts...)
	v, err := NewVerifier(context.Background(), testConfig(url), opts...)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func mint(t testing.TB, i *localauth.Issuer, uid string, opts ...localauth.MintOption) string {
	t.Helper()
	tok, err := i.Mint(uid, opts...)
	if err != nil {
		t.Fatalf("Mint(%q): %v", uid, err)
	}
	return tok
}
