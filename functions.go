// Package engagement is the module root that Cloud Functions deploys: it
// imports every function package, each of which registers itself with
// functions-framework-go, and the deployment picks one with --entry-point.
package engagement

import (
	"log/slog"
	"os"

	_ "github.com/videngage/engagement/functions/applycounters"
	_ "github.com/videngage/engagement/functions/applyhistory"
	_ "github.com/videngage/engagement/functions/applyviews"
	_ "github.com/videngage/engagement/functions/comments"
	_ "github.com/videngage/engagement/functions/counts"
	_ "github.com/videngage/engagement/functions/history"
	_ "github.com/videngage/engagement/functions/reactions"
	_ "github.com/videngage/engagement/functions/reconcile"
	_ "github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/httpx"
)

func init() {
	// Cloud Logging reads JSON lines with severity and message from stdout.
	slog.SetDefault(slog.New(httpx.NewLogHandler(os.Stdout, slog.LevelInfo, os.Getenv("GOOGLE_CLOUD_PROJECT"))))
}
