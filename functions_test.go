package engagement_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/videngage/engagement/shared/config"
)

// A deployed instance (K_SERVICE set) with an unsafe setting, an emulator
// variable among them, exits at start with a log line naming it; a safe one
// starts. The test binary, which imports this package, is the instance: its
// init runs the check before any test.
func TestDeployedInstanceRefusesUnsafeSettings(t *testing.T) {
	run := func(extra ...string) (string, error) {
		var env []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			if !slices.Contains(config.EmulatorHostVars, k) {
				env = append(env, kv)
			}
		}
		env = append(env, "K_SERVICE=history", "FUNCTION_TARGET=History", "AUTH_AUDIENCE=videngage-prod",
			"PAGE_TOKEN_SECRET=0123456789abcdef0123456789abcdef", "CORS_ALLOWED_ORIGINS=https://www.videngage.example")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(env, extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(); err != nil {
		t.Fatalf("a safe deployed instance did not start: %v\n%s", err, out)
	}
	bads := []string{"RATE_LIMITS=off", "CORS_ALLOWED_ORIGINS=*", "AUTH_AUDIENCE=local-project",
		"PAGE_TOKEN_SECRET=local-page-token-secret", "AUTH_JWKS_URL=http://keys.example/jwks"}
	// An emulator variable does not make the instance local: it is refused.
	for _, k := range config.EmulatorHostVars {
		bads = append(bads, k+"=localhost:1")
	}
	for _, bad := range bads {
		out, err := run(bad)
		name, _, _ := strings.Cut(bad, "=")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%s: %v, want exit status 1\n%s", bad, err, out)
			continue
		}
		if !strings.Contains(out, "refusing to start") || !strings.Contains(out, name) || !strings.Contains(out, `"severity":"ERROR"`) {
			t.Errorf("%s: the log does not say why:\n%s", bad, out)
		}
	}
	// The viewer-hash key is ApplyViews' alone: it refuses the default,
	// the other functions do not read it.
	applyViews := []string{"K_SERVICE=applyviews", "FUNCTION_TARGET=ApplyViews"}
	out, err := run(applyViews...)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, "VIEWER_HASH_KEY") {
		t.Errorf("ApplyViews with the default VIEWER_HASH_KEY: %v, want exit status 1 naming it\n%s", err, out)
	}
	if out, err := run(append(applyViews, "VIEWER_HASH_KEY=0123456789abcdef0123456789abcdef")...); err != nil {
		t.Errorf("ApplyViews with its own VIEWER_HASH_KEY did not start: %v\n%s", err, out)
	}
}
