package main

// What Cloud Functions' Go buildpack does with the source, as read in
// GoogleCloudPlatform/buildpacks at BuildpackCommit: cmd/go/functions_framework
// (lib/lib.go, converter/get_package, the main templates), cmd/go/build and
// pkg/golang. In order:
//
//  1. The uploaded source is moved into serverless_function_source_code/
//     under the application root; that directory is the module root.
//  2. The root package's name and its own imports are read from every .go
//     file of that directory (go/parser, imports only; tests included, build
//     constraints ignored); more than one package name fails the build.
//  3. The function's package is the module path (go list -m), which must
//     have a dot in its first element; the framework's version is go.mod's
//     requirement of functions-framework-go (injected when absent).
//  4. The main package is written to functions.local/app/main.go inside the
//     module. Its template: "declarative" when the root package itself
//     imports functions-framework-go/functions (a blank import of the
//     function's package, then funcframework.Start, which serves the
//     function registered under FUNCTION_TARGET); otherwise "v1.1" (framework
//     v1.1.0 or later) or "v0", both of which call <package>.<FUNCTION_TARGET>.
//  5. go mod tidy, then go build of that directory from the module root,
//     with the runtime's Go release.
//
// Step 5's go mod tidy needs the network (it resolves the test dependencies
// of every dependency); offline the build runs against go.mod and go.sum as
// they are, which tidy could only trim.

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// BuildpackCommit is the commit of GoogleCloudPlatform/buildpacks this file
// follows.
const BuildpackCommit = "21f28de8c499445ef1098016bfce35b16415e4b1"

// RuntimeGo is the Go release of Cloud Functions' go126 runtime at
// BuildpackCommit (builders/go/acceptance/runtime.bzl, gcf_runtimes).
const RuntimeGo = "go1.26.7"

const (
	sourceDir        = "serverless_function_source_code"
	appPackageDir    = "functions.local/app"
	frameworkModule  = "github.com/GoogleCloudPlatform/functions-framework-go"
	frameworkFuncPkg = frameworkModule + "/functions"
)

// Templates the buildpack chooses from.
const (
	TemplateDeclarative = "declarative"
	TemplateV1_1        = "v1.1"
	TemplateV0          = "v0"
)

// App is a function's source laid out as the buildpack lays it out.
type App struct {
	Source           string              // the module root: <app root>/serverless_function_source_code
	PackageName      string              // the root package's name
	Imports          map[string]struct{} // the root package's own imports
	Package          string              // import path of the function's package
	FrameworkVersion string              // go.mod's requirement of functions-framework-go
}

// Layout unpacks the archive at zipPath under appRoot as the buildpack does
// and reads what it reads.
func Layout(ctx context.Context, zipPath, appRoot string) (*App, error) {
	a := &App{Source: filepath.Join(appRoot, sourceDir)}
	if err := Unzip(zipPath, a.Source); err != nil {
		return nil, err
	}
	if err := checkGoLine(ctx, a.Source); err != nil {
		return nil, err
	}
	name, imports, err := rootPackage(a.Source)
	if err != nil {
		return nil, err
	}
	a.PackageName, a.Imports = name, imports
	mod, err := goCmd(ctx, a.Source, "list", "-m")
	if err != nil {
		return nil, err
	}
	if first, _, _ := strings.Cut(mod, "/"); !strings.Contains(first, ".") {
		return nil, fmt.Errorf("module path %q has no dot in its first element", mod)
	}
	a.Package = mod
	// A directory named after the package at the application root would
	// make it a subpackage; after step 1 only the source directory is there.
	if fi, err := os.Stat(filepath.Join(appRoot, name)); err == nil && fi.IsDir() {
		a.Package = mod + "/" + name
	}
	v, err := goCmd(ctx, a.Source, "list", "-m", "-f", "{{.Version}}", frameworkModule)
	if err != nil {
		// The buildpack would inject the framework; that needs the network.
		return nil, fmt.Errorf("go.mod does not require %s: %w", frameworkModule, err)
	}
	a.FrameworkVersion = v
	return a, nil
}

// checkGoLine fails when go.mod asks for a newer Go than the runtime's: the
// go command then refuses to build, or fetches another toolchain when
// GOTOOLCHAIN allows it (the buildpack leaves GOTOOLCHAIN alone).
func checkGoLine(ctx context.Context, dir string) error {
	out, err := goCmd(ctx, dir, "mod", "edit", "-print")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || (f[0] != "go" && f[0] != "toolchain") {
			continue
		}
		v := f[1]
		if f[0] == "go" {
			v = "go" + v
		}
		if !version.IsValid(v) {
			return fmt.Errorf("go.mod: %s: not a Go version", line)
		}
		if version.Compare(v, RuntimeGo) > 0 {
			return fmt.Errorf("go.mod: %q is newer than the go126 runtime's %s", line, RuntimeGo)
		}
	}
	return nil
}

// rootPackage reads the package name and imports of the .go files directly
// in dir, as the buildpack's get_package converter does.
func rootPackage(dir string) (string, map[string]struct{}, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("root package: %w", err)
	}
	fset := token.NewFileSet()
	names := map[string]bool{}
	imports := map[string]struct{}{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ImportsOnly)
		if err != nil {
			return "", nil, fmt.Errorf("root package: %w", err)
		}
		names[f.Name.Name] = true
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return "", nil, fmt.Errorf("root package: %s: %w", e.Name(), err)
			}
			imports[p] = struct{}{}
		}
	}
	switch len(names) {
	case 0:
		return "", nil, fmt.Errorf("root package: no Go package in %s", dir)
	case 1:
		for n := range names {
			return n, imports, nil
		}
	}
	all := make([]string, 0, len(names))
	for n := range names {
		all = append(all, n)
	}
	sort.Strings(all)
	return "", nil, fmt.Errorf("root package: several packages in %s: %s", dir, strings.Join(all, ", "))
}

// Template is the buildpack's choice of main for the app.
func (a *App) Template() (string, error) {
	if _, ok := a.Imports[frameworkFuncPkg]; ok {
		return TemplateDeclarative, nil
	}
	atLeast, err := versionAtLeast(a.FrameworkVersion, 1, 1, 0)
	if err != nil {
		return "", err
	}
	if atLeast {
		return TemplateV1_1, nil
	}
	return TemplateV0, nil
}

// versionAtLeast compares a module version vX.Y.Z[-pre][+build] with
// major.minor.patch; a pre-release of that version counts as older.
func versionAtLeast(v string, major, minor, patch int) (bool, error) {
	core, pre, _ := strings.Cut(strings.TrimPrefix(v, "v"), "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return false, fmt.Errorf("framework version %q is not vX.Y.Z", v)
	}
	var got [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false, fmt.Errorf("framework version %q: %w", v, err)
		}
		got[i] = n
	}
	for i, w := range [3]int{major, minor, patch} {
		if got[i] != w {
			return got[i] > w, nil
		}
	}
	return pre == "", nil
}

// The mains, written for this check from the buildpack's description of
// each: the declarative one imports the function's package for its init
// registrations and starts the framework, which picks FUNCTION_TARGET; the
// others call <package>.<Target> and register what they get at "/".
var mains = map[string]*template.Template{
	TemplateDeclarative: template.Must(template.New(TemplateDeclarative).Parse(`package main

import (
	"log"
	"net/http"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	_ "{{.Package}}"
)

func main() {
	http.HandleFunc("/robots.txt", http.NotFound)
	http.HandleFunc("/favicon.ico", http.NotFound)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.Start(port); err != nil {
		log.Fatalf("Function failed to start: %v", err)
	}
}
`)),
	TemplateV1_1: template.Must(template.New(TemplateV1_1).Parse(`package main

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	userfunction "{{.Package}}"
)

func main() {
	ctx := context.Background()
	var err error
	switch fn := any(userfunction.{{.Target}}).(type) {
	case func(http.ResponseWriter, *http.Request):
		err = funcframework.RegisterHTTPFunctionContext(ctx, "/", fn)
	case func(context.Context, cloudevents.Event) error:
		err = funcframework.RegisterCloudEventFunctionContext(ctx, "/", fn)
	default:
		err = funcframework.RegisterEventFunctionContext(ctx, "/", fn)
	}
	if err != nil {
		log.Fatalf("Function failed to register: %v", err)
	}
	http.HandleFunc("/robots.txt", http.NotFound)
	http.HandleFunc("/favicon.ico", http.NotFound)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.Start(port); err != nil {
		log.Fatalf("Function failed to start: %v", err)
	}
}
`)),
	TemplateV0: template.Must(template.New(TemplateV0).Parse(`package main

import (
	"log"
	"net/http"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	userfunction "{{.Package}}"
)

func main() {
	if fn, ok := any(userfunction.{{.Target}}).(func(http.ResponseWriter, *http.Request)); ok {
		funcframework.RegisterHTTPFunction("/", fn)
	} else {
		funcframework.RegisterEventFunction("/", userfunction.{{.Target}})
	}
	http.HandleFunc("/robots.txt", http.NotFound)
	http.HandleFunc("/favicon.ico", http.NotFound)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := funcframework.Start(port); err != nil {
		log.Fatalf("Function failed to start: %v", err)
	}
}
`)),
}

// WriteMain writes the main package the buildpack generates for target (the
// deployment's entry point, FUNCTION_TARGET at build time) and returns the
// template it chose.
func (a *App) WriteMain(target string) (string, error) {
	name, err := a.Template()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := mains[name].Execute(&b, struct{ Package, Target string }{a.Package, target}); err != nil {
		return "", fmt.Errorf("main for %s: %w", target, err)
	}
	dir := filepath.Join(a.Source, filepath.FromSlash(appPackageDir))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	return name, nil
}

// Build builds the main package to out, from the module root, with this
// machine's Go restricted to what the runtime would do offline: no other
// toolchain, no module downloads, go.mod and go.sum as they are. -trimpath
// (the buildpack has none) changes nothing that compiles; it lets builds
// from different temporary directories share the build cache.
func (a *App) Build(ctx context.Context, out string) error {
	_, err := goCmd(ctx, a.Source, "build", "-trimpath", "-o", out, filepath.Join(a.Source, filepath.FromSlash(appPackageDir)))
	return err
}

func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOPROXY=off", "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
