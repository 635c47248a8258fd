package docscheck

import (
	"slices"
	"testing"
)

// TestRepositoryLinks fails on every broken relative link in the
// repository's Markdown files.
func TestRepositoryLinks(t *testing.T) {
	problems, err := Check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestBrokenLinksAreFound runs the check on a tree with one link of each
// broken kind, and as many that are fine.
func TestBrokenLinksAreFound(t *testing.T) {
	problems, err := Check("testdata/broken")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:5: missing.md: no such file or directory",
		"README.md:6: ../outside.md: points outside the repository",
		"README.md:7: sub/page.md#no-such-heading: no heading with this anchor",
		"README.md:8: #nowhere: no heading with this anchor",
		"README.md:12: sub/gone.png: no such file or directory",
		"sub/page.md:3: ../../../SPEC.md: points outside the repository",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant:\n%q", got, want)
	}
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Rolling back code":                     "rolling-back-code",
		"Counts reads: Cloud CDN, `the` cache":  "counts-reads-cloud-cdn-the-cache",
		"When a publish fails after the commit": "when-a-publish-fails-after-the-commit",
		"0001 — group commit":                   "0001--group-commit",
	} {
		if got := Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}
