// Package engagement is the module root that Cloud Functions deploys: it
// imports every function package, each of which registers itself with
// functions-framework-go, and the deployment picks one with --entry-point.
//
// The Go buildpack of Cloud Functions reads this package's own imports (not
// its dependencies') to choose the main it generates: only when this package
// imports functions-framework-go's functions package does it generate the
// main that starts the framework and serves the function registered under
// the entry point's name; otherwise it generates one that calls
// engagement.<EntryPoint>, which does not exist here, and every build fails.
// tools/gcfbuild checks this in make test.
package engagement

import (
	"context"
	"log/slog"
	"os"

	// Imported for the buildpack's choice of main (see above); the function
	// packages register through it.
	_ "github.com/GoogleCloudPlatform/functions-framework-go/functions"

	_ "github.com/videngage/engagement/functions/account"
	_ "github.com/videngage/engagement/functions/applycounters"
	_ "github.com/videngage/engagement/functions/applyhistory"
	_ "github.com/videngage/engagement/functions/applyviews"
	_ "github.com/videngage/engagement/functions/comments"
	_ "github.com/videngage/engagement/functions/counts"
	_ "github.com/videngage/engagement/functions/detectmanipulation"
	_ "github.com/videngage/engagement/functions/eraseaccount"
	_ "github.com/videngage/engagement/functions/expirehistory"
	_ "github.com/videngage/engagement/functions/history"
	"github.com/videngage/engagement/functions/host"
	_ "github.com/videngage/engagement/functions/moderation"
	_ "github.com/videngage/engagement/functions/prepareexport"
	_ "github.com/videngage/engagement/functions/reactions"
	_ "github.com/videngage/engagement/functions/reconcile"
	_ "github.com/videngage/engagement/functions/resumeerasures"
	_ "github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/httpx"
)

func init() {
	// Cloud Logging reads JSON lines with severity and message from stdout.
	slog.SetDefault(slog.New(httpx.NewLogHandler(os.Stdout, slog.LevelInfo, os.Getenv("GOOGLE_CLOUD_PROJECT"))))
	// A deployed instance with a local default (audience, page-token
	// secret), plain-HTTP keys, "*" CORS or the rate limits off refuses to
	// start: every function package has registered by now.
	if err := host.CheckDeployed(context.Background(), os.LookupEnv); err != nil {
		slog.Error("refusing to start: unsafe configuration for a deployed instance", "function", os.Getenv("FUNCTION_TARGET"), "error", err.Error())
		os.Exit(1)
	}
}
