package check

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"gopkg.in/yaml.v3"
)

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

// routeFunction is the public function whose topology.json route serves
// path: an exact route, or the longest route ending in "/" that prefixes it.
func routeFunction(c *Code, path string) (string, string) {
	best, bestRoute := "", ""
	for _, f := range c.Topology.Functions {
		if f.Kind != "http" || !f.Public {
			continue
		}
		for _, r := range f.Routes {
			if r == path {
				return f.Name, r
			}
			if strings.HasSuffix(r, "/") && strings.HasPrefix(path, r) && len(r) > len(bestRoute) {
				best, bestRoute = f.Name, r
			}
		}
	}
	return best, bestRoute
}

func TestOpenAPIMatchesTopology(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI    string                    `yaml:"openapi"`
		Paths      map[string]map[string]any `yaml:"paths"`
		Components map[string]map[string]any `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi %q: the document describes the load balancer's API as OpenAPI 3", doc.OpenAPI)
	}
	code := loadCode(t)

	covered := map[string]bool{}
	opIDs := map[string]string{}
	paths := make([]string, 0, len(doc.Paths))
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		item := doc.Paths[p]
		if !strings.HasPrefix(p, "/v1/") {
			t.Errorf("path %s is outside /v1", p)
		}
		// Path templates match the routes as the load balancer does: a
		// template segment is a non-empty segment.
		concrete := strings.NewReplacer("{", "", "}", "").Replace(p)
		fn, route := routeFunction(code, concrete)
		if fn == "" {
			t.Errorf("path %s is served by no public function route of topology.json", p)
			continue
		}
		covered[route] = true
		if got, _ := item["x-function"].(string); got != fn {
			t.Errorf("path %s says x-function %q, but topology.json routes it (%s) to %s", p, got, route, fn)
		}
		ops := 0
		for _, m := range httpMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			ops++
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s %s has no operationId", m, p)
			} else if prev, dup := opIDs[id]; dup {
				t.Errorf("operationId %s is used by %s and %s %s", id, prev, m, p)
			}
			opIDs[id] = m + " " + p
			responses, _ := op["responses"].(map[string]any)
			ok2xx := false
			for code := range responses {
				ok2xx = ok2xx || strings.HasPrefix(code, "2")
			}
			if !ok2xx {
				t.Errorf("%s %s has no success response", m, p)
			}
		}
		if ops == 0 {
			t.Errorf("path %s has no operation", p)
		}
	}
	for _, f := range code.Topology.Functions {
		if f.Kind != "http" || !f.Public {
			continue
		}
		for _, r := range f.Routes {
			if !covered[r] {
				t.Errorf("route %s of %s is in topology.json but no path of docs/openapi.yaml uses it", r, f.Name)
			}
		}
	}

	// Every $ref resolves.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					parts := strings.Split(strings.TrimPrefix(s, "#/components/"), "/")
					if len(parts) != 2 || doc.Components[parts[0]][parts[1]] == nil {
						t.Errorf("$ref %s does not resolve", s)
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var raw any
	_ = yaml.Unmarshal(b, &raw)
	walk(raw)
}

// requiredVariables lists the variables without a default in the root at dir.
func requiredVariables(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	p := hclparse.NewParser()
	var req []string
	for _, f := range files {
		file, diags := p.ParseHCLFile(f)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		for _, blk := range file.Body.(*hclsyntax.Body).Blocks {
			if blk.Type == "variable" {
				if _, ok := blk.Body.Attributes["default"]; !ok {
					req = append(req, blk.Labels[0])
				}
			}
		}
	}
	sort.Strings(req)
	return req
}
