package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Fuzz targets of the decoders of outside input in this package: request
// bodies, id lists, page sizes and trace headers. Seeds: the f.Add calls and
// testdata/fuzz/<target>. Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzDecodeJSON$' -fuzztime 60s ./shared/httpx/
//	go test -run '^$' -fuzz '^FuzzParseIDs$' -fuzztime 60s ./shared/httpx/
//	go test -run '^$' -fuzz '^FuzzParsePageSize$' -fuzztime 60s ./shared/httpx/
//	go test -run '^$' -fuzz '^FuzzTraceFields$' -fuzztime 60s ./shared/httpx/

// requestBody has the fields (and field types) of the API's request bodies:
// reactions, flagged users, history writes and settings, comments and spam.
type requestBody struct {
	Reaction         *string  `json:"reaction"`
	UserIDs          []string `json:"userIds"`
	Flagged          *bool    `json:"flagged"`
	VideoID          string   `json:"videoId"`
	WatchedAt        *string  `json:"watchedAt"`
	PositionSeconds  *float64 `json:"positionSeconds"`
	Paused           *bool    `json:"paused"`
	AutoDeleteMonths *int     `json:"autoDeleteMonths"`
	Text             *string  `json:"text"`
	ParentID         *string  `json:"parentId"`
	CommentIDs       []string `json:"commentIds"`
}

var requestFields = []string{"reaction", "userIds", "flagged", "videoId", "watchedAt", "positionSeconds",
	"paused", "autoDeleteMonths", "text", "parentId", "commentIds"}

func decodeBody(body []byte) (requestBody, error) {
	var v requestBody
	req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
	err := DecodeJSON(httptest.NewRecorder(), req, &v)
	return v, err
}

// FuzzDecodeJSON: DecodeJSON never panics; it refuses with a 400 (413 only
// over MaxBodyBytes) whose message names no Go internals; it accepts only
// one JSON object of known fields (encoding/json matches names without
// regard to case), and what it accepts survives a re-encoding unchanged.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"reaction":"like"}`,
		`{"userIds":["a","b"],"flagged":true}`,
		`{"videoId":"v1","watchedAt":"2026-01-02T15:04:05Z","positionSeconds":42.5}`,
		`{"paused":false,"autoDeleteMonths":18}`,
		`{"text":"héllo \ud83d\ude00","parentId":"c1"}`,
		`{"commentIds":["x"]}`,
		`{}`, ` {"videoId":"v"} ` + "\n", `null`, `[]`, `"x"`, `1`, `{"videoId":"a"}{}`, `{"videoId":"a"} x`,
		`{"VIDEOID":"v"}`, `{"userId":"mallory"}`, `{"videoId":1}`, `{"autoDeleteMonths":1e400}`,
		`{"autoDeleteMonths":1.5}`, `{"positionSeconds":-0}`, `{"videoId":"\u0000"}`, `{"videoId":"a","videoId":"b"}`,
		`{"userIds":null}`, `{"text":"` + "\xff" + `"}`, `{`, ``, "\ufeff{}",
	} {
		f.Add([]byte(s))
	}
	// Bodies at and over MaxBodyBytes are TestDecodeJSON's: seeds that large
	// slow the fuzzer's mutations down by an order of magnitude.
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decodeBody(body)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("DecodeJSON(%q) = %v, not an *Error", short(body), err)
			}
			switch {
			case e.Code == http.StatusRequestEntityTooLarge && len(body) > MaxBodyBytes:
			case e.Code == http.StatusBadRequest:
			default:
				t.Fatalf("DecodeJSON(%q) answers %d: %s", short(body), e.Code, e.Message)
			}
			if strings.Contains(e.Message, "json:") || strings.Contains(e.Message, "Go value") {
				t.Fatalf("DecodeJSON(%q) message leaks the decoder: %q", short(body), e.Message)
			}
			return
		}
		if len(body) > MaxBodyBytes {
			t.Fatalf("DecodeJSON accepted %d bytes", len(body))
		}
		// One JSON object and nothing else.
		if !json.Valid(body) {
			t.Fatalf("DecodeJSON accepted invalid JSON %q", short(body))
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
			t.Fatalf("DecodeJSON accepted %q, which is not a JSON object", short(body))
		}
		for k := range fields {
			if !slices.ContainsFunc(requestFields, func(f string) bool { return strings.EqualFold(f, k) }) {
				t.Fatalf("DecodeJSON accepted the unknown field %q in %q", k, short(body))
			}
		}
		// Round trip.
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("re-encoding the value of %q: %v", short(body), err)
		}
		var v2 requestBody
		if len(again) > MaxBodyBytes {
			// The re-encoding spells out every absent field: past the limit,
			// check the value with the decoder alone.
			err = json.Unmarshal(again, &v2)
		} else {
			v2, err = decodeBody(again)
		}
		if err != nil {
			t.Fatalf("DecodeJSON refuses its own re-encoding %s: %v", short(again), err)
		}
		if diff := cmp.Diff(v, v2); diff != "" {
			t.Fatalf("round trip of %q changed the value (-first +second):\n%s", short(body), diff)
		}
	})
}

// short keeps failure messages readable.
func short(b []byte) []byte {
	if len(b) > 300 {
		return append(b[:300:300], "…"...)
	}
	return b
}

// FuzzParseIDs: ParseIDs never panics; what it accepts is the query's ids
// (every one valid), duplicates collapsed in first-seen order, 1 to max of
// them; what it refuses is a 400 and really is empty, holds a bad id or too
// many distinct ids.
func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{"a", "a,b,a", "b,a,b,c", "", ",", "a,", ",a", "a,,b", "a b", "a/b", "é", "a\x00",
		strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("a,", 50) + "b", "A-z_0,A-z_0"} {
		f.Add(s, uint8(50))
	}
	f.Add("a,b,c,d", uint8(3))
	f.Add("a,a,a,a", uint8(1))
	f.Fuzz(func(t *testing.T, q string, m uint8) {
		max := int(m%100) + 1
		ids, err := ParseIDs(q, max)
		parts := strings.Split(q, ",")
		var distinct []string
		allValid := true
		for _, p := range parts {
			allValid = allValid && ValidID(p)
			if !slices.Contains(distinct, p) {
				distinct = append(distinct, p)
			}
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != http.StatusBadRequest {
				t.Fatalf("ParseIDs(%q, %d) = %v, want a 400", q, max, err)
			}
			if q != "" && allValid && len(distinct) <= max {
				t.Fatalf("ParseIDs(%q, %d) refused good ids: %v", q, max, err)
			}
			return
		}
		if q == "" || !allValid || len(distinct) > max {
			t.Fatalf("ParseIDs(%q, %d) accepted %q", q, max, ids)
		}
		if !slices.Equal(ids, distinct) {
			t.Fatalf("ParseIDs(%q, %d) = %q, want %q", q, max, ids, distinct)
		}
		for _, id := range ids {
			if !idPattern.MatchString(id) {
				t.Fatalf("ParseIDs(%q) accepted the id %q", q, id)
			}
		}
	})
}

// FuzzParsePageSize: ParsePageSize never panics; it gives the default for an
// absent value, accepts exactly the canonical decimal numbers 1..max and
// refuses everything else with a 400.
func FuzzParsePageSize(f *testing.F) {
	for _, s := range []string{"", "1", "20", "100", "101", "0", "-1", "+5", "05", " 5", "5 ", "1e2", "0x10", "١", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		const def, max = 20, 100
		n, err := ParsePageSize(q, def, max)
		want, convErr := strconv.Atoi(q)
		good := q == "" || convErr == nil && strconv.Itoa(want) == q && want >= 1 && want <= max
		if q == "" {
			want = def
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != http.StatusBadRequest {
				t.Fatalf("ParsePageSize(%q) = %v, want a 400", q, err)
			}
			if good {
				t.Fatalf("ParsePageSize(%q) refused a good size: %v", q, err)
			}
			return
		}
		if !good || n != want {
			t.Fatalf("ParsePageSize(%q) = %d, want an error or %d", q, n, want)
		}
	})
}

var (
	hex32              = regexp.MustCompile(`^[0-9a-f]{32}$`)
	hex16              = regexp.MustCompile(`^[0-9a-f]{16}$`)
	traceparentPattern = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$`)
)

// FuzzTraceFields: whatever the traceparent and X-Cloud-Trace-Context
// headers hold, a log line of the request is one JSON object, and its trace
// fields are either absent or the shapes Cloud Logging reads (a 32-hex trace
// id under the project, a 16-hex span id); a valid traceparent wins.
func FuzzTraceFields(f *testing.F) {
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "105445aa7843bc8bf206b12000100000/1;o=1")
	f.Add("", "105445aa7843bc8bf206b12000100000/1;o=1")
	f.Add("", "105445aa7843bc8bf206b12000100000/18446744073709551615;o=0")
	f.Add("", "105445aa7843bc8bf206b12000100000")
	f.Add("", "105445AA7843BC8BF206B12000100000/12")
	f.Add("", "x/y;o=1")
	f.Add("", "\"},\"severity\":\"EMERGENCY")
	f.Add("", "/;")
	f.Add("00-00000000000000000000000000000000-0000000000000000-01", "")
	f.Add("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	f.Add("00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", "")
	f.Fuzz(func(t *testing.T, traceparent, cloudTrace string) {
		var buf bytes.Buffer
		log := slog.New(NewLogHandler(&buf, slog.LevelInfo, "proj"))
		ctx := requestContext(traceparent, cloudTrace)
		log.InfoContext(ctx, "request")
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("log line is not one JSON object: %q", buf.String())
		}
		if line["message"] != "request" || line["severity"] != "INFO" {
			t.Fatalf("log line fields overwritten: %q", buf.String())
		}
		trace, hasTrace := line["logging.googleapis.com/trace"].(string)
		span, _ := line["logging.googleapis.com/spanId"].(string)
		if !hasTrace {
			if m := traceparentPattern.FindStringSubmatch(traceparent); m != nil && validTraceparent(m) {
				t.Fatalf("valid traceparent %q not logged: %q", traceparent, buf.String())
			}
			return
		}
		id, ok := strings.CutPrefix(trace, "projects/proj/traces/")
		if !ok || !hex32.MatchString(id) || strings.Trim(id, "0") == "" {
			t.Fatalf("trace field %q from (%q, %q) is not projects/proj/traces/<32 hex>", trace, traceparent, cloudTrace)
		}
		if span != "" && !hex16.MatchString(span) {
			t.Fatalf("spanId %q from (%q, %q) is not 16 hex digits", span, traceparent, cloudTrace)
		}
		if m := traceparentPattern.FindStringSubmatch(traceparent); m != nil && validTraceparent(m) && (id != m[2] || span != m[3]) {
			t.Fatalf("traceparent %q logged as %s / %s", traceparent, id, span)
		}
	})
}

// validTraceparent applies W3C's rules beyond the pattern: version ff and
// all-zero ids are invalid, and version 00 has no flag bits beyond sampled
// and random (level 2).
func validTraceparent(m []string) bool {
	if m[1] == "ff" || strings.Trim(m[2], "0") == "" || strings.Trim(m[3], "0") == "" {
		return false
	}
	flags, _ := strconv.ParseUint(m[4], 16, 8)
	return m[1] != "00" || flags <= 3
}
