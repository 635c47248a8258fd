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
