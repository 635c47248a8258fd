package commentsfn_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/localauth"

	"cloud.google.com/go/spanner"

	applycountersfn "github.com/videngage/engagement/functions/applycounters"
	commentsfn "github.com/videngage/engagement/functions/comments"
	countsfn "github.com/videngage/engagement/functions/counts"
	"github.com/videngage/engagement/functions/host"
	moderationfn "github.com/videngage/engagement/functions/moderation"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/pagetoken"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) {
	// The handler's access and error logs would bury the test output.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	emulatortest.Main(m)
}

const audience = "comments-test"

// RSA keys are slow to make under -race: one issuer serves every test.
var issuer = sync.OnceValues(func() (*localauth.Issuer, error) { return localauth.New(audience) })

// loopback is the counter topic and its push subscription in one, into
// the real ApplyCounters consumer.
type loopback struct{ *pushtest.Loopback }

func newLoopback(t testing.TB, consume http.Handler) *loopback {
	return &loopback{&pushtest.Loopback{T: t, Consume: consume, Subscription: "counter-apply",
		Check: func(data []byte) error { _, err := events.Decode(data); return err }}}
}

// published returns the events published so far.
func (p *loopback) published() []events.Event {
	var out []events.Event
	for _, m := range p.Published() {
		if d, err := events.Decode(m.Data); err == nil {
			out = append(out, d.Events...)
		}
	}
	return out
}

// env is one test's deployment of the Comments function and the Counts
// function next to it: real stores on the emulators, real token
// verification, the loopback bus into the real consumer.
type env struct {
	t      *testing.T
	cfg    *config.Config
	db     *spannerdb.DB
	url    string
	issuer *localauth.Issuer
	store  *commentstore.Store
	outbox *outboxstore.Store
	reads  *countstore.Store
	folds  *foldstore.Store
	bus    *loopback
}

type envOpts struct {
	limit  int                 // comments per minute per user; 0: none
	policy counter.ShardPolicy // of the counters; zero: the default
	// moderation is each moderator's calls a minute; 0: none.
	moderation int
	// deleteLimit is the deletions per minute per user, counted in
	// Bigtable as deployed; 0: none.
	deleteLimit int
	// spam are the spam rules, and youngLimit young accounts' comments a
	// minute; zero: none.
	spam       comment.SpamRules
	youngLimit int
	// accountRecords gives the function the issuer's account records, read
	// as the local stack reads them (FIREBASE_AUTH_EMULATOR_HOST).
	accountRecords bool
	// accounts, if set, answers for the account records instead.
	accounts commentsfn.Accounts
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	is, err := issuer()
	if err != nil {
		t.Fatal(err)
	}
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	jwks := httptest.NewServer(is.JWKSHandler())
	t.Cleanup(jwks.Close)
	verifier, err := auth.NewVerifier(context.Background(), config.Auth{Audience: audience, JWKSURL: jwks.URL, TokenCache: config.Defaults().Auth.TokenCache})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cfg: cfg, db: db, issuer: is}
	e.store = commentstore.New(db, o.limit).GateModeration(moderationstore.NewGate(o.moderation)).RefuseSpam(o.spam, o.youngLimit)
	e.outbox, e.reads = outboxstore.New(db), countstore.New(db)
	e.folds = foldstore.New(db, foldstore.Options{Policy: o.policy, RollupInterval: time.Second})
	e.bus = newLoopback(t, applycountersfn.New(e.outbox, nil))
	writer := commentstore.NewWriter(e.store, e.bus, commentstore.WriterOptions{Batched: true, MaxInFlight: 1})
	d := commentsfn.Deps{
		Verifier: verifier,
		Writer:   writer,
		Store:    e.store,
		Counts:   e.reads,
		Tokens:   comment.NewPageTokens(cfg.HTTP.PageTokenSecret),
	}
	if o.accountRecords {
		mux := http.NewServeMux()
		mux.Handle("/identitytoolkit.googleapis.com/v1/projects/"+audience+"/accounts:lookup", is.AccountsHandler())
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		rc := *cfg
		rc.Auth.Audience, rc.Auth.EmulatorHost = audience, strings.TrimPrefix(srv.URL, "http://")
		records, err := auth.AccountRecordsOf(context.Background(), &rc)
		if err != nil {
			t.Fatal(err)
		}
		d.Accounts = auth.NewAccountCreation(records, 100)
	}
	if o.accounts != nil {
		d.Accounts = o.accounts
	}
	if o.deleteLimit > 0 {
		clients, err := host.New(context.Background(), cfg, host.NeedBigtable)
		if err != nil {
			t.Fatalf("host.New: %v", err)
		}
		t.Cleanup(func() { clients.Close() })
		d.DeleteLimiter = ratelimit.NewBigtable(clients.BigtableTx, "comment-delete", o.deleteLimit)
	}
	// As deployed: the standard middleware around each handler.
	mux := http.NewServeMux()
	std := func(name string) httpx.Middleware {
		return httpx.Standard(name, cfg.Project, cfg.HTTP.AllowedOrigins, cfg.HTTP.RequestTimeout)
	}
	counts := std("Counts")(countsfn.New(countsfn.Deps{Verifier: verifier, Store: e.reads}))
	mux.Handle("/v1/counts", counts)
	mux.Handle("/v1/me/counts", counts)
	mux.Handle("/", std("Comments")(commentsfn.New(d)))
	// Spam sweeps are the Moderation function's, on the same comment writer.
	mux.Handle("/v1/moderation/", std("Moderation")(moderationfn.New(moderationfn.Deps{Verifier: verifier,
		Store: moderationstore.New(db, moderationstore.NewGate(o.moderation)), Spam: writer, Tokens: pagetoken.NewSigner(cfg.HTTP.PageTokenSecret)})))
	srv := httptest.NewServer(mux)
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

func (e *env) moderator(uid string) string { return e.token(uid, localauth.Moderator()) }

// do sends a request to the function and checks its answer against the
// document (apitest.Request); token "" sends no Authorization header.
func (e *env) do(method, path, token string, body any, hdr ...string) apitest.Answer {
	e.t.Helper()
	return apitest.Request(e.t, method, e.url+path, token, body, hdr...)
}

// commentJSON is a comment as the API answers it.
type commentJSON struct {
	ID         string `json:"id"`
	VideoID    string `json:"videoId"`
	ParentID   string `json:"parentId"`
	AuthorID   string `json:"authorId"`
	Text       string `json:"text"`
	CreateTime string `json:"createTime"`
	ReplyCount int64  `json:"replyCount"`
}

type pageJSON struct {
	Comments      []commentJSON `json:"comments"`
	NextPageToken string        `json:"nextPageToken"`
}

// post posts a comment and returns it.
func (e *env) post(uid, video, parent, text string) commentJSON {
	e.t.Helper()
	body := map[string]any{"text": text}
	if parent != "" {
		body["parentId"] = parent
	}
	r := e.do("POST", "/v1/videos/"+video+"/comments", e.token(uid), body).Want(e.t, http.StatusCreated, "POST comment")
	var c commentJSON
	apitest.DecodeStrict(e.t, r.Body, &c)
	return c
}

// list reads one page of a listing path.
func (e *env) list(path string) pageJSON {
	e.t.Helper()
	var p pageJSON
	apitest.DecodeStrict(e.t, e.do("GET", path, "", nil).Want(e.t, http.StatusOK, "GET "+path).Body, &p)
	return p
}

// counts reads GET /v1/counts when token is "", else the token's view, GET
// /v1/me/counts; it fails on any negative count.
func (e *env) counts(token string, ids ...string) map[string]counter.Values {
	e.t.Helper()
	q := ""
	for i, id := range ids {
		if i > 0 {
			q += ","
		}
		q += id
	}
	var body struct {
		Counts map[string]counter.Values `json:"counts"`
		Viewer json.RawMessage           `json:"viewer"`
	}
	path := "/v1/counts"
	if token != "" {
		path = "/v1/me/counts"
	}
	r := e.do("GET", path+"?ids="+q, token, nil).Want(e.t, http.StatusOK, "GET "+path)
	if err := json.Unmarshal(r.Body, &body); err != nil {
		e.t.Fatal(err)
	}
	for id, v := range body.Counts {
		if v.Comments < 0 || v.Replies < 0 {
			e.t.Fatalf("negative count for %s: %+v", id, v)
		}
	}
	return body.Counts
}

// exact checks that what is counted plus what is pending equals the truth
// (visible comments and replies) for ids.
func (e *env) exact(ids ...string) {
	e.t.Helper()
	ctx := context.Background()
	counted, pending, err := e.reads.Totals(ctx, ids)
	if err != nil {
		e.t.Fatal(err)
	}
	var truth map[string]counter.Values
	err = e.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) (err error) {
		truth, err = commentstore.Source{}.Truth(ctx, tx, ids)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	fields := []counter.Field{counter.Comments, counter.Threads, counter.Replies}
	for _, id := range ids {
		if got := counted[id].Plus(pending[id]).Only(fields); got != truth[id] {
			e.t.Errorf("%s: counted %+v + pending %+v != truth %+v", id, counted[id].Only(fields), pending[id].Only(fields), truth[id])
		}
	}
}

// newJWKS serves the issuer's key set and returns its URL.
func newJWKS(t *testing.T, is *localauth.Issuer) string {
	t.Helper()
	srv := httptest.NewServer(is.JWKSHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// newServer serves h behind the standard middleware and returns its URL.
func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(httpx.Standard("Comments", "test", nil, 10*time.Second)(h))
	t.Cleanup(srv.Close)
	return srv.URL
}
