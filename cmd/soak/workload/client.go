// Package workload is the mixed load that the soak (cmd/soak) and the fault
// drills (cmd/drills) drive through the public API — users who react, watch,
// comment, delete and sweep spam, each retrying a write until the API accepts
// it as a client does — and the model of everything accepted, which the
// counters, listings and histories must end up showing.
package workload

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/videngage/engagement/shared/apiclient"
)

// Client calls the API at Base.
type Client struct {
	Base string
	HTTP *http.Client
}

// NewClient returns a client of the API at base whose requests give up after
// 30 s, far past any request deadline, so that a hang shows as one.
func NewClient(base string) *Client {
	return &Client{Base: base, HTTP: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

// typed is the client generated from docs/openapi.yaml (shared/apiclient)
// of the API at Base, over the same HTTP client, with tok as the bearer
// (none when "").
func (c *Client) typed(tok string) *apiclient.ClientWithResponses {
	api, err := apiclient.New(c.Base, c.HTTP, func() string { return tok })
	if err != nil {
		// Base is the stack's URL: a URL that does not parse is a bug.
		panic(fmt.Sprintf("workload: the API's base %q: %v", c.Base, err))
	}
	return api
}

func ptr[T any](v T) *T { return &v }

// deref is *p, or the zero value when p is nil.
func deref[T any](p *T) T {
	var zero T
	if p != nil {
		zero = *p
	}
	return zero
}

// Sample is one answer.
type Sample struct {
	At         time.Time // when the request was sent
	Op         string    // e.g. "PUT /v1/reactions"
	Code       int       // 0: no answer (transport error)
	Latency    time.Duration
	RetryAfter string
	Err        string
}

// Recorder keeps answers.
type Recorder struct {
	mu      sync.Mutex
	samples []Sample
}

func (r *Recorder) add(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

// Samples returns a copy of every answer so far.
func (r *Recorder) Samples() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples)
}

// Do sends one request (headers as name, value pairs) and records its
// answer in rec, when rec is not nil, as op.
func (c *Client) Do(rec *Recorder, op, method, path, token, body string, hdr ...string) (int, http.Header, []byte) {
	s := Sample{At: time.Now(), Op: op}
	code, h, b, err := c.Send(method, path, token, body, hdr...)
	s.Latency, s.Code = time.Since(s.At), code
	if err != nil {
		s.Err = err.Error()
	} else {
		s.RetryAfter = h.Get("Retry-After")
	}
	if rec != nil {
		rec.add(s)
	}
	return code, h, b
}

// Send sends one request to Base+path, with token as its bearer (none when
// "") and body as JSON (none when ""), and returns the answer's status,
// headers and body.
func (c *Client) Send(method, path, token, body string, hdr ...string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(method, c.Base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

// Violations lists the answers that break the spec's promises under
// failure: no answer, a 5xx other than 503, a 503 without Retry-After, or
// an answer later than the request deadline plus slack.
func Violations(samples []Sample, deadline, slack time.Duration) []string {
	var bad []string
	for _, s := range samples {
		at := s.At.Format("15:04:05.000")
		switch {
		case s.Code == 0:
			bad = append(bad, fmt.Sprintf("%s at %s: no answer after %v: %s", s.Op, at, s.Latency.Round(time.Millisecond), s.Err))
		case s.Code >= 500 && s.Code != http.StatusServiceUnavailable:
			bad = append(bad, fmt.Sprintf("%s at %s: %d", s.Op, at, s.Code))
		case s.Code == http.StatusServiceUnavailable && s.RetryAfter == "":
			bad = append(bad, fmt.Sprintf("%s at %s: 503 without Retry-After", s.Op, at))
		}
		if s.Code != 0 && s.Latency > deadline+slack {
			bad = append(bad, fmt.Sprintf("%s at %s: answered %d after %v, past the %v deadline", s.Op, at, s.Code, s.Latency.Round(time.Millisecond), deadline))
		}
	}
	return bad
}

// Summary counts answers by operation and status, with latencies.
func Summary(samples []Sample) string {
	by := map[string]map[int]int{}
	lat := map[string][]time.Duration{}
	for _, s := range samples {
		if by[s.Op] == nil {
			by[s.Op] = map[int]int{}
		}
		by[s.Op][s.Code]++
		lat[s.Op] = append(lat[s.Op], s.Latency)
	}
	var parts []string
	for _, op := range slices.Sorted(maps.Keys(by)) {
		var codes []string
		for _, c := range slices.Sorted(maps.Keys(by[op])) {
			codes = append(codes, fmt.Sprintf("%d×%d", c, by[op][c]))
		}
		l := lat[op]
		slices.Sort(l)
		parts = append(parts, fmt.Sprintf("%s %s (p50 %v p99 %v max %v)", op, strings.Join(codes, " "),
			Percentile(l, 50), Percentile(l, 99), l[len(l)-1].Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}

// Percentile is the p-th percentile of sorted durations (nearest rank).
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i-1, len(sorted)-1))].Round(time.Millisecond)
}

// Between returns the samples of op sent in [from, to).
func Between(samples []Sample, op string, from, to time.Time) []Sample {
	var out []Sample
	for _, s := range samples {
		if s.Op == op && !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// CountCode counts the samples answered code.
func CountCode(samples []Sample, code int) int {
	n := 0
	for _, s := range samples {
		if s.Code == code {
			n++
		}
	}
	return n
}
