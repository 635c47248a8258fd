package accountfn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	prepareexportfn "github.com/videngage/engagement/functions/prepareexport"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/errs"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

func get(t *testing.T, h http.Handler, user string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/me/export", nil)
	r.Header.Set("Authorization", "Bearer "+user)
	h.ServeHTTP(w, r)
	if err := apitest.Check("GET", "/v1/me/export", w.Code, w.Header(), w.Body.Bytes()); err != nil {
		t.Errorf("answer %d not in the API document: %v\n%s", w.Code, err, w.Body)
	}
	return w
}

// exportTopic is the exports topic: it keeps the messages for the test to
// deliver, and refuses them while fail is set.
type exportTopic struct {
	mu   sync.Mutex
	msgs []bus.Message
	fail error
}

func (q *exportTopic) Publish(_ context.Context, data []byte, attrs map[string]string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail != nil {
		return "", q.fail
	}
	id := fmt.Sprintf("export-%d", len(q.msgs))
	q.msgs = append(q.msgs, bus.Message{ID: id, Data: data, Attributes: attrs})
	return id, nil
}

func (q *exportTopic) take() []bus.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs = nil
	return out
}

// TestExportPreparedForALargeAccount: over the bound (lowered here), the
// export is published to the exports topic and answered 202 with
// Retry-After, and 202 again until PrepareExport, handed the push the
// subscription delivers, has written it to the bucket on the emulator;
// then 200 with a signed URL whose plain download is byte for byte the
// document the streamed export gives. The user's lease goes with the
// message and PrepareExport ends it; the message redelivered changes
// nothing; the account erasure deletes the prepared export.
func TestExportPreparedForALargeAccount(t *testing.T) {
	bucket := emulatortest.ExportsBucket(t)
	newAccount := func() *fakeAccount {
		return &fakeAccount{reactions: 700, comments: 450, entries: 2500, trail: fakeTrail{n: 30}, written: func() int { return 0 }}
	}

	// The streamed document of the same account, the bound not reached.
	streamed := newAccount()
	w := get(t, New(Deps{Verifier: fakeVerifier{}, Reactions: streamed, Comments: streamed, History: streamed, Settings: streamed,
		Moderation: &streamed.trail, Exports: &streamed.exports, Prepared: bucket, AsyncAbove: 1_000_000}), "alice")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), `{"kind":"export","reactions":[`) {
		t.Fatalf("under the bound: %d %.200s", w.Code, w.Body)
	}
	want := w.Body.Bytes()

	a := newAccount()
	topic := &exportTopic{}
	h := New(Deps{Verifier: fakeVerifier{}, Reactions: a, Comments: a, History: a, Settings: a,
		Moderation: &a.trail, Exports: &a.exports, Prepared: bucket, ExportTopic: topic, AsyncAbove: 100})
	prepare := prepareexportfn.New(prepareexportfn.Deps{
		Exporter: account.Exporter{Reactions: a, Comments: a, History: a, Settings: a, Moderation: &a.trail},
		Exports:  &a.exports, Prepared: bucket}, nil)

	w = get(t, h, "alice")
	if w.Code != http.StatusAccepted || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"preparing"`) {
		t.Fatalf("over the bound: %d %q %s; want 202 preparing with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	msgs := topic.take()
	if len(msgs) != 1 || msgs[0].Attributes["kind"] != account.ExportKind {
		t.Fatalf("published %v; want one export message", msgs)
	}
	if a.exports.running != 1 {
		t.Errorf("exports %+v: want the lease held while the export waits to be prepared", a.exports)
	}
	// Asked again before it is prepared: 202, never another export.
	if w = get(t, h, "alice"); w.Code != http.StatusAccepted || len(a.exports.begun) != 1 || len(topic.take()) != 0 {
		t.Fatalf("while prepared: %d %s, %d exports begun", w.Code, w.Body, len(a.exports.begun))
	}

	if got := pushtest.Deliver(t, prepare, msgs[0], "account-export"); got != pushtest.Acked {
		t.Fatalf("PrepareExport: %v, want acknowledged", got)
	}
	if len(a.exports.begun) != 1 || a.exports.running != 0 {
		t.Errorf("exports %+v: want one begun, and ended once prepared", a.exports)
	}
	objs, err := bucket.List(t.Context(), account.PreparedDir("alice"))
	if err != nil || len(objs) != 1 || !strings.HasSuffix(objs[0].Name, account.DocumentSuffix) {
		t.Fatalf("objects of alice's export %v, %v: want the document alone, its marker deleted", objs, err)
	}

	var link exportLinkJSON
	if w = get(t, h, "alice"); w.Code != http.StatusOK {
		t.Fatalf("once prepared: %d %s; want 200 with a link", w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &link); err != nil || link.URL == "" {
		t.Fatalf("200 without a link: %v %s", err, w.Body)
	}
	if left := time.Until(link.ExpiresAt); left <= 0 || left > linkFor {
		t.Errorf("link expires at %v, in %v; want within %v", link.ExpiresAt, left, linkFor)
	}
	resp, err := http.Get(link.URL) // no credentials: the URL is enough
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		t.Fatalf("download: %s, %d bytes; want the %d bytes streamed (equal: %v)", resp.Status, len(got), len(want), bytes.Equal(got, want))
	}
	if err := apitest.Check("GET", "/v1/me/export", http.StatusOK, http.Header{"Content-Type": {"application/json"}}, got); err != nil {
		t.Errorf("the downloaded document: %v", err)
	}

	// Redelivered: acknowledged, the document as it was, nothing read.
	a.maxPage = 0
	if got := pushtest.Deliver(t, prepare, msgs[0], "account-export"); got != pushtest.Acked {
		t.Fatalf("PrepareExport redelivered: %v, want acknowledged", got)
	}
	if again, err := bucket.List(t.Context(), account.PreparedDir("alice")); err != nil || len(again) != 1 || again[0] != objs[0] || a.maxPage != 0 {
		t.Errorf("after a redelivery alice's objects are %v, %v (were %v), pages read %d; want them unchanged and nothing read", again, err, objs, a.maxPage)
	}
	if len(a.exports.begun) != 1 || len(a.exports.ended) != 1 || a.exports.running != 0 {
		t.Errorf("exports after a redelivery %+v: want one begun and ended once", a.exports)
	}

	// Handed over again without another export; the others see nothing.
	if w = get(t, h, "alice"); w.Code != http.StatusOK || len(a.exports.begun) != 1 {
		t.Errorf("asked again: %d, %d exports begun; want the link again and no new export", w.Code, len(a.exports.begun))
	}

	// The erasure deletes the prepared export.
	e := newErasure("")
	eh := New(Deps{Verifier: fakeVerifier{}, Erasures: records{e}, Settings: e, ErasureLog: e, Publisher: e, Prepared: bucket})
	ew := httptest.NewRecorder()
	er := httptest.NewRequest("DELETE", "/v1/me", nil)
	er.Header.Set("Authorization", "Bearer alice")
	eh.ServeHTTP(ew, er)
	if ew.Code != http.StatusAccepted {
		t.Fatalf("erase: %d %s", ew.Code, ew.Body)
	}
	if objs, err := bucket.List(t.Context(), account.PreparedDir("alice")); err != nil || len(objs) != 0 {
		t.Errorf("after the erasure alice's prepared exports are %v, %v; want none", objs, err)
	}
}

// TestExportNotPublished: when the exports topic refuses the message, the
// answer is 503 in the error format, no marker is left and the user's lease
// is ended, so the retry is another export, prepared as usual.
func TestExportNotPublished(t *testing.T) {
	bucket := emulatortest.ExportsBucket(t)
	a := &fakeAccount{reactions: 700, entries: 2500, written: func() int { return 0 }}
	topic := &exportTopic{fail: fmt.Errorf("%w: pubsub is down", errs.ErrBackendUnavailable)}
	h := New(Deps{Verifier: fakeVerifier{}, Reactions: a, Comments: a, History: a, Settings: a,
		Moderation: &a.trail, Exports: &a.exports, Prepared: bucket, ExportTopic: topic, AsyncAbove: 100})

	w := get(t, h, "alice")
	apitest.CheckError(t, "publish refused", apitest.Answer{Code: w.Code, Header: w.Header(), Body: w.Body.Bytes()}, 503, "UNAVAILABLE", errs.BackendUnavailable)
	if objs, err := bucket.List(t.Context(), account.PreparedDir("alice")); err != nil || len(objs) != 0 {
		t.Errorf("after the refused publish alice's objects are %v, %v; want none", objs, err)
	}
	if a.exports.running != 0 || len(a.exports.ended) != 1 {
		t.Errorf("exports %+v: want the lease ended", a.exports)
	}

	topic.mu.Lock()
	topic.fail = nil
	topic.mu.Unlock()
	if w = get(t, h, "alice"); w.Code != http.StatusAccepted || len(topic.take()) != 1 || len(a.exports.begun) != 2 {
		t.Errorf("the retry: %d %s, exports %+v; want 202 and the export published", w.Code, w.Body, a.exports)
	}
}

// TestExportPreparationLost: a preparation whose instance was lost (its
// marker left behind) answers 202 until the export's deadline, reading
// nothing and starting nothing; past the deadline, when its lease has
// lapsed too, the next request starts an export again.
func TestExportPreparationLost(t *testing.T) {
	bucket := emulatortest.ExportsBucket(t)
	marker := account.PreparedDir("alice") + "1.pending"
	if err := bucket.Write(t.Context(), marker, "text/plain").Close(); err != nil {
		t.Fatal(err)
	}
	a := &fakeAccount{reactions: 3, comments: 2, entries: 5, written: func() int { return 0 }}
	deps := Deps{Verifier: fakeVerifier{}, Reactions: a, Comments: a, History: a, Settings: a,
		Moderation: &a.trail, Exports: &a.exports, Prepared: bucket, ExportTimeout: time.Hour}
	if w := get(t, New(deps), "alice"); w.Code != http.StatusAccepted || len(a.exports.begun) != 0 || a.maxPage != 0 {
		t.Fatalf("within the deadline: %d, %d exports begun, pages read %d; want 202 and nothing started", w.Code, len(a.exports.begun), a.maxPage)
	}

	deps.ExportTimeout = time.Second
	for deadline := time.Now().Add(time.Minute); ; {
		objs, err := bucket.List(t.Context(), marker)
		if err != nil || len(objs) != 1 {
			t.Fatalf("marker: %v, %v", objs, err)
		}
		if time.Since(objs[0].Created) > deps.ExportTimeout {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the marker never aged past the deadline")
		}
		time.Sleep(50 * time.Millisecond) // polling the condition
	}
	if w := get(t, New(deps), "alice"); w.Code != http.StatusOK || len(a.exports.begun) != 1 {
		t.Errorf("past the deadline: %d, %d exports begun; want a new export, streamed", w.Code, len(a.exports.begun))
	}
}
