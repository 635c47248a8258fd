package capacity

import (
	"strings"
	"testing"
)

// PrepareExport's pushes at once must hold their writers' chunks within
// GOMEMLIMIT with headroom: the deployed settings do, and each broken
// copy is refused.
func TestPrepareExportMemory(t *testing.T) {
	for _, env := range []string{"prod", "dev"} {
		for _, v := range plan(t, load(t, root, env)).Violations {
			if strings.HasPrefix(v, "PrepareExport:") {
				t.Errorf("%s as deployed: %s", env, v)
			}
		}
	}
	for _, c := range []struct {
		name    string
		breakIt func(f *Function)
		want    string
	}{
		{"200 pushes an instance", func(f *Function) { f.Concurrency = 200 }, "PrepareExport: 200 pushes at once"},
		{"16 pushes on 32 MiB", func(f *Function) { f.MemoryMiB = 32 }, "GOMEMLIMIT, 24 MiB (75% of 32 MiB)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := load(t, root, "prod")
			setFn(d, "PrepareExport", c.breakIt)
			var got []string
			for _, v := range plan(t, d).Violations {
				if strings.HasPrefix(v, "PrepareExport:") {
					got = append(got, v)
				}
			}
			if len(got) != 1 || !strings.Contains(got[0], c.want) {
				t.Errorf("PrepareExport's violations %q; want one saying %q", got, c.want)
			}
		})
	}
}
