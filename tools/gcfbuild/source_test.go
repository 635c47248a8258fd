package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// modulePath is this module's path, the prefix of its packages' import paths.
const modulePath = "github.com/videngage/engagement"

// rootImports are the module's packages that the root package imports,
// directly or not, tests aside, for the runtime's platform, as directories
// relative to the module root: read from import paths, independently of
// DeployedDirs' reading of directories.
func rootImports(t *testing.T, root string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64")
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	dirs := map[string]bool{}
	for _, p := range strings.Fields(string(b)) {
		switch {
		case p == modulePath:
			dirs["."] = true
		case strings.HasPrefix(p, modulePath+"/"):
			dirs[strings.TrimPrefix(p, modulePath+"/")] = true
		}
	}
	return dirs
}

// archivePackageDirs are the directories of the Go files in the archive at
// zipPath.
func archivePackageDirs(zipPath string) (map[string]bool, error) {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	dirs := map[string]bool{}
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, ".go") {
			dirs[path.Dir(f.Name)] = true
		}
	}
	return dirs, nil
}

// checkArchivePackages says which packages of the archive at zipPath the
// deployed functions do not import (tooling shipped for nothing) and which
// of the ones they import it lacks.
func checkArchivePackages(zipPath string, imported map[string]bool) error {
	zipped, err := archivePackageDirs(zipPath)
	if err != nil {
		return err
	}
	var extra, missing []string
	for d := range zipped {
		if !imported[d] {
			extra = append(extra, d)
		}
	}
	for d := range imported {
		if !zipped[d] {
			missing = append(missing, d)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	var msgs []string
	if len(extra) > 0 {
		msgs = append(msgs, fmt.Sprintf("packages no function imports: %s", strings.Join(extra, ", ")))
	}
	if len(missing) > 0 {
		msgs = append(msgs, fmt.Sprintf("imported packages missing: %s", strings.Join(missing, ", ")))
	}
	if len(msgs) > 0 {
		return fmt.Errorf("the archive holds %s", strings.Join(msgs, "; "))
	}
	return nil
}

// zipOf writes an archive of files under root, as the archive step would.
func zipOf(t *testing.T, root string, files []string) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteZip(&b, root, files); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "source.zip")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestArchiveHoldsWhatTheFunctionsImport: the archive's Go packages are
// exactly the module's packages the root package imports: no test or
// development tooling (internal/emulators, emulatortest, apitest), no package
// only Terraform and the tools read (shared/topology), and nothing the build
// needs left out. The check itself fails on an archive with a package too
// many and on one with a package too few.
func TestArchiveHoldsWhatTheFunctionsImport(t *testing.T) {
	root := repoRoot(t)
	imported := rootImports(t, root)
	for _, d := range []string{".", "functions/host", "functions/reactions", "shared/errs"} {
		if !imported[d] {
			t.Fatalf("go list -deps of the root lacks %s: %v", d, imported)
		}
	}
	for _, d := range []string{"internal/emulators", "internal/emulators/emulatortest", "internal/apitest", "shared/topology"} {
		if imported[d] {
			t.Fatalf("the root package imports %s", d)
		}
	}
	files, err := SourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkArchivePackages(zipOf(t, root, files), imported); err != nil {
		t.Error(err)
	}
	for _, f := range files {
		if strings.HasPrefix(f, "shared/topology/") {
			t.Errorf("the archive holds %s", f)
		}
	}

	// Negatives: the check names a package too many and one too few.
	emu, err := filepath.Glob(filepath.Join(root, "internal", "emulators", "*.go"))
	if err != nil || len(emu) == 0 {
		t.Fatalf("internal/emulators: %v, %d files", err, len(emu))
	}
	withTooling := append([]string(nil), files...)
	for _, f := range emu {
		if !strings.HasSuffix(f, "_test.go") {
			rel, _ := filepath.Rel(root, f)
			withTooling = append(withTooling, filepath.ToSlash(rel))
		}
	}
	err = checkArchivePackages(zipOf(t, root, withTooling), imported)
	if err == nil || !strings.Contains(err.Error(), "no function imports: internal/emulators") {
		t.Errorf("archive with internal/emulators: %v, want it named", err)
	}
	var withoutErrs []string
	for _, f := range files {
		if path.Dir(f) != "shared/errs" {
			withoutErrs = append(withoutErrs, f)
		}
	}
	err = checkArchivePackages(zipOf(t, root, withoutErrs), imported)
	if err == nil || !strings.Contains(err.Error(), "missing: shared/errs") {
		t.Errorf("archive without shared/errs: %v, want it named", err)
	}
}

// TestSourceFilesLeavesOutWhatNoFunctionImports: a package added under
// shared/ that nothing imports stays out of the archive, and is in it once
// a function imports it.
func TestSourceFilesLeavesOutWhatNoFunctionImports(t *testing.T) {
	root := copyTree(t, repoRoot(t))
	dir := filepath.Join(root, "shared", "unused")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"unused.go":  "package unused\n\nimport _ \"embed\"\n\n//go:embed data/x.txt\nvar X string\n",
		"data/x.txt": "x\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	has := func(files []string, f string) bool {
		i := sort.SearchStrings(files, f)
		return i < len(files) && files[i] == f
	}
	files, err := SourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if has(files, "shared/unused/unused.go") || has(files, "shared/unused/data/x.txt") {
		t.Errorf("the archive holds shared/unused, which nothing imports")
	}
	edit(t, filepath.Join(root, "functions.go"), "import (", "import (\n\t_ \""+modulePath+"/shared/unused\"\n")
	if files, err = SourceFiles(root); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"shared/unused/unused.go", "shared/unused/data/x.txt"} {
		if !has(files, f) {
			t.Errorf("the archive lacks %s, which the root now imports", f)
		}
	}
	if err := checkArchivePackages(zipOf(t, root, files), rootImports(t, root)); err != nil {
		t.Error(err)
	}
}
