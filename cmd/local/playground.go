package main

import (
	"embed"
	"net/http"
	"path"
)

// The playground is part of the local stack only: cmd/local is not in the
// functions' source archive, so no deployed function serves it. Beside the
// page, the compiled TypeScript client (clients/typescript/dist/client.js)
// and openapi-fetch, copied by make generate (make test-contract checks the
// copies).
//
//go:embed playground/index.html playground/client.js playground/openapi-fetch.js
var playgroundFiles embed.FS

// playgroundHandler serves the playground page at / and its scripts under
// /playground/. The page calls the API of its own origin, or the one named
// by ?api= when served elsewhere.
func playgroundHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, contentType := "playground/index.html", "text/html; charset=utf-8"
		if r.URL.Path != "/" {
			name, contentType = "playground/"+path.Base(r.URL.Path), "text/javascript; charset=utf-8"
			if r.URL.Path != "/"+name || path.Ext(name) != ".js" {
				http.NotFound(w, r)
				return
			}
		}
		b, err := playgroundFiles.ReadFile(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(b)
	})
}
