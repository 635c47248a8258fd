package spannerdb_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"go.opentelemetry.io/otel"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/telemetry"
)

// scrape reads GET /metrics of srv: each sample's value by its name and
// labels as written ("name{a=\"x\",b=\"y\"}").
func scrape(t *testing.T, srv *httptest.Server) map[string]float64 {
	t.Helper()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// sum adds the samples of name whose labels include every one of labels.
func sum(samples map[string]float64, name string, labels ...string) float64 {
	var n float64
	for k, v := range samples {
		series, rest, _ := strings.Cut(k, "{")
		if series != name {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(rest, l)
		}
		if all {
			n += v
		}
	}
	return n
}

// The process's Spanner work is served at /metrics in Prometheus' text
// format: commits and row writes by table after a write; read calls, rows
// read and bytes read after a read and a query; and the process's CPU.
func TestMetricsScrapedAfterAWriteAndARead(t *testing.T) {
	cfg := emulatortest.New(t)
	cfg.Telemetry.Exporter, cfg.Telemetry.SampleRatio = telemetry.ExporterNone, 0
	prev := otel.GetMeterProvider()
	shutdown, err := telemetry.Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		otel.SetMeterProvider(prev)
	})
	srv := httptest.NewServer(telemetry.MetricsHandler())
	defer srv.Close()
	db := emulatortest.Spanner(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s0 := scrape(t, srv)
	names := []string{"a", "b", "c"}
	if _, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		for _, n := range names {
			if err := tx.BufferWrite([]*spanner.Mutation{spanner.Insert("JobLeases", []string{"Name", "Holder", "Expires"}, []any{n, "me", time.Now()})}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s1 := scrape(t, srv)
	moved := func(from, to map[string]float64, name string, labels ...string) float64 {
		return sum(to, name, labels...) - sum(from, name, labels...)
	}
	if got := moved(s0, s1, "engagement_spanner_commits_total"); got != 1 {
		t.Errorf("commits moved by %v, want 1", got)
	}
	if got := moved(s0, s1, "engagement_spanner_row_writes_total", `table="JobLeases"`); got != 3 {
		t.Errorf("row writes of JobLeases moved by %v, want 3", got)
	}

	keys := spanner.KeySetFromKeys(spanner.Key{"a"}, spanner.Key{"b"}, spanner.Key{"c"})
	if err := db.Single().Read(ctx, "JobLeases", keys, []string{"Name", "Holder"}).Do(func(*spanner.Row) error { return nil }); err != nil {
		t.Fatal(err)
	}
	q := spanner.Statement{SQL: "SELECT Name FROM JobLeases WHERE Name IN UNNEST(@names)", Params: map[string]any{"names": names}}
	if err := db.Single().Query(ctx, q).Do(func(*spanner.Row) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s2 := scrape(t, srv)
	if got := moved(s1, s2, "engagement_spanner_reads_total"); got != 2 {
		t.Errorf("read calls moved by %v, want 2", got)
	}
	if got := moved(s1, s2, "engagement_spanner_rows_read_total"); got != 6 {
		t.Errorf("rows read moved by %v, want 6", got)
	}
	if got := moved(s1, s2, "engagement_spanner_bytes_read_total"); got <= 0 {
		t.Errorf("bytes read moved by %v, want more than 0", got)
	}
	if got := sum(s2, "engagement_cpu_seconds_total", `function="`+telemetry.ServiceName()+`"`); got <= 0 {
		t.Errorf("CPU seconds %v, want more than 0", got)
	}
}
