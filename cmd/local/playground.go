package main

import (
	_ "embed"
	"net/http"
)

// The playground is part of the local stack only: cmd/local is not in the
// functions' source archive, so no deployed function serves it.
//
//go:embed playground/index.html
var playgroundPage []byte

// playgroundHandler serves the playground page. The page calls the API of
// its own origin, or the one named by ?api= when served elsewhere.
func playgroundHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(playgroundPage)
	})
}
