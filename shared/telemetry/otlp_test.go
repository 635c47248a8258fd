package telemetry

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// fakeRegion detects a platform in region, without a metadata server.
func fakeRegion(region string) func(context.Context) (*resource.Resource, error) {
	return func(context.Context) (*resource.Resource, error) {
		if region == "" {
			return resource.Empty(), nil
		}
		return resource.NewSchemaless(semconv.CloudRegionKey.String(region), semconv.CloudPlatformGCPCloudRun), nil
	}
}

// useServiceAccountKey points application default credentials at a service
// account key made for the test: the credentials parse, and nothing asks
// Google for a token until an export.
func useServiceAccountKey(t *testing.T) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	b, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "test-project",
		"private_key_id": "test-key",
		"private_key":    string(pemKey),
		"client_email":   "functions@test-project.iam.gserviceaccount.com",
		"client_id":      "1",
		"token_uri":      "https://oauth2.googleapis.com/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", p)
}

// TestGCPExportersAreOTLP: with credentials, "gcp" builds the OpenTelemetry
// OTLP/gRPC exporters for Google's endpoint (construction only: nothing is
// sent), and the metric exporter carries the detected region.
func TestGCPExportersAreOTLP(t *testing.T) {
	useServiceAccountKey(t)
	ctx := context.Background()
	if googleOTLPEndpoint != "telemetry.googleapis.com:443" {
		t.Errorf("endpoint %s", googleOTLPEndpoint)
	}

	se, err := newLazySpanExporter(googleOTLPEndpoint).l.Build(ctx)
	if err != nil {
		t.Fatalf("span exporter: %v", err)
	}
	if _, ok := se.(*otlptrace.Exporter); !ok {
		t.Errorf("span exporter is %T, want the OTLP trace exporter", se)
	}
	if err := se.Shutdown(ctx); err != nil {
		t.Errorf("span exporter shutdown: %v", err)
	}

	me, err := newLazyMetricExporter(googleOTLPEndpoint, fakeRegion("europe-west1")).l.Build(ctx)
	if err != nil {
		t.Fatalf("metric exporter: %v", err)
	}
	wr, ok := me.(*withResource)
	if !ok {
		t.Fatalf("metric exporter is %T", me)
	}
	if _, ok := wr.Exporter.(*otlpmetricgrpc.Exporter); !ok {
		t.Errorf("metric exporter wraps %T, want the OTLP metric exporter", wr.Exporter)
	}
	if v, _ := wr.res.Set().Value(semconv.CloudRegionKey); v.AsString() != "europe-west1" {
		t.Errorf("metric resource region %q", v.AsString())
	}
	if err := me.Shutdown(ctx); err != nil {
		t.Errorf("metric exporter shutdown: %v", err)
	}
}

// TestGCPMetricExporterNeedsRegion: Cloud Monitoring rejects OTLP points
// without a location; the exporter is not built (and is tried again later)
// rather than sending points that would be refused.
func TestGCPMetricExporterNeedsRegion(t *testing.T) {
	useServiceAccountKey(t)
	_, err := newLazyMetricExporter(googleOTLPEndpoint, fakeRegion("")).l.Build(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cloud.region") {
		t.Fatalf("build without a region: %v", err)
	}
}

func TestGCPExportersWithoutCredentials(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	ctx := context.Background()
	if _, err := newLazySpanExporter(googleOTLPEndpoint).l.Build(ctx); err == nil || !strings.Contains(err.Error(), "application default credentials") {
		t.Errorf("span exporter without credentials: %v", err)
	}
	if _, err := newLazyMetricExporter(googleOTLPEndpoint, fakeRegion("europe-west1")).l.Build(ctx); err == nil || !strings.Contains(err.Error(), "application default credentials") {
		t.Errorf("metric exporter without credentials: %v", err)
	}
}

// recordingMetricExporter keeps the resources it was given.
type recordingMetricExporter struct {
	sdkmetric.Exporter
	got []*resource.Resource
}

func (r *recordingMetricExporter) Export(_ context.Context, rm *metricdata.ResourceMetrics) error {
	r.got = append(r.got, rm.Resource)
	return nil
}

func TestWithResourceAddsDetectedAttributes(t *testing.T) {
	cfg := telemetryConfig(ExporterGCP)
	own := newResource(cfg)
	if v, _ := own.Set().Value("gcp.project_id"); v.AsString() != "test-project" {
		t.Errorf("gcp.project_id = %q, want the project Google's endpoint writes to", v.AsString())
	}
	rec := &recordingMetricExporter{}
	detected, _ := fakeRegion("europe-west1")(context.Background())
	w := &withResource{Exporter: rec, res: detected}
	rm := &metricdata.ResourceMetrics{Resource: own}
	if err := w.Export(context.Background(), rm); err != nil {
		t.Fatal(err)
	}
	if rm.Resource != own {
		t.Error("Export changed the caller's resource metrics")
	}
	got := rec.got[0].Set()
	for k, want := range map[attribute.Key]string{
		semconv.CloudRegionKey:   "europe-west1",
		semconv.ServiceNameKey:   ServiceName(),
		"gcp.project_id":         "test-project",
		semconv.CloudPlatformKey: "gcp_cloud_run",
	} {
		if v, _ := got.Value(k); v.AsString() != want {
			t.Errorf("%s = %q, want %q", k, v.AsString(), want)
		}
	}
}
