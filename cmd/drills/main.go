// Command drills is the home of the fault drills: Go tests that run the whole
// system on a private set of Google Cloud emulators, break it on purpose
// (Pub/Sub redelivering out of order, an event function dying around its
// commit, an emulator frozen with SIGSTOP, poison messages) and then check
// that every counter is exact, reconciliation finds nothing to correct and
// no accepted history row is lost.
//
//	go test -count=1 -race ./cmd/drills/
//
// The drills start their own emulators (they freeze them, which must not
// freeze the tests of other packages sharing `make test`'s stack), serve the
// HTTP functions in the test process and the event functions in a child
// process behind functions-framework-go, as separate instances run in the
// cloud. The program itself only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "the drills are tests: go test -count=1 -race ./cmd/drills/")
	os.Exit(2)
}
