package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestTypeScriptClient runs the compiled TypeScript client's smoke script
// (clients/typescript/src/smoke.ts) against the local stack: reactions with
// their ETag and If-Match, the session token, the caller's and the public
// counts, a comment retried with its Idempotency-Key, an error branch and
// the history, each through the types generated from docs/openapi.yaml.
// It needs node and the root's node_modules (npm ci), as make test has.
func TestTypeScriptClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required (CI installs it; locally: apt-get install nodejs npm && npm ci)")
	}
	base := startLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("..", "..", "clients", "typescript", "dist", "smoke.js"), base)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("smoke.js: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	var summary struct {
		OK     bool     `json:"ok"`
		Checks []string `json:"checks"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &summary); err != nil {
		t.Fatalf("smoke.js summary %q: %v", lines[len(lines)-1], err)
	}
	for _, want := range []string{
		"the answer carries a Session-Token",
		"the 412 names the current version in ETag",
		"my counts hold my like",
		"public counts answer every id once",
		"a retry with the same Idempotency-Key answers the same comment",
		"three links are 400 INVALID_ARGUMENT",
		"history holds the watch's position",
	} {
		if !summary.OK || !slices.Contains(summary.Checks, want) {
			t.Errorf("smoke.js did not check %q (summary %+v)", want, summary)
		}
	}
}
