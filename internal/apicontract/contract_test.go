package apicontract

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func load(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestExamplesMatchSchemas validates every example of the document (media
// types, parameters, headers, schemas) against its schema, formats and
// patterns included: a mock serves them and generated docs show them.
func TestExamplesMatchSchemas(t *testing.T) {
	doc := load(t)
	err := doc.Validate(context.Background(),
		openapi3.EnableExamplesValidation(),
		openapi3.EnableSchemaFormatValidation(),
		openapi3.EnableSchemaPatternValidation(),
		openapi3.EnableSchemaDefaultsValidation())
	if err != nil {
		t.Fatal(err)
	}
}

type operation struct {
	method, path string
	op           *openapi3.Operation
}

func operations(doc *openapi3.T) []operation {
	var ops []operation
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			ops = append(ops, operation{method, path, op})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].op.OperationID < ops[j].op.OperationID })
	return ops
}

func hasExample(mt *openapi3.MediaType) bool {
	return mt.Example != nil || len(mt.Examples) > 0 || (mt.Schema != nil && mt.Schema.Value.Example != nil)
}

// TestEveryOperationHasExamples: every request body and every answer with
// a body or headers has an example (a mock would otherwise invent
// "string"), and every operation and tag is described.
func TestEveryOperationHasExamples(t *testing.T) {
	doc := load(t)
	for _, tag := range doc.Tags {
		if strings.TrimSpace(tag.Description) == "" {
			t.Errorf("tag %s has no description", tag.Name)
		}
	}
	for _, o := range operations(doc) {
		name := o.op.OperationID
		if strings.TrimSpace(o.op.Description) == "" {
			t.Errorf("%s: no description", name)
		}
		if rb := o.op.RequestBody; rb != nil {
			for ct, mt := range rb.Value.Content {
				if !hasExample(mt) {
					t.Errorf("%s: request %s has no example", name, ct)
				}
			}
		}
		for status, ref := range o.op.Responses.Map() {
			r := ref.Value
			for ct, mt := range r.Content {
				if !hasExample(mt) {
					t.Errorf("%s: %s %s has no example", name, status, ct)
				}
			}
			for h, href := range r.Headers {
				hv := href.Value
				if hv.Example == nil && len(hv.Examples) == 0 && hv.Schema.Value.Example == nil {
					t.Errorf("%s: %s header %s has no example", name, status, h)
				}
			}
		}
	}
}

// TestStatusesDeclared: the answers every endpoint can give are declared
// with their headers: a default error, 405 with Allow, 429 and 503 with
// Retry-After, 500; a 412 carries the current ETag.
func TestStatusesDeclared(t *testing.T) {
	doc := load(t)
	for _, o := range operations(doc) {
		name := o.op.OperationID
		rs := o.op.Responses
		if rs.Default() == nil {
			t.Errorf("%s: no default answer", name)
		}
		for status, header := range map[string]string{"405": "Allow", "429": "Retry-After", "503": "Retry-After", "412": "ETag", "500": ""} {
			r := rs.Value(status)
			if r == nil {
				if status != "412" {
					t.Errorf("%s: %s not declared", name, status)
				}
				continue
			}
			if header == "" {
				continue
			}
			if h := r.Value.Headers[header]; h == nil || !h.Value.Required {
				t.Errorf("%s: %s does not declare the required header %s", name, status, header)
			}
		}
		if slices.Contains([]string{"POST", "PUT", "DELETE", "PATCH"}, o.method) && rs.Value("429") == nil {
			t.Errorf("%s: a write without 429", name)
		}
	}
}
