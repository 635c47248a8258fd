package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// sourceTops are the trees the functions' source archive is cut from, from
// the module root: the module files, the root package Cloud Functions builds,
// and the trees its packages come from. cmd/, internal/, tools/ and
// terraform/ stay out.
var sourceTops = []string{"go.mod", "go.sum", "*.go", "functions", "shared"}

// deployTarget is the platform of the go126 runtime's builds: the packages
// the archive holds are the ones its build imports.
var deployTarget = []string{"GOOS=linux", "GOARCH=amd64"}

// SourceFiles lists the files of the functions' source archive under root,
// slash-separated and sorted: of sourceTops, the files of the module's
// packages that the root package imports, directly or not (DeployedDirs),
// and of the directories beneath them that are no package (embedded files).
// A package of those trees that no function imports (shared/topology, read
// by Terraform and the tools) stays out. Tests and testdata stay out too:
// they are not built, and the buildpack parses every .go file of the root
// directory, tests included, where a second package name (an external test
// package) would fail the build.
func SourceFiles(root string) ([]string, error) {
	deployed, err := DeployedDirs(root)
	if err != nil {
		return nil, fmt.Errorf("source files: %w", err)
	}
	var out []string
	for _, top := range sourceTops {
		matches, err := filepath.Glob(filepath.Join(root, top))
		if err != nil {
			return nil, fmt.Errorf("source files: %s: %w", top, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("source files: nothing matches %s in %s", top, root)
		}
		// keep says, per directory, whether its files ship: a package
		// directory's when the root imports it, any other's as its parent's.
		keep := map[string]bool{".": true}
		for _, m := range matches {
			err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				rel = filepath.ToSlash(rel)
				if d.IsDir() {
					if d.Name() == "testdata" {
						return filepath.SkipDir
					}
					pkg, err := isPackageDir(p)
					if err != nil {
						return err
					}
					if pkg {
						keep[rel] = deployed[rel]
					} else {
						keep[rel] = keep[path.Dir(rel)]
					}
					return nil
				}
				if strings.HasSuffix(d.Name(), "_test.go") || !d.Type().IsRegular() || !keep[path.Dir(rel)] {
					return nil
				}
				out = append(out, rel)
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("source files: %w", err)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// isPackageDir says whether dir holds Go source other than tests.
func isPackageDir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			return true, nil
		}
	}
	return false, nil
}

// DeployedDirs are the directories, relative to root and slash-separated
// ("." for the root), of the module's packages that the root package
// imports, directly or not, tests aside, as the runtime's build sees them.
func DeployedDirs(root string) (map[string]bool, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), deployTarget...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	for _, dir := range strings.Fields(string(b)) {
		rel, err := filepath.Rel(abs, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("go list -deps: %s is outside the module root %s", dir, abs)
		}
		dirs[filepath.ToSlash(rel)] = true
	}
	if !dirs["."] {
		return nil, fmt.Errorf("go list -deps: the root package of %s is not among its own deps", abs)
	}
	return dirs, nil
}

// zipTime is every entry's modification time: the same source gives the
// same archive, byte for byte, so an unchanged source hashes the same.
var zipTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// WriteZip writes the archive of files (as SourceFiles lists them) under root.
func WriteZip(w io.Writer, root string, files []string) error {
	zw := zip.NewWriter(w)
	for _, name := range files {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: zipTime}
		h.SetMode(0o644)
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return fmt.Errorf("zip %s: %w", name, err)
		}
		f, err := os.Open(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return fmt.Errorf("zip: %w", err)
		}
		_, err = io.Copy(fw, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("zip %s: %w", name, err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("zip: %w", err)
	}
	return nil
}

// Unzip extracts the archive at zipPath into dir, as Cloud Functions unpacks
// the uploaded source.
func Unzip(zipPath, dir string) error {
	zr, err := zip.OpenReader(zipPath)
	if err != nil {
		return fmt.Errorf("unzip: %w", err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		name := path.Clean(f.Name)
		if !fs.ValidPath(name) {
			return fmt.Errorf("unzip: unsafe entry %q", f.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("unzip: %w", err)
		}
		if err := extract(f, dst); err != nil {
			return fmt.Errorf("unzip %s: %w", f.Name, err)
		}
	}
	return nil
}

func extract(f *zip.File, dst string) error {
	r, err := f.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}
