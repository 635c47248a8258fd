package apiclient

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedClientIsCurrent regenerates the client from docs/openapi.yaml
// into a temporary file and fails when it differs from apiclient.gen.go: a
// change of the description needs `make generate`.
func TestGeneratedClientIsCurrent(t *testing.T) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", "oapi-codegen.yaml", filepath.Join("..", "..", "docs", "openapi.yaml"))
	cmd.Stderr = &stderr
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, stderr.String())
	}
	got, err := os.ReadFile("apiclient.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("apiclient.gen.go is not what docs/openapi.yaml generates: run make generate")
	}
}

// TestExportAnswerByKind: GET /v1/me/export answers the export or the link
// to a prepared one; kind (the description's discriminator) tells which, so
// a link is never read as an empty export.
func TestExportAnswerByKind(t *testing.T) {
	for body, want := range map[string]string{
		`{"kind":"link","url":"https://storage.example/x","expiresAt":"2026-03-14T09:41:53Z"}`:                                         "link",
		`{"kind":"export","reactions":[],"comments":[],"history":[],"settings":{"paused":false,"autoDeleteMonths":0},"moderation":[]}`: "export",
	} {
		var answer ExportMyData200JSONResponseBody
		if err := answer.UnmarshalJSON([]byte(body)); err != nil {
			t.Fatal(err)
		}
		v, err := answer.ValueByDiscriminator()
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		switch v := v.(type) {
		case AccountExportLink:
			if want != "link" || v.Url == "" {
				t.Errorf("%s: read as the link %+v", body, v)
			}
		case AccountExport:
			if want != "export" || v.Settings.AutoDeleteMonths != KeepUntilRetention {
				t.Errorf("%s: read as the export %+v", body, v)
			}
		default:
			t.Errorf("%s: read as %T", body, v)
		}
	}
}
