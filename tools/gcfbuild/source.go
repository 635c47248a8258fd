package main

import (
	"archive/zip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// sourceTops are what the functions' source archive holds, from the module
// root: the module files, the root package Cloud Functions builds, and the
// trees its packages come from. cmd/, tools/ and terraform/ stay out.
var sourceTops = []string{"go.mod", "go.sum", "*.go", "functions", "shared"}

// SourceFiles lists the files of the functions' source archive under root,
// slash-separated and sorted. Tests and testdata stay out: they are not
// built, and the buildpack parses every .go file of the root directory,
// tests included, where a second package name (an external test package)
// would fail the build.
func SourceFiles(root string) ([]string, error) {
	var out []string
	for _, top := range sourceTops {
		matches, err := filepath.Glob(filepath.Join(root, top))
		if err != nil {
			return nil, fmt.Errorf("source files: %s: %w", top, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("source files: nothing matches %s in %s", top, root)
		}
		for _, m := range matches {
			err := filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.IsDir() {
					if d.Name() == "testdata" {
						return filepath.SkipDir
					}
					return nil
				}
				if strings.HasSuffix(d.Name(), "_test.go") || !d.Type().IsRegular() {
					return nil
				}
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				out = append(out, filepath.ToSlash(rel))
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
