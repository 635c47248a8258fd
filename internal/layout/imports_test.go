package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/videngage/engagement"

// under says whether pkg is dir or below it (dir relative to the module).
func under(pkg, dir string) bool {
	p := module + "/" + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// functionPackage is the function a package under functions/ belongs to, or
// "" for one outside functions/ and for the host the functions stand on.
func functionPackage(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, module+"/functions/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	if name == "host" {
		return ""
	}
	return name
}

// storeDomain is the domain whose storage pkg is (shared/<domain> for
// shared/<domain>/<name>store and for the packages under
// shared/<domain>/internal/, the schema and wiring its stores share), or ""
// for a package that is not a store.
func storeDomain(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, module+"/shared/")
	if !ok {
		return ""
	}
	dir, last, ok := strings.Cut(rest, "/")
	if ok && strings.HasPrefix(last, "internal/") {
		return dir
	}
	if !ok || strings.Contains(last, "/") || !strings.HasSuffix(last, "store") || last == "store" {
		return ""
	}
	return dir
}

// storeImports are the edges from one domain's store to another's that the
// layout allows, and why: each is a read or write that must share the
// importing store's transaction or row.
var storeImports = map[[2]string]string{
	{"comment/commentstore", "counter/outboxstore"}:        "a comment and its counter deltas (the outbox) commit in one transaction",
	{"reaction/reactionstore", "counter/outboxstore"}:      "a reaction and its counter deltas (the outbox) commit in one transaction",
	{"comment/commentstore", "counter/reconcilestore"}:     "the comments' tallies are a source of truth reconciliation reads in its transaction (Source)",
	{"reaction/reactionstore", "counter/reconcilestore"}:   "the reactions' tallies are a source reconciliation audits and repairs in its transaction (Auditor), and a flag change marks the counters it moves for the hourly run in its own (MarkTruthMoved)",
	{"comment/commentstore", "account/accountstore"}:       "a write checks in its transaction that the account is not being erased",
	{"reaction/reactionstore", "account/accountstore"}:     "a write checks in its transaction that the account is not being erased",
	{"comment/commentstore", "moderation/moderationstore"}: "a moderator's delete or spam mark passes the gate and is audited (Gate, Record) in the transaction that removes the comments and their counts",
	{"views/claimstore", "history/historystore"}:           "a view's claim is a cell of the user's watch_latest row, history's table",
}

// violations lists the edges of graph (package → the packages it imports,
// tests left out) that the rules forbid: imports point from cmd/ and the root
// to functions/ to shared/; nothing in shared/ imports functions/, cmd/,
// internal/ (test and development tooling) or tools/; no function package
// imports another (the host is not one); no package in shared/ but httpx
// itself imports the HTTP layer, shared/httpx; no package in shared/ but a
// store imports a store (pure logic and product helpers do no storage); a
// store imports no other domain's store but for the edges of storeImports.
func violations(graph map[string][]string) []string {
	var out []string
	for from, imports := range graph {
		for _, to := range imports {
			if !strings.HasPrefix(to, module+"/") && to != module {
				continue
			}
			var why string
			switch {
			case under(from, "shared") && (under(to, "functions") || under(to, "cmd") || under(to, "internal") || under(to, "tools")):
				why = "shared/ imports only shared/"
			case under(from, "shared") && !under(from, "shared/httpx") && under(to, "shared/httpx"):
				why = "below the HTTP layer nothing imports httpx"
			case under(from, "shared") && storeDomain(from) == "" && storeDomain(to) != "":
				why = "pure packages import no store"
			case storeDomain(from) != "" && storeDomain(to) != "" && storeDomain(from) != storeDomain(to) && storeImports[[2]string{strings.TrimPrefix(from, module+"/shared/"), strings.TrimPrefix(to, module+"/shared/")}] == "":
				why = "a store imports no other domain's store"
			case functionPackage(to) != "" && functionPackage(from) != "" && functionPackage(from) != functionPackage(to):
				why = "no function package imports another"
			case under(from, "functions/host") && functionPackage(to) != "":
				why = "the host imports no function"
			case !under(from, "cmd") && under(to, "cmd"):
				why = "only cmd/ imports cmd/"
			}
			if why != "" {
				out = append(out, from+" → "+to+": "+why)
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestImportRules(t *testing.T) {
	b, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		graph[f[0]] = f[1:]
	}
	// The graph is the module's: a broken listing would pass every rule.
	for _, p := range []string{"functions/reactions", "functions/host", "shared/spannerdb", "shared/httpx", "cmd/local"} {
		if _, ok := graph[module+"/"+p]; !ok {
			t.Fatalf("go list did not list %s (%d packages)", p, len(graph))
		}
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
}

// TestImportRulesRefuse: each rule reports the edge it forbids, and the
// edges the layout allows pass.
func TestImportRulesRefuse(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	bad := map[string][]string{
		m("shared/spannerdb"):            {m("shared/httpx")},
		m("shared/counter"):              {m("functions/host")},
		m("shared/reaction"):             {m("internal/emulators")},
		m("functions/applyviews"):        {m("functions/applycounters")},
		m("functions/host"):              {m("functions/rollup")},
		m("functions/rollup"):            {m("cmd/internal/localstack")},
		m("functions/counts/sub"):        {m("functions/reactions")},
		m("shared/events"):               {m("tools/gcfbuild")},
		m("shared/views"):                {m("shared/counter/outboxstore")},
		m("shared/views/viewstore"):      {m("shared/counter/countstore")},
		m("shared/batch"):                {m("shared/counter/internal/counterdb")},
		m("shared/views/claimstore"):     {m("shared/counter/internal/counterdb")},
		m("shared/comment/commentstore"): {m("shared/counter/foldstore")},
		m("shared/history/historystore"): {m("shared/views/viewstore")},
		// The flags are moderation's: the reaction store reads their table,
		// never moderation's store.
		m("shared/reaction/reactionstore"): {m("shared/moderation/moderationstore")},
	}
	if got := violations(bad); len(got) != len(bad) {
		t.Errorf("%d of %d forbidden edges reported: %q", len(got), len(bad), got)
	}
	good := map[string][]string{
		module:                                   {m("functions/reactions"), m("shared/httpx")},
		m("functions/reactions"):                 {m("functions/host"), m("shared/httpx"), m("shared/reaction"), m("functions/reactions/sub")},
		m("functions/host"):                      {m("shared/config"), m("shared/httpx")},
		m("shared/httpx"):                        {m("shared/errs"), m("shared/httpx/inner")},
		m("cmd/local"):                           {m("cmd/internal/localstack"), m("internal/emulators"), m("functions/rollup")},
		m("internal/emulatortest"):               {m("functions/host"), m("shared/config")},
		m("shared/counter/outboxstore"):          {m("shared/spannerdb"), m("shared/counter/internal/counterdb"), "cloud.google.com/go/spanner", m("shared/views"), m("shared/counter")},
		m("shared/counter/countstore"):           {m("shared/counter/outboxstore"), m("shared/counter/internal/counterdb")},
		m("shared/counter/internal/countertest"): {m("shared/counter/foldstore"), m("shared/counter/reconcilestore")},
		m("shared/reaction/reactionstore"):       {m("shared/counter/outboxstore"), m("shared/counter/reconcilestore"), m("shared/account/accountstore"), m("shared/reaction")},
		m("shared/views/claimstore"):             {m("shared/history/historystore"), m("shared/views")},
	}
	if got := violations(good); len(got) != 0 {
		t.Errorf("allowed edges reported: %q", got)
	}
}

// benchmarkCode lists the packages of deps that hold benchmark code: the
// benchmark commands and what only they import. The local stack (`make
// run`, cmd/local) links none of them.
func benchmarkCode(deps []string) []string {
	var out []string
	for _, p := range deps {
		if strings.HasPrefix(p, module+"/cmd/bench") || under(p, "cmd/internal/benchstack") ||
			under(p, "cmd/internal/benchreport") || under(p, "internal/otelcount") {
			out = append(out, p)
		}
	}
	return out
}

func TestLocalLinksNoBenchmarkCode(t *testing.T) {
	b, err := exec.Command("go", "list", "-deps", module+"/cmd/local").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(b))
	if !slices.Contains(deps, module+"/cmd/internal/localstack") {
		t.Fatalf("go list -deps ./cmd/local did not list the local stack (%d packages)", len(deps))
	}
	for _, p := range benchmarkCode(deps) {
		t.Errorf("cmd/local links benchmark code: %s", p)
	}
}

// TestBenchmarkCodeRefused: the rule reports each kind of benchmark package
// and leaves the local stack's alone.
func TestBenchmarkCodeRefused(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	bad := []string{m("cmd/internal/benchstack"), m("cmd/internal/benchreport"), m("cmd/bench"), m("cmd/benchjobs"), m("internal/otelcount")}
	if got := benchmarkCode(bad); len(got) != len(bad) {
		t.Errorf("%d of %d benchmark packages reported: %q", len(got), len(bad), got)
	}
	good := []string{m("cmd/local"), m("cmd/internal/localstack"), m("internal/emulators"), m("functions/reactions"), "net/http"}
	if got := benchmarkCode(good); len(got) != 0 {
		t.Errorf("local stack packages reported: %q", got)
	}
}

// localIssuer lists the packages of deps that mint tokens without Firebase:
// internal/localauth (alg none, HS256 and any user's token on request) and
// anything else under internal/, the test and development tooling.
func localIssuer(deps []string) []string {
	var out []string
	for _, p := range deps {
		if under(p, "internal") {
			out = append(out, p)
		}
	}
	return out
}

// TestDeployedCodeLinksNoLocalIssuer: the package Cloud Functions builds
// (the module root) and every function package link neither the local
// token issuer nor any other test tooling.
func TestDeployedCodeLinksNoLocalIssuer(t *testing.T) {
	b, err := exec.Command("go", "list", "-deps", module, module+"/functions/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(b))
	for _, p := range []string{module, module + "/functions/reactions", module + "/shared/auth"} {
		if !slices.Contains(deps, p) {
			t.Fatalf("go list -deps of the deployed code did not list %s (%d packages)", p, len(deps))
		}
	}
	for _, p := range localIssuer(deps) {
		t.Errorf("the deployed code links %s", p)
	}
	// The local stack does link it: the rule looks at the right graph.
	b, err = exec.Command("go", "list", "-deps", module+"/cmd/local").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !slices.Contains(localIssuer(strings.Fields(string(b))), module+"/internal/localauth") {
		t.Errorf("cmd/local does not link internal/localauth: the rule would pass on anything")
	}
}
