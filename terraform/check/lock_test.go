package check

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var (
	lockProvider = regexp.MustCompile(`(?s)provider "registry\.terraform\.io/hashicorp/([a-z-]+)" \{\s*version\s*=\s*"([^"]+)"(.*?)\n\}`)
	lockHash     = regexp.MustCompile(`"zh:[0-9a-f]{64}"`)
)

// Every environment commits a lock file pinning the same provider versions
// the stand-in serves (so the offline schema check checks what Cloud Build
// installs), each with the checksums of the real release's packages.
func TestLockFiles(t *testing.T) {
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(repo, "terraform", "envs", env, ".terraform.lock.hcl"))
			if err != nil {
				t.Fatalf("no committed lock file: %v", err)
			}
			got := map[string]string{}
			for _, m := range lockProvider.FindAllStringSubmatch(string(b), -1) {
				got[m[1]] = m[2]
				if n := len(lockHash.FindAllString(m[3], -1)); n < 10 {
					t.Errorf("%s %s: %d zh: checksums, want one per released platform package", m[1], m[2], n)
				}
			}
			for _, p := range standIns {
				if got[p.name] != p.version {
					t.Errorf("hashicorp/%s is locked at %q, the offline check uses %s", p.name, got[p.name], p.version)
				}
			}
			if len(got) != len(standIns) {
				t.Errorf("lock file has providers %v, want exactly %v", got, standIns)
			}
		})
	}
}
