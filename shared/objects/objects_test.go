package objects_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/googleapi"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/objects"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

func write(t *testing.T, b *objects.Bucket, name string, chunks ...[]byte) error {
	t.Helper()
	w := b.Write(t.Context(), name, "application/json")
	for _, c := range chunks {
		if _, err := w.Write(c); err != nil {
			return err
		}
	}
	return w.Close()
}

func read(t *testing.T, b *objects.Bucket, name string) ([]byte, error) {
	t.Helper()
	r, err := b.Read(t.Context(), name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestWriteReadListDelete(t *testing.T) {
	b := emulatortest.ExportsBucket(t)
	// Many times the writer's chunk: a resumable upload of several
	// requests.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20+1)
	if err := write(t, b, "u/alice/1.json", big[:len(big)/2], big[len(big)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := write(t, b, "u/alice/2.json", []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := write(t, b, "u/alicia/1.json", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	got, err := read(t, b, "u/alice/1.json")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes, %v; want the %d written", len(got), err, len(big))
	}

	if err := write(t, b, "u/alice/2.json", []byte(`{"other":true}`)); !errors.Is(err, objects.ErrExists) {
		t.Errorf("second write of one name: %v, want ErrExists", err)
	}
	if got, _ := read(t, b, "u/alice/2.json"); string(got) != `{"b":2}` {
		t.Errorf("after a refused write the object holds %q", got)
	}

	list, err := b.List(t.Context(), "u/alice/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, fmt.Sprintf("%s %d", o.Name, o.Size))
		if o.Created.IsZero() {
			t.Errorf("%s: no creation time", o.Name)
		}
	}
	if d := cmp.Diff([]string{fmt.Sprintf("u/alice/1.json %d", len(big)), "u/alice/2.json 7"}, names); d != "" {
		t.Errorf("List(u/alice/) (-want +got):\n%s", d)
	}

	if err := b.Delete(t.Context(), "u/alice/2.json"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), "u/alice/2.json"); err != nil {
		t.Errorf("deleting an object already gone: %v", err)
	}
	if _, err := read(t, b, "u/alice/2.json"); !errors.Is(err, objects.ErrNotExist) {
		t.Errorf("read of a deleted object: %v, want ErrNotExist", err)
	}
	if list, _ := b.List(t.Context(), "u/alice/"); len(list) != 1 {
		t.Errorf("after the delete List holds %v", list)
	}
}

// A writer holds one chunk of ChunkSize, a multiple of 256 KiB as the
// client library requires, not the library's default 16 MiB: the memory
// of an instance's concurrent writes (docs/benchmarks/prepareexport.md).
func TestWriterHoldsOneChunk(t *testing.T) {
	if ChunkSize := objects.ChunkSize; ChunkSize <= 0 || ChunkSize%(256<<10) != 0 {
		t.Fatalf("ChunkSize %d is not a positive multiple of 256 KiB", ChunkSize)
	}
	b := emulatortest.ExportsBucket(t)
	liveHeap := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	// A first write sets up what the client keeps between writes.
	if err := write(t, b, "warm-up", []byte{1}); err != nil {
		t.Fatal(err)
	}
	const writers = 16
	before := liveHeap()
	var open []*objects.Writer
	for i := range writers {
		w := b.Write(t.Context(), fmt.Sprintf("one-chunk-%d", i), "application/octet-stream")
		// The first byte makes the writer start its upload and take its
		// buffer.
		if _, err := w.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		open = append(open, w)
	}
	perWriter := (int64(liveHeap()) - int64(before)) / writers
	for _, w := range open {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if perWriter < objects.ChunkSize/2 || perWriter > 2*objects.ChunkSize {
		t.Errorf("an open writer holds %d bytes; want its chunk, %d, and little more", perWriter, objects.ChunkSize)
	}

	// An object of several chunks and a part is stored whole.
	data := bytes.Repeat([]byte("0123456789abcdef"), (5*objects.ChunkSize/2)/16)
	if err := write(t, b, "chunks", data); err != nil {
		t.Fatal(err)
	}
	if got, err := read(t, b, "chunks"); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read back %d bytes, %v; want the %d written", len(got), err, len(data))
	}
}

// A write abandoned by its context leaves no object behind.
func TestWriteAbandoned(t *testing.T) {
	b := emulatortest.ExportsBucket(t)
	ctx, cancel := context.WithCancel(t.Context())
	w := b.Write(ctx, "half", "application/json")
	if _, err := w.Write([]byte(`{"partial":`)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := w.Close(); err == nil {
		t.Fatal("Close after the context ended stored the object")
	}
	if _, err := read(t, b, "half"); !errors.Is(err, objects.ErrNotExist) {
		t.Errorf("read of an abandoned write: %v, want ErrNotExist", err)
	}
}

// The signed URL downloads the object with no credentials, and is a V4
// signed URL that expires when asked.
func TestSignedURL(t *testing.T) {
	b := emulatortest.ExportsBucket(t)
	body := []byte(`{"export":"of alice"}`)
	if err := write(t, b, "u/alice/x.json", body); err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(15 * time.Minute)
	raw, err := b.SignedURL("u/alice/x.json", expires)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	// Whole seconds from the signing time to expires.
	if secs, err := strconv.Atoi(q.Get("X-Goog-Expires")); q.Get("X-Goog-Algorithm") != "GOOG4-RSA-SHA256" || q.Get("X-Goog-Signature") == "" || err != nil || secs < 890 || secs > 900 {
		t.Errorf("not a V4 signed URL expiring in 900 s: %s", raw)
	}
	if !strings.HasSuffix(u.Path, "/"+b.Name()+"/u/alice/x.json") {
		t.Errorf("URL path %q does not name the object", u.Path)
	}
	resp, err := http.Get(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
		t.Errorf("GET the signed URL: %s %q, want 200 %q", resp.Status, got, body)
	}
}

func TestReadMissing(t *testing.T) {
	b := emulatortest.ExportsBucket(t)
	if _, err := read(t, b, "nothing"); !errors.Is(err, objects.ErrNotExist) {
		t.Errorf("read of a missing object: %v, want ErrNotExist", err)
	}
	if list, err := b.List(t.Context(), "nothing/"); err != nil || len(list) != 0 {
		t.Errorf("List of an empty prefix: %v, %v", list, err)
	}
}

// Errors a retry may cure are marked for a 503; the rest are not.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code      int
		transient bool
	}{{429, true}, {500, true}, {503, true}, {403, false}, {400, false}} {
		err := objects.Classify("op", &googleapi.Error{Code: tc.code})
		if got := errors.Is(err, errs.ErrBackendUnavailable); got != tc.transient {
			t.Errorf("%d: transient %v, want %v (%v)", tc.code, got, tc.transient, err)
		}
	}
	if err := objects.Classify("op", &googleapi.Error{Code: 412}); !errors.Is(err, objects.ErrExists) {
		t.Errorf("412: %v, want ErrExists", err)
	}
}
