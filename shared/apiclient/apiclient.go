// Package apiclient is the Go client of the public API, generated from
// docs/openapi.yaml by oapi-codegen (apiclient.gen.go; make generate), for
// Go callers such as the soak workload. New adds the caller's ID token to
// every request.
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml -o apiclient.gen.go ../../docs/openapi.yaml

import (
	"context"
	"net/http"
)

// New is a client of the API at base (such as http://localhost:8080) that
// sends requests with hc and, when idToken answers one, the caller's ID
// token as a bearer token.
func New(base string, hc *http.Client, idToken func() string) (*ClientWithResponses, error) {
	return NewClientWithResponses(base, WithHTTPClient(hc), WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		if idToken == nil {
			return nil
		}
		if tok := idToken(); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		return nil
	}))
}
