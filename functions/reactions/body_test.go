package reactionsfn

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/httpx"
)

// decodeBoth decodes body with decodePut and with httpx.DecodeJSON, and
// returns what each answers: the reaction read, or the error as written.
func decodeBoth(t *testing.T, body string) (direct, reference string) {
	t.Helper()
	answer := func(decode func(w http.ResponseWriter, r *http.Request) (*string, error)) string {
		r := httptest.NewRequest("PUT", "/v1/reactions/a", strings.NewReader(body))
		w := httptest.NewRecorder()
		v, err := decode(w, r)
		if err != nil {
			httpx.WriteError(w, r, err)
			return w.Body.String()
		}
		if v == nil {
			return "<nil>"
		}
		return "reaction " + *v
	}
	direct = answer(func(w http.ResponseWriter, r *http.Request) (*string, error) {
		b, err := decodePut(w, r)
		return b.Reaction, err
	})
	reference = answer(func(w http.ResponseWriter, r *http.Request) (*string, error) {
		var b putBody
		err := httpx.DecodeJSON(w, r, &b)
		return b.Reaction, err
	})
	return direct, reference
}

var putBodies = []string{
	`{"reaction":"like"}`, `{"reaction":"dislike"}`, ` { "reaction" : "none" } `, "{\n\t\"reaction\":\"like\"\r\n}\n",
	`{"reaction":""}`, `{"reaction":"LIKE"}`, `{"REACTION":"like"}`, `{"reaction":"l\u0069ke"}`, `{"reaction":"like","x":1}`,
	`{"reaction":"like"}{}`, `{"reaction":"like"} x`, `{"reaction":null}`, `{"reaction":1}`, `{}`, `null`, `[]`, ``, ` `,
	`{"reaction":"like"`, `{"reaction":"like}`, `{"reaction":"é"}`, "{\"reaction\":\"a\x01\"}", `{"reaction":"like",}`,
	`{"reaction":"like"}` + strings.Repeat(" ", 200), `{"reaction":"` + strings.Repeat("x", 70<<10) + `"}`,
	`{"reaction":"like","reaction":"dislike"}`,
}

// TestDecodePutAsDecodeJSON: the direct reader answers every body as
// httpx.DecodeJSON does.
func TestDecodePutAsDecodeJSON(t *testing.T) {
	for _, body := range putBodies {
		if d, r := decodeBoth(t, body); d != r {
			t.Errorf("body %.60q: direct %q, DecodeJSON %q", body, d, r)
		}
	}
	if d, _ := decodeBoth(t, `{"reaction":"like"}`); d != "reaction like" {
		t.Errorf("the usual body: %q", d)
	}
}

func FuzzDecodePut(f *testing.F) {
	for _, b := range putBodies {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if d, r := decodeBoth(t, body); d != r {
			t.Errorf("body %q: direct %q, DecodeJSON %q", body, d, r)
		}
	})
}

// TestWriteReactionAsWriteJSON: the direct answer is byte for byte what
// httpx.WriteJSON writes.
func TestWriteReactionAsWriteJSON(t *testing.T) {
	for _, b := range []ReactionBody{
		{ContentID: "intro", Reaction: "like", Version: 1, UpdateTime: time.Date(2026, 12, 1, 2, 3, 4, 567890000, time.UTC)},
		{ContentID: "A-z_9", Reaction: "none", Version: 1 << 40, UpdateTime: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{ContentID: strings.Repeat("x", 64), Reaction: "dislike", Version: 0, UpdateTime: time.Date(1999, 1, 2, 3, 4, 5, 1, time.UTC)},
	} {
		direct, reference := httptest.NewRecorder(), httptest.NewRecorder()
		writeReaction(direct, b)
		httpx.WriteJSON(reference, http.StatusOK, b)
		if direct.Code != reference.Code || !bytes.Equal(direct.Body.Bytes(), reference.Body.Bytes()) ||
			direct.Header().Get("Content-Type") != reference.Header().Get("Content-Type") {
			t.Errorf("%+v: direct %d %q %q, WriteJSON %d %q %q", b, direct.Code, direct.Header().Get("Content-Type"), direct.Body,
				reference.Code, reference.Header().Get("Content-Type"), reference.Body)
		}
	}
}
