package config

import (
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"
)

// safe is a deployed public instance's environment as Terraform sets it.
func safe() map[string]string {
	return map[string]string{
		"K_SERVICE":            "history",
		"GOOGLE_CLOUD_PROJECT": "videngage-prod",
		"AUTH_AUDIENCE":        "videngage-prod",
		"PAGE_TOKEN_SECRET":    "0123456789abcdef0123456789abcdef",
		"CORS_ALLOWED_ORIGINS": "https://www.videngage.example",
	}
}

// TestDeployed: Cloud Run's environment alone decides; an emulator variable
// does not make a deployed instance local.
func TestDeployed(t *testing.T) {
	env := safe()
	if !Deployed(envconfig.MapLookuper(env).Lookup) {
		t.Error("K_SERVICE set, no emulator: not deployed")
	}
	for _, k := range EmulatorHostVars {
		env := safe()
		env[k] = "localhost:1"
		if !Deployed(envconfig.MapLookuper(env).Lookup) {
			t.Errorf("K_SERVICE and %s set: not deployed, and the deployed checks are off", k)
		}
	}
	delete(env, "K_SERVICE")
	if Deployed(envconfig.MapLookuper(env).Lookup) {
		t.Error("no platform variable: deployed")
	}
	for _, k := range PlatformVars {
		if !Deployed(envconfig.MapLookuper(map[string]string{k: "x", "SPANNER_EMULATOR_HOST": "localhost:1"}).Lookup) {
			t.Errorf("%s alone: not deployed", k)
		}
	}
	if Deployed(envconfig.MapLookuper(map[string]string{"FUNCTION_TARGET": "History"}).Lookup) {
		t.Error("FUNCTION_TARGET alone (the framework's local runner): deployed")
	}
}

// Each unsafe setting alone fails the check, naming the variable; the safe
// environment passes. Every emulator variable is one (the cases name them
// all: TestEveryEmulatorVariableRefused).
func TestCheckDeployed(t *testing.T) {
	check := func(env map[string]string, public bool) error {
		t.Helper()
		c, err := FromLookuper(t.Context(), envconfig.MapLookuper(env))
		if err != nil {
			t.Fatal(err)
		}
		return c.CheckDeployed(public)
	}
	if err := check(safe(), true); err != nil {
		t.Fatalf("the safe environment: %v", err)
	}
	for _, c := range []struct {
		name, key, value, want string
		private                bool // a non-public instance is refused too
	}{
		{"default audience", "AUTH_AUDIENCE", "", "AUTH_AUDIENCE", false},
		{"claimable project id", "AUTH_AUDIENCE", "local-project", "AUTH_AUDIENCE", false},
		{"default page-token secret", "PAGE_TOKEN_SECRET", "", "PAGE_TOKEN_SECRET", false},
		{"short page-token secret", "PAGE_TOKEN_SECRET", "secret", "PAGE_TOKEN_SECRET", false},
		{"http key set", "AUTH_JWKS_URL", "http://keys.example/jwks", "AUTH_JWKS_URL", false},
		{"http issuer", "AUTH_ISSUER", "http://issuer.example", "AUTH_ISSUER", false},
		{"any origin", "CORS_ALLOWED_ORIGINS", "https://a.example,*", "CORS_ALLOWED_ORIGINS", false},
		{"misspelt sign-in provider", "AUTH_SIGN_IN_PROVIDERS", "password,google", "AUTH_SIGN_IN_PROVIDERS", false},
		{"rate limits off", "RATE_LIMITS", "off", "RATE_LIMITS", true},
		{"spanner emulator", "SPANNER_EMULATOR_HOST", "localhost:9010", "SPANNER_EMULATOR_HOST", true},
		{"bigtable emulator", "BIGTABLE_EMULATOR_HOST", "localhost:8086", "BIGTABLE_EMULATOR_HOST", true},
		{"firestore emulator", "FIRESTORE_EMULATOR_HOST", "localhost:8080", "FIRESTORE_EMULATOR_HOST", true},
		{"pubsub emulator", "PUBSUB_EMULATOR_HOST", "localhost:8085", "PUBSUB_EMULATOR_HOST", true},
		{"auth emulator", "FIREBASE_AUTH_EMULATOR_HOST", "localhost:9099", "FIREBASE_AUTH_EMULATOR_HOST", true},
		{"storage emulator", "STORAGE_EMULATOR_HOST", "localhost:4443", "STORAGE_EMULATOR_HOST", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := safe()
			if c.value == "" {
				delete(env, c.key) // the default
			} else {
				env[c.key] = c.value
			}
			err := check(env, true)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("public: %v, want an error naming %s", err, c.want)
			}
			err = check(env, false)
			if c.private && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("not public: %v, want an error naming %s", err, c.want)
			}
			if !c.private && err != nil {
				t.Errorf("not public: %v, want none (the setting serves the public API only)", err)
			}
		})
	}
}

func TestCheckViewerHashKey(t *testing.T) {
	for key, ok := range map[string]bool{"": false, "local-viewer-hash-key": false, "short": false, "0123456789abcdef0123456789abcdef": true} {
		env := safe()
		if key != "" {
			env["VIEWER_HASH_KEY"] = key
		}
		c, err := FromLookuper(t.Context(), envconfig.MapLookuper(env))
		if err != nil {
			t.Fatal(err)
		}
		err = c.CheckViewerHashKey()
		if ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "VIEWER_HASH_KEY") {
			t.Errorf("VIEWER_HASH_KEY %q: %v", key, err)
		}
	}
}

// TestEveryEmulatorVariableRefused: no emulator variable is left out of the
// deployed check.
func TestEveryEmulatorVariableRefused(t *testing.T) {
	for _, k := range EmulatorHostVars {
		env := safe()
		env[k] = "localhost:1"
		c, err := FromLookuper(t.Context(), envconfig.MapLookuper(env))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckDeployed(false); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s set: %v, want an error naming it", k, err)
		}
	}
}
