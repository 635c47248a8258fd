package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// AttrFunction names the function whose process a measurement is of.
const AttrFunction = "function"

// MetricCPUSeconds is the CPU time (user and system) of the process, by
// function: a deployed instance runs one function, the local stack all of
// them (function "local").
const MetricCPUSeconds = "engagement/cpu_seconds"

// newScrapeReader is the reader of a process that keeps its metrics for
// GET /metrics (TELEMETRY_EXPORTER none or stdout: the local stack, the
// drills): OpenTelemetry's Prometheus exporter on a registry of its own,
// and the handler that serves it in Prometheus' text format. It is a pull
// reader: nothing is collected until someone scrapes.
func newScrapeReader() (sdkmetric.Reader, http.Handler, error) {
	reg := prometheus.NewRegistry()
	r, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return r, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}), nil
}

// MetricsHandler serves the metrics of this process in Prometheus' text
// format, as kept since Setup (or the last Setup); 404 in a process whose
// metrics are exported over OTLP instead, or before Setup.
func MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		installMu.Lock()
		h := scrape
		installMu.Unlock()
		if h == nil {
			http.Error(w, "this process exports its metrics over OTLP, not for scraping", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// observeCPU reports the process's CPU seconds on mp as MetricCPUSeconds.
func observeCPU(mp metric.MeterProvider) error {
	fn := metric.WithAttributes(attribute.String(AttrFunction, ServiceName()))
	_, err := mp.Meter(scope).Float64ObservableCounter(MetricCPUSeconds, metric.WithUnit("s"),
		metric.WithDescription("CPU time (user and system) of the process serving the function; the local stack serves every function in one process."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			if s, ok := processCPU(); ok {
				o.Observe(s.Seconds(), fn)
			}
			return nil
		}))
	return err
}
