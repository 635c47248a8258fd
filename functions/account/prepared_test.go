package accountfn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/objects"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// syncExports is fakeExports behind a lock, for an export that ends after
// its answer; ended is closed by the first End.
type syncExports struct {
	mu    sync.Mutex
	f     *fakeExports
	ended chan struct{}
	once  sync.Once
}

func (s *syncExports) Begin(ctx context.Context, user string, timeout time.Duration) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.f.Begin(ctx, user, timeout)
}

func (s *syncExports) End(ctx context.Context, user, lease string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.once.Do(func() { close(s.ended) })
	return s.f.End(ctx, user, lease)
}

func exportsBucket(t *testing.T) *objects.Bucket {
	t.Helper()
	cfg := emulatortest.New(t)
	c, err := objects.New(t.Context(), cfg.Objects)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.Bucket(cfg.Objects.ExportsBucket)
}

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

// TestExportPreparedForALargeAccount: over the bound (lowered here), the
// export is prepared in the bucket on the emulator: 202 with Retry-After,
// 202 again while it is prepared, then 200 with a signed URL whose plain
// download is byte for byte the document the streamed export gives. The
// preparation holds the user's lease until it is over, and the account
// erasure deletes the prepared export.
func TestExportPreparedForALargeAccount(t *testing.T) {
	bucket := exportsBucket(t)
	newAccount := func() *fakeAccount {
		return &fakeAccount{reactions: 700, comments: 450, entries: 2500, trail: fakeTrail{n: 30}, written: func() int { return 0 }}
	}

	// The streamed document of the same account, the bound not reached.
	streamed := newAccount()
	w := get(t, New(Deps{Verifier: fakeVerifier{}, Reactions: streamed, Comments: streamed, History: streamed, Settings: streamed,
		Moderation: &streamed.trail, Exports: &streamed.exports, Prepared: bucket, AsyncAbove: 1_000_000}), "alice")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), `{"reactions":[`) {
		t.Fatalf("under the bound: %d %.200s", w.Code, w.Body)
	}
	want := w.Body.Bytes()

	a := newAccount()
	exports := &syncExports{f: &a.exports, ended: make(chan struct{})}
	h := New(Deps{Verifier: fakeVerifier{}, Reactions: a, Comments: a, History: a, Settings: a,
		Moderation: &a.trail, Exports: exports, Prepared: bucket, AsyncAbove: 100})
	w = get(t, h, "alice")
	if w.Code != http.StatusAccepted || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"preparing"`) {
		t.Fatalf("over the bound: %d %q %s; want 202 preparing with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}

	// Asked again until handed over: 202 meanwhile, never another export.
	var link exportLinkJSON
	deadline := time.Now().Add(time.Minute)
	for {
		w = get(t, h, "alice")
		if w.Code == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &link); err != nil || link.URL == "" {
				t.Fatalf("200 without a link: %v %s", err, w.Body)
			}
			break
		}
		if w.Code != http.StatusAccepted {
			t.Fatalf("while prepared: %d %s", w.Code, w.Body)
		}
		if time.Now().After(deadline) {
			t.Fatal("the export was not prepared within a minute")
		}
		time.Sleep(50 * time.Millisecond) // polling the condition, as a client does
	}
	if left := time.Until(link.ExpiresAt); left <= 0 || left > linkFor {
		t.Errorf("link expires at %v, in %v; want within %v", link.ExpiresAt, left, linkFor)
	}

	<-exports.ended
	exports.mu.Lock()
	if len(a.exports.begun) != 1 || a.exports.running != 0 {
		t.Errorf("exports %+v: want one begun, and ended once prepared", a.exports)
	}
	exports.mu.Unlock()

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

	// Handed over again without another export; the others see nothing.
	if w = get(t, h, "alice"); w.Code != http.StatusOK || len(a.exports.begun) != 1 {
		t.Errorf("asked again: %d, %d exports begun; want the link again and no new export", w.Code, len(a.exports.begun))
	}
	if objs, _ := bucket.List(t.Context(), preparedDir("alice")); len(objs) != 1 || !strings.HasSuffix(objs[0].Name, ".json") {
		t.Errorf("objects of alice's export %v: want the document alone, its marker deleted", objs)
	}

	// The erasure deletes the prepared export.
	e := &erasure{}
	eh := New(Deps{Verifier: fakeVerifier{}, Erasures: e, Settings: e, ErasureLog: e, Publisher: e, Prepared: bucket})
	ew := httptest.NewRecorder()
	er := httptest.NewRequest("DELETE", "/v1/me", nil)
	er.Header.Set("Authorization", "Bearer alice")
	eh.ServeHTTP(ew, er)
	if ew.Code != http.StatusAccepted {
		t.Fatalf("erase: %d %s", ew.Code, ew.Body)
	}
	if objs, err := bucket.List(t.Context(), preparedDir("alice")); err != nil || len(objs) != 0 {
		t.Errorf("after the erasure alice's prepared exports are %v, %v; want none", objs, err)
	}
}

// TestExportPreparationLost: a preparation whose instance was lost (its
// marker left behind) answers 202 until the export's deadline, reading
// nothing and starting nothing; past the deadline, when its lease has
// lapsed too, the next request starts an export again.
func TestExportPreparationLost(t *testing.T) {
	bucket := exportsBucket(t)
	marker := preparedDir("alice") + "1.pending"
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
