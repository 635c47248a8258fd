package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/emulators"
	"github.com/videngage/engagement/shared/topology"
)

// repoRoot is the module root, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// archive writes the functions' source archive of root, as cloudbuild.yaml's
// archive step does, and returns its path.
func archive(t *testing.T, root string) string {
	t.Helper()
	files, err := SourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	return zipOf(t, root, files)
}

// copyTree copies the archive's files of the repository to a new root, for
// the broken copies.
func copyTree(t *testing.T, root string) string {
	t.Helper()
	files, err := SourceFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func layout(t *testing.T, zipPath string) *App {
	t.Helper()
	app, err := Layout(t.Context(), zipPath, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return app
}

// TestEveryEntryPointBuildsAndServes is the deployability check: the
// archive of this repository, laid out and built as Cloud Functions' Go
// buildpack does, serves every function Terraform deploys under its entry
// point, and refuses an unknown one.
func TestEveryEntryPointBuildsAndServes(t *testing.T) {
	top, err := topology.Load()
	if err != nil {
		t.Fatal(err)
	}
	app := layout(t, archive(t, repoRoot(t)))
	t.Logf("buildpack commit %s; root package %q, function package %s, framework %s",
		BuildpackCommit, app.PackageName, app.Package, app.FrameworkVersion)

	// The declarative main does not depend on the entry point (the framework
	// reads FUNCTION_TARGET when it starts), so one binary serves every
	// target; each target's main is checked to be that same file.
	bin := filepath.Join(t.TempDir(), "app")
	var main []byte
	for i, fn := range top.Functions {
		tmpl, err := app.WriteMain(fn.Name)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl != TemplateDeclarative {
			t.Fatalf("the buildpack would generate the %s main, which calls %s.%s: the root package must import %s",
				tmpl, app.Package, fn.Name, frameworkFuncPkg)
		}
		b, err := os.ReadFile(filepath.Join(app.Source, filepath.FromSlash(appPackageDir), "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			main = b
			start := time.Now()
			if err := app.Build(t.Context(), bin); err != nil {
				t.Fatalf("build: %v", err)
			}
			t.Logf("built %s in %v", appPackageDir, time.Since(start).Round(time.Millisecond))
		} else if !bytes.Equal(b, main) {
			t.Fatalf("the main for %s differs from the one built", fn.Name)
		}
	}

	for _, fn := range top.Functions {
		t.Run(fn.Name, func(t *testing.T) {
			t.Parallel()
			fi := start(t, bin, fn.Name)
			if err := fi.waitServing(t.Context()); err != nil {
				t.Fatalf("%v\noutput:\n%s", err, fi.output())
			}
			checkServes(t, fi, top, fn)
		})
	}
	t.Run("unknown target", func(t *testing.T) {
		t.Parallel()
		fi := start(t, bin, "NoSuchFunction")
		err := fi.waitServing(t.Context())
		if err == nil {
			t.Fatal("the binary serves an unknown target")
		}
		// The framework's refusal, as the root package's JSON log handler
		// writes it.
		out := fi.output()
		if !strings.Contains(out, "no matching function found with name") || !strings.Contains(out, "NoSuchFunction") {
			t.Fatalf("%v; output does not name the unknown target:\n%s", err, out)
		}
		t.Logf("refused: %v: %s", err, strings.TrimSpace(out))
	})
}

// checkServes sends fn a request of its kind and checks that fn's own code
// answered: with no Google credentials it cannot build its clients, so it
// answers 503 in the API's error shape (for an event function, a failure
// Pub/Sub redelivers) and logs its client build's error.
func checkServes(t *testing.T, fi *instance, top *topology.Topology, fn topology.Function) {
	var req *http.Request
	var err error
	switch fn.Kind {
	case topology.KindHTTP, topology.KindScheduled:
		method := http.MethodGet
		if fn.Kind == topology.KindScheduled {
			method = http.MethodPost
		}
		req, err = http.NewRequestWithContext(t.Context(), method, fi.url+fn.Routes[0], strings.NewReader("{}"))
	case topology.KindEvent:
		req, err = pushRequest(t, fi.url, top, fn.Name)
	default:
		t.Fatalf("unknown kind %q", fn.Kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\noutput:\n%s", req.Method, req.URL.Path, err, fi.output())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(body))

	if fn.Kind == topology.KindEvent {
		line, ok := fi.waitOutput(t.Context(), "host.New")
		if !ok {
			t.Errorf("the function's client build error is not in its output:\n%s", fi.output())
		}
		t.Logf("output: %s", line)
	}
	var e struct {
		Error struct {
			Code   int    `json:"code"`
			Status string `json:"status"`
		} `json:"error"`
	}
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil ||
		e.Error.Code != http.StatusServiceUnavailable || e.Error.Status != "UNAVAILABLE" {
		t.Errorf("answer %d %s, want 503 in the API's error shape\noutput:\n%s", resp.StatusCode, body, fi.output())
	}
}

// pushRequest is a Pub/Sub push delivery to the event function name, from
// the first subscription topology.json gives it, at the function's URL as
// the subscription's push endpoint names it.
func pushRequest(t *testing.T, base string, top *topology.Topology, name string) (*http.Request, error) {
	for _, topic := range top.PubSub.Topics {
		for _, s := range topic.Subscriptions {
			if s.Function != name {
				continue
			}
			body, err := json.Marshal(map[string]any{
				"message": map[string]any{
					"data":        base64.StdEncoding.EncodeToString([]byte(`{}`)),
					"messageId":   "1",
					"publishTime": time.Now().UTC().Format(time.RFC3339Nano),
				},
				"subscription": "projects/gcfbuild-check/subscriptions/" + s.Name,
			})
			if err != nil {
				return nil, err
			}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/", bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Content-Type", "application/json")
			return req, nil
		}
	}
	return nil, fmt.Errorf("no subscription delivers to %s", name)
}

// instance is a started function binary.
type instance struct {
	url  string
	port int
	exit chan error

	mu  sync.Mutex
	out bytes.Buffer
}

func (fi *instance) Write(p []byte) (int, error) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.out.Write(p)
}

func (fi *instance) output() string {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	return fi.out.String()
}

// start runs bin as Cloud Functions would for target, on a free port, with
// no Google credentials and nothing of the test's environment (emulator
// hosts included).
func start(t *testing.T, bin, target string) *instance {
	t.Helper()
	port, err := emulators.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	closed, err := emulators.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	fi := &instance{url: "http://127.0.0.1:" + strconv.Itoa(port), port: port, exit: make(chan error, 1)}
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"PORT=" + strconv.Itoa(port),
		"FUNCTION_TARGET=" + target,
		"K_SERVICE=" + strings.ToLower(target),
		"GOOGLE_CLOUD_PROJECT=gcfbuild-check",
		// Application default credentials fail at once, without waiting on
		// a metadata server.
		"GOOGLE_APPLICATION_CREDENTIALS=" + filepath.Join(t.TempDir(), "absent.json"),
		// Nothing listens there: no request leaves the machine.
		"AUTH_JWKS_URL=https://127.0.0.1:" + strconv.Itoa(closed) + "/jwks",
		// A deployed instance refuses the local defaults (config.CheckDeployed).
		"AUTH_AUDIENCE=gcfbuild-check",
		"PAGE_TOKEN_SECRET=gcfbuild-check-page-token-secret",
		"VIEWER_HASH_KEY=gcfbuild-check-viewer-hash-key",
	}
	cmd.Stdout, cmd.Stderr = fi, fi
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { fi.exit <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-fi.exit:
		default:
			_ = cmd.Process.Kill()
			<-fi.exit
		}
	})
	return fi
}

// waitServing waits until the instance accepts connections, or fails when it
// exits first.
func (fi *instance) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		select {
		case err := <-fi.exit:
			fi.exit <- err
			return fmt.Errorf("exited before serving: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not serving: %w", ctx.Err())
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(fi.port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-fi.exit:
			fi.exit <- err
			return fmt.Errorf("exited before serving: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitOutput waits up to 10 seconds for a line of output containing sub.
func (fi *instance) waitOutput(ctx context.Context, sub string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		for _, l := range strings.Split(fi.output(), "\n") {
			if strings.Contains(l, sub) {
				return l, true
			}
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestRootWithoutFrameworkImportFails: the same source with a root package
// that does not import functions-framework-go/functions itself gets the
// v1.1 main, which calls engagement.<EntryPoint>, and no entry point builds.
func TestRootWithoutFrameworkImportFails(t *testing.T) {
	top, err := topology.Load()
	if err != nil {
		t.Fatal(err)
	}
	root := copyTree(t, repoRoot(t))
	edit(t, filepath.Join(root, "functions.go"), `_ "`+frameworkFuncPkg+`"`, "")
	app := layout(t, archive(t, root))
	for _, fn := range top.Functions {
		tmpl, err := app.WriteMain(fn.Name)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl != TemplateV1_1 {
			t.Fatalf("%s: template %s, want %s", fn.Name, tmpl, TemplateV1_1)
		}
		err = app.Build(t.Context(), filepath.Join(t.TempDir(), "app"))
		want := "undefined: userfunction." + fn.Name
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: build error %v, want %q", fn.Name, err, want)
		}
		t.Logf("%s: build fails: %s", fn.Name, want)
	}
}

// TestGoLineNewerThanRuntimeFails: a go.mod asking for a newer Go than the
// runtime's is refused before any build.
func TestGoLineNewerThanRuntimeFails(t *testing.T) {
	root := t.TempDir()
	newer := "1.26.99"
	for _, f := range []struct{ name, text string }{
		{"go.mod", "module example.com/fn\n\ngo " + newer + "\n"},
		{"fn.go", "package fn\n"},
	} {
		if err := os.WriteFile(filepath.Join(root, f.name), []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// go mod edit, which reads the line, accepts any version: the refusal
	// is the check's, not this machine's go command's.
	err := checkGoLine(t.Context(), root)
	if err == nil || !strings.Contains(err.Error(), "newer than the go126 runtime's "+RuntimeGo) {
		t.Fatalf("go %s: %v, want refused", newer, err)
	}
	if err := checkGoLine(t.Context(), repoRoot(t)); err != nil {
		t.Errorf("this module: %v", err)
	}
}

func TestTemplateChoice(t *testing.T) {
	for _, c := range []struct {
		imports []string
		version string
		want    string
	}{
		{[]string{frameworkFuncPkg}, "v1.9.2", TemplateDeclarative},
		{[]string{frameworkFuncPkg}, "v1.0.0", TemplateDeclarative},
		{[]string{"github.com/videngage/engagement/functions/history"}, "v1.9.2", TemplateV1_1},
		{nil, "v1.1.0", TemplateV1_1},
		{nil, "v1.1.0-rc.1", TemplateV0},
		{nil, "v1.0.9", TemplateV0},
		{nil, "v0.9.0", TemplateV0},
	} {
		a := &App{Imports: map[string]struct{}{}, FrameworkVersion: c.version}
		for _, im := range c.imports {
			a.Imports[im] = struct{}{}
		}
		got, err := a.Template()
		if err != nil || got != c.want {
			t.Errorf("imports %v, framework %s: %s, %v; want %s", c.imports, c.version, got, err, c.want)
		}
	}
}

// TestRootPackageWithTwoNamesFails: the buildpack parses the root
// directory's test files too; an external test package there fails the
// build, which is one reason the archive leaves tests out.
func TestRootPackageWithTwoNamesFails(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"fn.go":      "package fn\n",
		"fn_test.go": "package fn_test\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := rootPackage(dir); err == nil || !strings.Contains(err.Error(), "several packages") {
		t.Fatalf("rootPackage: %v, want several packages", err)
	}
	files, err := SourceFiles(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.Contains("/"+f, "/testdata/") {
			t.Errorf("the archive holds %s", f)
		}
	}
}
