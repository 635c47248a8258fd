// Command drills is the home of the fault drills: Go tests that run the whole
// system on a private set of Google Cloud emulators under the mixed load of
// the soak (cmd/soak/workload), break it on purpose — Pub/Sub redelivering
// out of order, an event function's instance dying around its commit, an
// emulator frozen with SIGSTOP, poison messages, deletions racing watches in
// flight — and then check that the pipeline converged by itself: every
// counter exact with nothing pending, every history and listing as accepted,
// a reconciliation that corrects nothing, nothing dead-lettered but poison.
//
//	go test -count=1 -race ./cmd/drills/
//
// The drills start their own emulators (they freeze them, which must not
// freeze the tests of other packages sharing `make test`'s stack). The HTTP
// functions are served by the test process as the local stack serves them;
// the event functions by functions-framework-go, in the test process, or in
// a child process for the drill that kills their instance. The program
// itself only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "the drills are tests: go test -count=1 -race ./cmd/drills/")
	os.Exit(2)
}
