package account_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/localauth"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// world is one isolated set of the stores an erasure works through.
type world struct {
	records   *accountstore.Store
	reactions *reactionstore.Store
	comments  *commentstore.Store
	history   *historystore.Store
	settings  *historystore.Settings
	outbox    *outboxstore.Store
	counts    *countstore.Store
	bt        *bigtable.Client
	exports   *accountstore.Exports
	pub       *pushtest.Events
	// idp is the identity provider: the local issuer's account records.
	idp *identity
}

func newWorld(t *testing.T) *world {
	t.Helper()
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	bt := emulatortest.Bigtable(t, cfg)
	fs := emulatortest.Firestore(t, cfg)
	return &world{
		records:   accountstore.New(db),
		reactions: reactionstore.New(db),
		comments:  commentstore.New(db, 0),
		history:   historystore.New(bt),
		settings:  historystore.NewSettings(fs),
		exports:   accountstore.NewExports(fs, 3),
		outbox:    outboxstore.New(db),
		counts:    countstore.New(db),
		bt:        bt,
		pub:       &pushtest.Events{},
		idp:       newIdentity(t),
	}
}

// identity is the identity provider of the local stack (the local issuer's
// accounts:lookup and accounts:delete), read through auth.AccountRecordsOf
// as FIREBASE_AUTH_EMULATOR_HOST points it; while down is set it answers
// accounts:delete with 503.
type identity struct {
	issuer  *localauth.Issuer
	records *auth.AccountRecords
	down    atomic.Bool
}

func newIdentity(t *testing.T) *identity {
	t.Helper()
	const project = "erasure-test"
	id := &identity{}
	var err error
	if id.issuer, err = localauth.New(project); err != nil {
		t.Fatal(err)
	}
	accounts := "/identitytoolkit.googleapis.com/v1/projects/" + project + "/accounts"
	mux := http.NewServeMux()
	mux.Handle(accounts+":lookup", id.issuer.AccountsHandler())
	del := id.issuer.AccountDeleteHandler()
	mux.Handle(accounts+":delete", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id.down.Load() {
			http.Error(w, `{"error":{"code":503,"message":"UNAVAILABLE"}}`, http.StatusServiceUnavailable)
			return
		}
		del.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cfg := config.Defaults()
	cfg.Auth.Audience = project
	cfg.Auth.EmulatorHost = strings.TrimPrefix(srv.URL, "http://")
	if id.records, err = auth.AccountRecordsOf(context.Background(), &cfg); err != nil || id.records == nil {
		t.Fatalf("AccountRecordsOf: %v %v", id.records, err)
	}
	return id
}

// signUp makes user's account at the provider.
func (id *identity) signUp(t *testing.T, user string) {
	t.Helper()
	if _, err := id.issuer.Mint(user, localauth.AccountCreated(time.Now().Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
}

// exists reports whether the provider still has user's account.
func (id *identity) exists(t *testing.T, user string) bool {
	t.Helper()
	got, err := id.records.Created(context.Background(), []string{user})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := got[user]
	return ok
}

// eraser is the Eraser as EraseAccount builds it, on w's stores.
func (w *world) eraser(settle, budget time.Duration) *account.Eraser {
	return &account.Eraser{
		Records:   w.records,
		Reactions: w.reactions,
		Comments:  w.comments,
		History:   w.history,
		Settings:  w.settings,
		RateLimits: func(ctx context.Context, userID string) error {
			return ratelimit.EraseUser(ctx, w.bt, userID)
		},
		Exports:  w.exports.EraseUser,
		Identity: w.idp.records.Delete,
		Counters: w.pub,
		Settle:   settle,
		Budget:   budget,
	}
}

// request asks for user's erasure as DELETE /v1/me does.
func (w *world) request(t *testing.T, user string) {
	t.Helper()
	ctx := context.Background()
	if _, err := w.records.Request(ctx, user); err != nil {
		t.Fatal(err)
	}
	if err := w.settings.MarkErasing(ctx, user); err != nil {
		t.Fatal(err)
	}
}

// deliver applies the published counter events as the consumer would,
// twice: a redelivered message must count nothing again.
func (w *world) deliver(t *testing.T) {
	t.Helper()
	for _, m := range w.pub.Take() {
		for range 2 {
			if _, err := w.outbox.Apply(context.Background(), m); err != nil {
				t.Fatalf("apply: %v", err)
			}
		}
	}
}

// rateLimitKinds are the kinds the functions count in rate_limits (each
// function's ratelimit.NewBigtable): an erasure leaves none of them.
var rateLimitKinds = []string{"reactions", "history", "history-delete", "history-settings", "comment-delete"}

// seeded is what seed wrote: the counter keys and their counts before
// and after the erasure of the seeded user.
type seeded struct {
	keys          []string
	before, after map[string]counter.Values
	// mine and theirs are a top-level comment of the user and one of the
	// other user.
	mine, theirs string
}

// seed gives user reactions, comments, replies under them by other, a
// reply under other's comment, history, settings and a rate-limit row of
// every kind, and delivers the counter events.
func (w *world) seed(t *testing.T, user, other string) seeded {
	t.Helper()
	ctx := context.Background()
	set := func(u, item string, to reaction.Kind) {
		t.Helper()
		res, err := w.reactions.SetMany(ctx, []reactionstore.SetRequest{{UserID: u, ContentID: item, To: to}})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("set %s %s: %v", u, item, err)
		}
		if err := events.PublishAll(ctx, w.pub, reactionstore.Events(res)); err != nil {
			t.Fatal(err)
		}
	}
	post := func(u, parent string) string {
		t.Helper()
		res, err := w.comments.CreateMany(ctx, []commentstore.CreateRequest{{UserID: u, VideoID: "vid", ParentID: parent, Text: "words"}})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatalf("post %s under %q: %v", u, parent, err)
		}
		if err := events.PublishAll(ctx, w.pub, []events.Event{*res[0].Event}); err != nil {
			t.Fatal(err)
		}
		return res[0].Comment.ID
	}
	set(user, "v1", reaction.Like)
	set(user, "v2", reaction.Like)
	set(user, "v3", reaction.Dislike)
	set(other, "v1", reaction.Like)
	mine := post(user, "")
	post(other, mine)
	post(other, mine)
	theirs := post(other, "")
	post(user, theirs)
	set(user, theirs, reaction.Like)

	base := time.Now().Add(-time.Hour)
	for i := range 3 {
		if err := w.history.Apply(ctx, history.NewWatch(user, fmt.Sprintf("h%d", i), base.Add(time.Duration(i)*time.Minute), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.settings.Put(ctx, user, history.Settings{AutoDeleteMonths: 18}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range rateLimitKinds {
		for _, u := range []string{user, other} {
			if _, err := ratelimit.NewBigtable(w.bt, kind, 100).Allow(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.deliver(t)
	s := seeded{
		keys: []string{"v1", "v2", "v3", "vid", mine, theirs},
		before: map[string]counter.Values{
			"v1": {Likes: 2}, "v2": {Likes: 1}, "v3": {Dislikes: 1},
			"vid": {Comments: 5, Threads: 2},
			mine:  {Replies: 2}, theirs: {Replies: 1, Likes: 1},
		},
		// The user's comment takes the other's replies under it with it;
		// the user's reply leaves the other's comment.
		after: map[string]counter.Values{
			"v1": {Likes: 1}, "vid": {Comments: 1, Threads: 1},
		},
		mine: mine, theirs: theirs,
	}
	w.exact(t, s.keys, s.before)
	return s
}

// exact fails unless every key is counted as want (zero when absent) with
// nothing pending.
func (w *world) exact(t *testing.T, keys []string, want map[string]counter.Values) {
	t.Helper()
	counted, pending, err := w.counts.Totals(context.Background(), keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if c, p := counted[k], pending[k]; c != want[k] || !p.IsZero() {
			t.Errorf("%s: counted %+v pending %+v, want %+v counted", k, c, p, want[k])
		}
	}
}

// rateLimitRows returns the keys of user's rows in rate_limits.
func (w *world) rateLimitRows(t *testing.T, user string) []string {
	t.Helper()
	var keys []string
	for _, kind := range rateLimitKinds {
		prefix := kind + "#" + base64.RawURLEncoding.EncodeToString([]byte(user)) + "#"
		err := w.bt.Open(ratelimit.Table).ReadRows(context.Background(), bigtable.PrefixRange(prefix), func(r bigtable.Row) bool {
			keys = append(keys, r.Key())
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// erased fails unless nothing of user is left in the stores.
func (w *world) erased(t *testing.T, user string) {
	t.Helper()
	ctx := context.Background()
	if rs, err := w.reactions.ListByUser(ctx, user, "", 10); err != nil || len(rs) != 0 {
		t.Errorf("reactions left: %+v %v", rs, err)
	}
	if cs, err := w.comments.ListByAuthor(ctx, user, "", 10); err != nil || len(cs) != 0 {
		t.Errorf("comments left: %+v %v", cs, err)
	}
	if p, err := w.history.List(ctx, user, nil, time.Time{}, 10); err != nil || len(p.Entries) != 0 {
		t.Errorf("history left: %+v %v", p.Entries, err)
	}
	if s, err := w.settings.Get(ctx, user); err != nil || s != (history.Settings{}) {
		t.Errorf("settings left: %+v %v", s, err)
	}
	if keys := w.rateLimitRows(t, user); len(keys) != 0 {
		t.Errorf("rate-limit rows left: %q", keys)
	}
}

// record returns user's erasure record.
func (w *world) record(t *testing.T, user string) account.Erasure {
	t.Helper()
	e, ok, err := w.records.Get(context.Background(), user)
	if err != nil || !ok {
		t.Fatalf("erasure record of %s: %+v %v %v", user, e, ok, err)
	}
	return e
}

// TestEraserErasesEverythingOnce: one Run erases the user's reactions,
// comments, history, settings and rate-limit rows, takes each of them out
// of the counts exactly once, leaves the other user's data, and records
// what it removed; a Run of the done erasure and a second erasure change
// nothing.
func TestEraserErasesEverythingOnce(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.seed(t, "ann", "bob")
	w.request(t, "ann")

	more, err := w.eraser(0, time.Hour).Run(ctx, "ann")
	if err != nil || more {
		t.Fatalf("Run: more %v, %v", more, err)
	}
	e := w.record(t, "ann")
	if e.Open() || e.Phase != account.Done || e.Reactions != 4 || e.Comments != 2 || e.HistoryRows == 0 || e.Steps == 0 {
		t.Errorf("record after Run: %+v, want done with 4 reactions, 2 comments and history rows", e)
	}
	w.deliver(t)
	w.exact(t, s.keys, s.after)
	w.erased(t, "ann")
	if rs, err := w.reactions.ListByUser(ctx, "bob", "", 10); err != nil || len(rs) != 1 {
		t.Errorf("bob's reactions: %+v %v, want his one", rs, err)
	}
	if cs, err := w.comments.ListByAuthor(ctx, "bob", "", 10); err != nil || len(cs) != 3 {
		t.Errorf("bob's comments: %d %v, want his three", len(cs), err)
	}
	if keys := w.rateLimitRows(t, "bob"); len(keys) != len(rateLimitKinds) {
		t.Errorf("bob's rate-limit rows: %q, want one of each kind", keys)
	}

	// The done erasure: a redelivered message changes nothing.
	if more, err := w.eraser(0, time.Hour).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run of a done erasure: more %v, %v", more, err)
	}
	if again := w.record(t, "ann"); again.Figures != e.Figures || again.Phase != e.Phase || !again.UpdateTime.Equal(e.UpdateTime) || !again.DoneTime.Equal(e.DoneTime) {
		t.Errorf("a Run of a done erasure moved the record: %+v, was %+v", again, e)
	}
	// A second erasure finds nothing and publishes nothing.
	w.request(t, "ann")
	if more, err := w.eraser(0, time.Hour).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("second erasure: more %v, %v", more, err)
	}
	if e := w.record(t, "ann"); e.Open() || e.Reactions != 0 || e.Comments != 0 || e.HistoryRows != 0 {
		t.Errorf("second erasure's record: %+v, want done with nothing removed", e)
	}
	if msgs := w.pub.Take(); len(msgs) != 0 {
		t.Errorf("the second erasure published %v", msgs)
	}
	w.exact(t, s.keys, s.after)
}

// TestEraserRefusesWritesWhileErasing: from the request until the record is
// done, the user's reactions, comments and settings are refused with
// errs.ErrAccountErasing (other users' are not); once done they are taken
// again.
func TestEraserRefusesWritesWhileErasing(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.request(t, "ann")
	write := func(user string) []error {
		t.Helper()
		rr, err := w.reactions.SetMany(ctx, []reactionstore.SetRequest{{UserID: user, ContentID: "v9", To: reaction.Like}})
		if err != nil {
			t.Fatal(err)
		}
		cr, err := w.comments.CreateMany(ctx, []commentstore.CreateRequest{{UserID: user, VideoID: "vid", Text: "late"}})
		if err != nil {
			t.Fatal(err)
		}
		return []error{rr[0].Err, cr[0].Err, w.settings.Put(ctx, user, history.Settings{Paused: true})}
	}
	for i, err := range write("ann") {
		if !errors.Is(err, errs.ErrAccountErasing) {
			t.Errorf("write %d of ann while erasing: %v, want ErrAccountErasing", i, err)
		}
	}
	for i, err := range write("bob") {
		if err != nil {
			t.Errorf("write %d of bob while ann is erased: %v", i, err)
		}
	}
	// Still refused while the erasure waits at Settle.
	if more, err := w.eraser(time.Hour, time.Minute).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run up to Settle: more %v, %v", more, err)
	}
	if e := w.record(t, "ann"); e.Phase != account.Settle || !e.Open() {
		t.Fatalf("record: %+v, want open at Settle", e)
	}
	for i, err := range write("ann") {
		if !errors.Is(err, errs.ErrAccountErasing) {
			t.Errorf("write %d of ann at Settle: %v, want ErrAccountErasing", i, err)
		}
	}
	if more, err := w.eraser(0, time.Minute).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run: more %v, %v", more, err)
	}
	for i, err := range write("ann") {
		if err != nil {
			t.Errorf("write %d of ann after the erasure: %v", i, err)
		}
	}
}

// TestEraserWaitsAtSettle: a Run whose Budget ends before Settle has
// passed since the request stops there without more (the sweep brings it
// back); one that reaches Settle within its Budget waits and finishes.
func TestEraserWaitsAtSettle(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.seed(t, "ann", "bob")
	w.request(t, "ann")
	if more, err := w.eraser(time.Hour, time.Minute).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run: more %v, %v, want a stop at Settle", more, err)
	}
	e := w.record(t, "ann")
	if e.Phase != account.Settle || !e.Open() {
		t.Fatalf("record: %+v, want open at Settle", e)
	}
	// Later than the Settle of the request: the erasure goes on.
	late := w.eraser(time.Hour, time.Minute)
	late.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if more, err := late.Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run after Settle: more %v, %v", more, err)
	}
	if e := w.record(t, "ann"); e.Open() {
		t.Fatalf("record: %+v, want done", e)
	}
	w.erased(t, "ann")

	// Settle within the Budget: one Run waits for it.
	w.request(t, "ann")
	const settle = 2 * time.Second
	start := w.record(t, "ann").RequestTime
	if more, err := w.eraser(settle, time.Minute).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run with a short Settle: more %v, %v", more, err)
	}
	e = w.record(t, "ann")
	if e.Open() || e.DoneTime.Sub(start) < settle {
		t.Errorf("record: %+v, want done at least %v after the request at %v", e, settle, start)
	}
}

// TestEraserResumes: a Run cut short by its Budget asks for more and the
// next goes on; a Run that fails after a step committed (a lost publish, a
// record not moved) is resumed by the next, and the counts, with the
// rollup's relay of the outbox, still lose each item exactly once.
func TestEraserResumes(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.seed(t, "ann", "bob")
	w.request(t, "ann")

	// A zero Budget: one step a Run.
	runs := 0
	for more := true; more; runs++ {
		var err error
		if more, err = w.eraser(0, 0).Run(ctx, "ann"); err != nil {
			t.Fatal(err)
		}
		if runs > 100 {
			t.Fatal("the erasure is not done after 100 Runs")
		}
	}
	// The last Run finds the erasure done.
	if e := w.record(t, "ann"); e.Open() || int64(runs) != e.Steps+1 {
		t.Errorf("record after %d Runs: %+v, want done in one step a Run", runs, e)
	}
	w.deliver(t)
	w.exact(t, s.keys, s.after)
	w.erased(t, "ann")

	// The publish of the removed reactions' events fails: the rows are
	// gone, their outbox rows pending, the record still at Reactions.
	w2 := newWorld(t)
	s2 := w2.seed(t, "ann", "bob")
	w2.request(t, "ann")
	w2.pub.SetFail(errs.Unavailable("publish", errors.New("pubsub down")))
	if _, err := w2.eraser(0, time.Hour).Run(ctx, "ann"); err == nil {
		t.Fatal("Run with the publisher down: no error")
	}
	if e := w2.record(t, "ann"); e.Phase != account.Reactions || e.Reactions != 0 {
		t.Errorf("record after a failed step: %+v, want at Reactions with none recorded", e)
	}
	w2.pub.SetFail(nil)
	// The next Run finds the reactions gone and goes on to the end.
	if more, err := w2.eraser(0, time.Hour).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("resumed Run: more %v, %v", more, err)
	}
	if e := w2.record(t, "ann"); e.Open() {
		t.Fatalf("record after the resumed Run: %+v, want done", e)
	}
	w2.deliver(t)
	// The lost events are still pending; the rollup's relay republishes
	// them (Stale), and then the counts are exact.
	stale, err := w2.outbox.Stale(ctx, 0)
	if err != nil || len(stale) == 0 {
		t.Fatalf("stale outbox events: %d %v, want the lost reactions'", len(stale), err)
	}
	if err := events.PublishAll(ctx, w2.pub, stale); err != nil {
		t.Fatal(err)
	}
	w2.deliver(t)
	w2.exact(t, s2.keys, s2.after)
	w2.erased(t, "ann")
}

// failingRecords fails the first Step of the Comments phase, after the
// step's work committed: a worker that dies before moving the record.
type failingRecords struct {
	account.Records
	failed bool
}

func (f *failingRecords) Step(ctx context.Context, userID string, phase account.Phase, add account.Figures, advance bool) (account.Erasure, error) {
	if phase == account.Comments && !f.failed {
		f.failed = true
		return account.Erasure{}, errs.Unavailable("step", errors.New("instance killed"))
	}
	return f.Records.Step(ctx, userID, phase, add, advance)
}

// TestEraserConcurrentAndKilledRuns: a Run killed between a step and its
// record, then two Runs of the user at once, still take each item out of
// the counts exactly once.
func TestEraserConcurrentAndKilledRuns(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.seed(t, "ann", "bob")
	w.request(t, "ann")

	killed := w.eraser(0, time.Hour)
	killed.Records = &failingRecords{Records: w.records}
	if _, err := killed.Run(ctx, "ann"); err == nil {
		t.Fatal("Run with a failing record: no error")
	}
	if e := w.record(t, "ann"); e.Phase != account.Comments || !e.Open() {
		t.Fatalf("record after the killed Run: %+v, want open at Comments", e)
	}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			_, err := w.eraser(0, time.Hour).Run(ctx, "ann")
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Errorf("concurrent Run: %v", err)
		}
	}
	if e := w.record(t, "ann"); e.Open() {
		t.Fatalf("record after the concurrent Runs: %+v, want done", e)
	}
	w.deliver(t)
	w.exact(t, s.keys, s.after)
	w.erased(t, "ann")
}

// TestEraserWithoutAnErasure: a Run for a user with no erasure record
// changes and publishes nothing.
func TestEraserWithoutAnErasure(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.seed(t, "ann", "bob")
	if more, err := w.eraser(0, time.Hour).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run: more %v, %v", more, err)
	}
	if _, ok, err := w.records.Get(ctx, "ann"); ok || err != nil {
		t.Errorf("a record appeared: %v %v", ok, err)
	}
	if msgs := w.pub.Take(); len(msgs) != 0 {
		t.Errorf("published %v", msgs)
	}
	if rs, err := w.reactions.ListByUser(ctx, "ann", "", 10); err != nil || len(rs) != 4 {
		t.Errorf("ann's reactions: %+v %v, want her four", rs, err)
	}
	w.exact(t, s.keys, s.before)
}

// TestEraserDeletesTheIdentityAccount: once the data is erased the
// erasure deletes the user's Identity Platform account (a later lookup does
// not find it) and leaves the other user's; while the provider fails, the
// erasure waits at the Identity phase with the data gone and the user's
// writes still refused, and the next Run finishes it; an account already
// gone counts as deleted; a provider failing for IdentityRetryFor leaves
// the account in place and lets the erasure finish.
func TestEraserDeletesTheIdentityAccount(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.idp.signUp(t, "ann")
	w.idp.signUp(t, "bob")
	w.seed(t, "ann", "bob")
	w.request(t, "ann")

	w.idp.down.Store(true)
	if _, err := w.eraser(0, time.Hour).Run(ctx, "ann"); err == nil {
		t.Fatal("Run with the provider down: no error, want one for the redelivery")
	}
	if e := w.record(t, "ann"); e.Phase != account.Identity || !e.Open() {
		t.Fatalf("record with the provider down: %+v, want open at the Identity phase", e)
	}
	if rs, err := w.reactions.ListByUser(ctx, "ann", "", 10); err != nil || len(rs) != 0 {
		t.Errorf("reactions left before the Identity phase: %+v %v", rs, err)
	}
	if err := w.settings.Put(ctx, "ann", history.Settings{Paused: true}); !errors.Is(err, errs.ErrAccountErasing) {
		t.Errorf("settings write while the account is being deleted: %v, want ErrAccountErasing", err)
	}
	if !w.idp.exists(t, "ann") {
		t.Fatal("ann's account gone while the provider refused the delete")
	}

	w.idp.down.Store(false)
	if more, err := w.eraser(0, time.Hour).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("Run once the provider is back: more %v, %v", more, err)
	}
	if e := w.record(t, "ann"); e.Open() {
		t.Errorf("record: %+v, want done", e)
	}
	if w.idp.exists(t, "ann") {
		t.Error("ann's Identity Platform account still found after her erasure")
	}
	if !w.idp.exists(t, "bob") {
		t.Error("bob's Identity Platform account deleted with ann's erasure")
	}
	w.erased(t, "ann")

	// Erased again (a replay after a restore): the account already gone
	// counts as deleted.
	w.request(t, "ann")
	if more, err := w.eraser(0, time.Hour).Run(ctx, "ann"); err != nil || more {
		t.Fatalf("second erasure: more %v, %v", more, err)
	}
	if e := w.record(t, "ann"); e.Open() {
		t.Errorf("second erasure's record: %+v, want done", e)
	}

	// A provider that keeps failing holds the erasure for IdentityRetryFor
	// only.
	w.idp.signUp(t, "cat")
	w.request(t, "cat")
	w.idp.down.Store(true)
	if _, err := w.eraser(0, time.Hour).Run(ctx, "cat"); err == nil {
		t.Fatal("Run with the provider down: no error")
	}
	e := w.record(t, "cat")
	late := w.eraser(0, time.Hour)
	late.Now = func() time.Time { return e.UpdateTime.Add(account.IdentityRetryFor + time.Minute) }
	if more, err := late.Run(ctx, "cat"); err != nil || more {
		t.Fatalf("Run past IdentityRetryFor: more %v, %v", more, err)
	}
	if e := w.record(t, "cat"); e.Open() {
		t.Errorf("record past IdentityRetryFor: %+v, want done", e)
	}
	if !w.idp.exists(t, "cat") {
		t.Error("cat's account gone, yet the provider refused every delete")
	}
}
