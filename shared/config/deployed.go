package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
)

// EmulatorHostVars are the variables that point the client libraries at the
// local emulators. A deployed instance refuses to start with any of them
// set (CheckDeployed).
var EmulatorHostVars = []string{"SPANNER_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST", "FIREBASE_AUTH_EMULATOR_HOST", "STORAGE_EMULATOR_HOST"}

// PlatformVars are the variables Cloud Run sets in every instance it runs
// (Cloud Functions 2nd gen runs on it): services set K_SERVICE, K_REVISION
// and K_CONFIGURATION, jobs CLOUD_RUN_JOB. Nothing local sets them.
// FUNCTION_TARGET is not one: the functions framework reads it locally too.
var PlatformVars = []string{"K_SERVICE", "K_REVISION", "K_CONFIGURATION", "CLOUD_RUN_JOB"}

// Deployed reports whether the process runs as a deployed instance: in
// Cloud Run's environment, any of PlatformVars set. Only the platform
// decides it: no setting of the instance's own (an emulator variable, a
// flag) turns the deployed checks off; an emulator variable set in a
// deployed instance is one of the unsafe settings CheckDeployed refuses.
func Deployed(lookup func(string) (string, bool)) bool {
	for _, k := range PlatformVars {
		if v, ok := lookup(k); ok && v != "" {
			return true
		}
	}
	return false
}

// emulatorHosts are the emulator variables as the configuration read them,
// by name (EmulatorHostVars).
func (c *Config) emulatorHosts() map[string]string {
	return map[string]string{
		"SPANNER_EMULATOR_HOST":       c.Spanner.EmulatorHost,
		"BIGTABLE_EMULATOR_HOST":      c.Bigtable.EmulatorHost,
		"FIRESTORE_EMULATOR_HOST":     c.Firestore.EmulatorHost,
		"PUBSUB_EMULATOR_HOST":        c.PubSub.EmulatorHost,
		"FIREBASE_AUTH_EMULATOR_HOST": c.Auth.EmulatorHost,
		"STORAGE_EMULATOR_HOST":       c.Objects.EmulatorHost,
	}
}

// Local defaults that a deployed instance must never run with: anyone can
// read them here, and a project id nobody owns can be claimed.
const (
	defaultAudience        = "local-project"
	defaultPageTokenSecret = "local-page-token-secret"
	defaultViewerHashKey   = "local-viewer-hash-key"
	minSecretLength        = 16
)

// CheckDeployed returns what makes the configuration unsafe for a deployed
// instance, one error per setting, joined; nil when nothing does. public is
// whether the instance serves the public API (verifies ID tokens and signs
// page tokens); every instance is checked for the rest.
func (c *Config) CheckDeployed(public bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if public {
		if c.Auth.Audience == "" || c.Auth.Audience == defaultAudience {
			bad("AUTH_AUDIENCE is %q: set it to the Firebase project id the ID tokens are issued for (a default project id can be claimed by anyone)", c.Auth.Audience)
		}
		if u, err := url.Parse(c.Auth.JWKSURL); err != nil || u.Scheme != "https" || u.Host == "" {
			bad("AUTH_JWKS_URL %q is not an https URL: the signing keys must come over TLS", c.Auth.JWKSURL)
		}
		if u, err := url.Parse(c.Auth.TokenIssuer()); err != nil || u.Scheme != "https" {
			bad("AUTH_ISSUER %q is not an https URL", c.Auth.TokenIssuer())
		}
		if c.HTTP.PageTokenSecret == defaultPageTokenSecret || len(c.HTTP.PageTokenSecret) < minSecretLength {
			bad("PAGE_TOKEN_SECRET is the local default or shorter than %d bytes: page tokens could be forged", minSecretLength)
		}
		if slices.Contains(c.HTTP.AllowedOrigins, "*") {
			bad(`CORS_ALLOWED_ORIGINS contains "*": name the frontends' origins`)
		}
		if err := c.Auth.CheckSignInProviders(); err != nil {
			bad("%v: every token would be refused", err)
		}
	}
	hosts := c.emulatorHosts()
	for _, k := range EmulatorHostVars {
		if hosts[k] != "" {
			bad("%s is set (%q): a deployed instance talks to Google's services, never to an emulator, and keeps every deployed check", k, hosts[k])
		}
	}
	if !c.HTTP.RateLimits {
		bad("RATE_LIMITS=off: the per-user limits are for local load tests only")
	}
	return errors.Join(errs...)
}

// CheckViewerHashKey returns an error when a deployed instance that hashes
// viewers (ApplyViews) would do it under the local default key, or one too
// short: anyone could then compute a user's viewer hash.
func (c *Config) CheckViewerHashKey() error {
	if k := c.History.ViewerHashKey; k == defaultViewerHashKey || len(k) < minSecretLength {
		return fmt.Errorf("VIEWER_HASH_KEY is the local default or shorter than %d bytes: anyone could compute a user's viewer hash", minSecretLength)
	}
	return nil
}
