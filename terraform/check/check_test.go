package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/videngage/engagement/shared/topology"
)

var (
	repo      string
	toolchain *Toolchain
	setupErr  error
	workDir   string

	resultsOnce sync.Once
	results     map[string]*Result
	resultsErr  map[string]error
)

func TestMain(m *testing.M) {
	fmt.Println(Banner)
	var err error
	if repo, err = RepoRoot("."); err == nil {
		workDir, err = os.MkdirTemp("", "tfcheck-")
		if err == nil {
			toolchain, err = NewToolchain(repo, workDir)
		}
	}
	setupErr = err
	code := m.Run()
	if workDir != "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

func needToolchain(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("setting up the stand-in provider: %v", setupErr)
	}
}

// copyOf copies the repository's terraform/ and shared/topology/ to a new
// directory and applies edit to the copy.
func copyOf(t *testing.T, edit func(root string)) string {
	t.Helper()
	root := t.TempDir()
	if err := CopyTree(repo, root); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(root)
	}
	return root
}

// envResults checks every environment once, on one copy of the tree.
func envResults(t *testing.T) (map[string]*Result, map[string]error) {
	t.Helper()
	needToolchain(t)
	resultsOnce.Do(func() {
		results, resultsErr = map[string]*Result{}, map[string]error{}
		root := filepath.Join(workDir, "tree")
		if err := CopyTree(repo, root); err != nil {
			for _, env := range Environments {
				resultsErr[env] = err
			}
			return
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, env := range Environments {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := toolchain.CheckEnvironment(root, env)
				mu.Lock()
				results[env], resultsErr[env] = r, err
				mu.Unlock()
			}()
		}
		wg.Wait()
	})
	return results, resultsErr
}

func loadCode(t *testing.T) *Code {
	t.Helper()
	c, err := LoadCode(repo)
	if err != nil {
		t.Fatalf("reading the code: %v", err)
	}
	return c
}

func TestFormat(t *testing.T) {
	needToolchain(t)
	out, err := toolchain.Run(repo, "fmt", "-check", "-recursive", "-diff", "-no-color", "terraform")
	if err != nil {
		t.Fatalf("terraform fmt -check -recursive terraform/ failed (run terraform fmt -recursive terraform):\n%s", out)
	}
}

func TestEnvironments(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			r := res[env]
			if !strings.Contains(r.Validate, "The configuration is valid") {
				t.Errorf("validate did not say the configuration is valid:\n%s", r.Validate)
			}
			if !strings.Contains(r.Plan, "stand-in provider: schema check only") {
				t.Errorf("the plan does not carry the stand-in notice:\n%s", r.Plan)
			}
			summary := ""
			for _, line := range strings.Split(r.Plan, "\n") {
				if strings.HasPrefix(line, "Plan: ") {
					summary = line
				}
			}
			if summary == "" {
				t.Fatalf("no plan summary in:\n%s", r.Plan)
			}
			t.Logf("%s: validate OK; %s (schema check, not a real plan)", env, summary)
			if n := len(r.PlanJSON.ResourceChanges); n < 50 {
				t.Errorf("the plan has only %d resource instances", n)
			}
		})
	}
}

func TestCrossCheck(t *testing.T) {
	res, errs := envResults(t)
	code := loadCode(t)
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			for _, e := range CrossCheck(res[env].PlanJSON, code) {
				t.Error(e)
			}
		})
	}
}

// lockedDDL is the applied DDL history of the repository's ddl.lock.
func lockedDDL(t *testing.T) []string {
	t.Helper()
	ddl, err := topology.LockedDDL(os.DirFS(filepath.Join(repo, "shared", "topology", "ddl")))
	if err != nil {
		t.Fatalf("shared/topology/ddl: %v", err)
	}
	return ddl
}

// Every environment plans exactly the applied DDL history.
func TestDDLIsTheLockedHistory(t *testing.T) {
	res, errs := envResults(t)
	locked := lockedDDL(t)
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			for _, e := range DDLRule(res[env].PlanJSON, locked) {
				t.Error(e)
			}
		})
	}
}

// A code rollback plans an older commit's code with today's DDL: the older
// commit lacks the newest DDL file, and spanner_ddl (go run ./tools/ddllock
// -tfvars on the newest commit) keeps every applied statement, so the
// database is updated in place, never recreated. Planned with its own DDL,
// the same older commit fails the DDL rule; with a spanner_ddl that lacks
// its own statements, it does not plan.
func TestRollbackKeepsTheNewestDDL(t *testing.T) {
	needToolchain(t)
	locked := lockedDDL(t)
	names, err := filepath.Glob(filepath.Join(repo, "shared", "topology", "ddl", "*.sql"))
	if err != nil || len(names) < 2 {
		t.Fatalf("DDL files: %v %v", names, err)
	}
	newest := filepath.Base(names[len(names)-1])
	older := func(root string) {
		if err := os.Remove(filepath.Join(root, "shared", "topology", "ddl", newest)); err != nil {
			t.Fatal(err)
		}
	}
	tfvars := func(stmts []string) string {
		b, err := json.Marshal(map[string][]string{"spanner_ddl": stmts})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "ddl.tfvars.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("older code, newest DDL", func(t *testing.T) {
		t.Parallel()
		r, err := toolchain.CheckEnvironment(copyOf(t, older), "prod", "-var-file="+tfvars(locked))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range DDLRule(r.PlanJSON, locked) {
			t.Error(e)
		}
	})
	t.Run("broken: older code with its own DDL", func(t *testing.T) {
		t.Parallel()
		r, err := toolchain.CheckEnvironment(copyOf(t, older), "prod")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("DDL rule: the plan's Spanner DDL has %d statements, the applied history %d", len(locked)-len(topology.SplitDDL(mustRead(t, names[len(names)-1]))), len(locked))
		if errs := DDLRule(r.PlanJSON, locked); !containsErr(errs, want) {
			t.Fatalf("the DDL rule did not report %q: %v", want, errors.Join(errs...))
		}
	})
	t.Run("broken: newest DDL without the older code's statements", func(t *testing.T) {
		t.Parallel()
		_, err := toolchain.CheckEnvironment(copyOf(t, older), "prod", "-var-file="+tfvars(locked[1:]))
		if err == nil || !strings.Contains(err.Error(), "spanner_ddl must begin with every statement") {
			t.Fatalf("planned a DDL that lacks the code's schema: %v", err)
		}
	})
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStatic(t *testing.T) {
	code := loadCode(t)
	for _, e := range StaticCheck(repo, code) {
		t.Error(e)
	}
}

// Environment specifics the issue asks for.
func TestEnvironmentDifferences(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		if errs[env] != nil {
			t.Fatalf("%s: %v", env, errs[env])
		}
	}
	inst := func(env string) ResourceChange {
		for _, rc := range res[env].PlanJSON.Instances("google_spanner_instance", "main") {
			return rc
		}
		t.Fatalf("%s: no Spanner instance", env)
		return ResourceChange{}
	}
	if cfg := inst("dev").Str("config"); !strings.HasPrefix(cfg, "regional-") {
		t.Errorf("dev Spanner config %q is not regional", cfg)
	}
	if cfg := inst("prod").Str("config"); strings.HasPrefix(cfg, "regional-") || cfg == "" {
		t.Errorf("prod Spanner config %q is not multi-region", cfg)
	}
	clusters := func(env string) int {
		for _, rc := range res[env].PlanJSON.Instances("google_bigtable_instance", "main") {
			l, _ := rc.Get("cluster").([]any)
			return len(l)
		}
		return 0
	}
	if n := clusters("prod"); n < 2 {
		t.Errorf("prod Bigtable has %d clusters, want 2 or more", n)
	}
	for _, env := range Environments {
		p := res[env].PlanJSON
		// The rate limiter's increments are single-row transactions: their
		// profile is single-cluster with transactional writes.
		tx := p.Instances("google_bigtable_app_profile", "transactional")[""]
		if l, _ := tx.Get("single_cluster_routing").([]any); len(l) != 1 {
			t.Errorf("%s: the transactional app profile is not single-cluster", env)
		} else if v, _ := tx.Get("single_cluster_routing", 0, "allow_transactional_writes").(bool); !v {
			t.Errorf("%s: the transactional app profile does not allow transactional writes", env)
		}
		// History reads fail over, and row affinity keeps a user's rows on
		// one cluster while it is up (read-your-writes).
		hist := p.Instances("google_bigtable_app_profile", "history")[""]
		if v, _ := hist.Get("multi_cluster_routing_use_any").(bool); !v {
			t.Errorf("%s: the history app profile is not multi-cluster", env)
		}
		if v, _ := hist.Get("row_affinity").(bool); !v {
			t.Errorf("%s: the history app profile has no row affinity", env)
		}
		multi := p.Instances("google_bigtable_app_profile", "failover")[""]
		if v, _ := multi.Get("multi_cluster_routing_use_any").(bool); !v {
			t.Errorf("%s: the failover app profile is not multi-cluster", env)
		}
		for _, rc := range p.Instances("google_cloudfunctions2_function", "fn") {
			ep := rc.Str("build_config", 0, "entry_point")
			prof, _ := rc.Get("service_config", 0, "environment_variables", "BIGTABLE_APP_PROFILE").(string)
			// The account's export and erasure read the rows History and
			// ApplyHistory write.
			ownHistory := ep == "History" || ep == "ApplyHistory" || ep == "Account" || ep == "PrepareExport" || ep == "EraseAccount"
			if ownHistory != (prof == hist.Str("app_profile_id")) {
				t.Errorf("%s: %s uses app profile %q", env, ep, prof)
			}
			if got, _ := rc.Get("service_config", 0, "environment_variables", "BIGTABLE_TRANSACTIONAL_APP_PROFILE").(string); got != tx.Str("app_profile_id") {
				t.Errorf("%s: %s's transactional app profile is %q", env, ep, got)
			}
		}
		for _, e := range RegionRule(p, loadCode(t).Topology, 1) {
			t.Errorf("%s: %v", env, e)
		}
		// One backup schedule: the explicit one, no automatic one beside it.
		if got := inst(env).Str("default_backup_schedule_type"); got != "NONE" {
			t.Errorf("%s: default_backup_schedule_type %q, want NONE", env, got)
		}
		if n := len(p.Instances("google_spanner_backup_schedule", "daily")); n != 1 {
			t.Errorf("%s: %d explicit backup schedules", env, n)
		}
		if n := len(p.Instances("google_monitoring_dashboard", "main")); n != 1 {
			t.Errorf("%s: %d dashboards", env, n)
		}
		alerts := map[string]bool{}
		for _, rc := range p.ResourceChanges {
			if rc.Type == "google_monitoring_alert_policy" {
				alerts[rc.Name] = true
			}
		}
		for _, want := range []string{"dead_letter_backlog", "rollup_lag", "reconcile_corrections", "server_errors", "scheduler_failures", "instance_limit"} {
			if !alerts[want] {
				t.Errorf("%s: no %s alert policy", env, want)
			}
		}
	}
}

// Broken copies of the configuration must fail the checks.
func TestBrokenConfigurationsFail(t *testing.T) {
	needToolchain(t)
	cases := []struct {
		name string
		edit func(root string)
		want string // in terraform's output
	}{
		{
			name: "unknown argument",
			edit: replaceIn(t, "pubsub.tf", "  ack_deadline_seconds       = local.delivery.ackDeadlineSeconds\n", "  ack_deadline_seconds       = local.delivery.ackDeadlineSeconds\n  ack_deadline_minutes       = 1\n"),
			want: `An argument named "ack_deadline_minutes" is not expected here`,
		},
		{
			name: "misspelt block",
			edit: replaceIn(t, "pubsub.tf", "  retry_policy {", "  retry_polcy {"),
			want: `Blocks of type "retry_polcy" are not expected here`,
		},
		{
			name: "dangling reference",
			edit: replaceIn(t, "pubsub.tf", "google_pubsub_topic.dead_letter[each.value.dead_letter].id", "google_pubsub_topic.dead_letters[each.value.dead_letter].id"),
			want: "Reference to undeclared resource",
		},
		{
			name: "wrong type",
			edit: replaceIn(t, "spanner.tf", "processing_units = var.spanner_autoscaling == null ? var.spanner_processing_units : null", "processing_units = [var.spanner_processing_units]"),
			want: "Incorrect attribute value type",
		},
		{
			name: "missing required argument",
			edit: replaceIn(t, "firestore.tf", "  retention = \"604800s\"\n", ""),
			want: `The argument "retention" is required`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := copyOf(t, tc.edit)
			_, err := toolchain.CheckEnvironment(root, "dev")
			if err == nil {
				t.Fatal("the broken configuration passed validate and plan")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the check failed, but not with %q:\n%v", tc.want, err)
			}
		})
	}

	// An entry point the code does not register plans fine; the cross-check
	// must catch it.
	t.Run("function the code does not register", func(t *testing.T) {
		t.Parallel()
		root := copyOf(t, replaceIn(t, "functions.tf", "entry_point     = each.value.name", `entry_point     = each.value.name == "ApplyHistory" ? "ApplyHistoryV0" : each.value.name`))
		r, err := toolchain.CheckEnvironment(root, "dev")
		if err != nil {
			t.Fatal(err)
		}
		errs := CrossCheck(r.PlanJSON, loadCode(t))
		if !containsErr(errs, `function entry point "ApplyHistoryV0" is in Terraform but not in the code`) {
			t.Fatalf("the cross-check did not report the unregistered entry point: %v", errors.Join(errs...))
		}
	})

	t.Run("name written out by hand", func(t *testing.T) {
		t.Parallel()
		root := copyOf(t, replaceIn(t, "pubsub.tf", "  name                       = each.value\n", "  name                       = \"history-events-dead-sub\"\n"))
		if errs := StaticCheck(root, loadCode(t)); !containsErr(errs, `dead-letter subscription name "history-events-dead-sub" written out by hand`) {
			t.Fatalf("the static check did not report the literal name: %v", errors.Join(errs...))
		}
	})
}

func containsErr(errs []error, want string) bool {
	for _, e := range errs {
		if strings.Contains(e.Error(), want) {
			return true
		}
	}
	return false
}

// The cross-check must see a resource missing from the plan, and an extra one.
func TestCrossCheckDetectsDrift(t *testing.T) {
	res, errs := envResults(t)
	if errs["dev"] != nil {
		t.Fatal(errs["dev"])
	}
	code := loadCode(t)
	var trimmed Plan
	for _, rc := range res["dev"].PlanJSON.ResourceChanges {
		if rc.Type == "google_pubsub_subscription" && rc.Key() == "history-views" {
			continue
		}
		if rc.Type == "google_bigtable_table" {
			rc.Change.After = map[string]any{"name": "watch_history_v2", "column_family": []any{map[string]any{"family": "e"}}}
		}
		trimmed.ResourceChanges = append(trimmed.ResourceChanges, rc)
	}
	errsFound := CrossCheck(&trimmed, code)
	for _, want := range []string{
		`subscription "history-views" is in topology.json but not in Terraform`,
		`Bigtable table/family "watch_history_v2/e" is in Terraform but not in topology.json`,
	} {
		if !containsErr(errsFound, want) {
			t.Errorf("missing %q in %v", want, errors.Join(errsFound...))
		}
	}
}

// The cross-check must refuse an event function that is no push handler, a
// concurrency above 1 without a whole vCPU, and an event function that may
// outrun the ack deadline.
func TestCrossCheckEventFunctions(t *testing.T) {
	res, errs := envResults(t)
	if errs["prod"] != nil {
		t.Fatal(errs["prod"])
	}
	if errs := CrossCheck(res["prod"].PlanJSON, loadCode(t)); len(errs) != 0 {
		t.Fatalf("the unbroken plan fails: %v", errors.Join(errs...))
	}
	// broken is the prod plan with ApplyViews' service_config changed by f.
	broken := func(f func(sc map[string]any)) *Plan {
		var p Plan
		for _, rc := range res["prod"].PlanJSON.ResourceChanges {
			if rc.Type == "google_cloudfunctions2_function" && rc.Str("build_config", 0, "entry_point") == "ApplyViews" {
				b, err := json.Marshal(rc.Change.After)
				if err != nil {
					t.Fatal(err)
				}
				var after map[string]any
				if err := json.Unmarshal(b, &after); err != nil {
					t.Fatal(err)
				}
				f(after["service_config"].([]any)[0].(map[string]any))
				rc.Change.After = after
			}
			p.ResourceChanges = append(p.ResourceChanges, rc)
		}
		return &p
	}
	for _, tc := range []struct {
		name string
		plan *Plan
		code func(*Code)
		want string
	}{
		{"many requests on half a vCPU", broken(func(sc map[string]any) {
			sc["available_cpu"], sc["max_instance_request_concurrency"] = "0.5", float64(8)
		}), nil, `function ApplyViews serves 8 requests at a time on "0.5" vCPU`},
		{"no request at all", broken(func(sc map[string]any) { sc["max_instance_request_concurrency"] = float64(0) }), nil,
			`function ApplyViews serves 0 requests at a time`},
		{"a timeout past the ack deadline", broken(func(sc map[string]any) { sc["timeout_seconds"] = float64(300) }), nil,
			`event function ApplyViews may run 300s, longer than the push subscriptions' ack deadline`},
		// PrepareExport runs 600 s under its subscription's own ack
		// deadline; the topics' common 60 s would not hold it.
		{"a subscription's own ack deadline dropped", res["prod"].PlanJSON, func(c *Code) {
			for i := range c.Topology.PubSub.Topics {
				for j := range c.Topology.PubSub.Topics[i].Subscriptions {
					c.Topology.PubSub.Topics[i].Subscriptions[j].AckDeadlineSeconds = 0
				}
			}
		}, `event function PrepareExport may run 600s, longer than the push subscriptions' ack deadline of 60s (account-export)`},
		{"an event function registered as a plain HTTP function", res["prod"].PlanJSON, func(c *Code) {
			r := c.Registered["ApplyViews"]
			r.Kind = "HTTP"
			c.Registered["ApplyViews"] = r
		}, `function ApplyViews is a event function in topology.json but registered with HTTP`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := loadCode(t)
			if tc.code != nil {
				tc.code(code)
			}
			if errs := CrossCheck(tc.plan, code); !containsErr(errs, tc.want) {
				t.Fatalf("the cross-check did not report %q: %v", tc.want, errors.Join(errs...))
			}
		})
	}
}

// The fresh-project rules hold for every environment.
func TestGraphRules(t *testing.T) {
	res, errs := envResults(t)
	code := loadCode(t)
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			for _, e := range GraphRules(res[env].PlanJSON, res[env].Graph, code.Topology) {
				t.Error(e)
			}
		})
	}
}

// replaceIn returns an edit of a copy: the first old in the module's file
// becomes new (the test fails if old is not there).
func replaceIn(t *testing.T, file, old, new string) func(root string) {
	return func(root string) {
		p := filepath.Join(root, ModuleDir, file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s does not contain %q", file, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// both applies two edits to a copy.
func both(a, b func(root string)) func(root string) {
	return func(root string) { a(root); b(root) }
}

// Each fresh-project rule fails on a copy of the tree broken on purpose: the
// copy still validates and plans, only the rule sees what a fresh project
// would meet.
func TestGraphRulesFailWhenBroken(t *testing.T) {
	needToolchain(t)
	cases := []struct {
		name string
		edit func(root string)
		want string
	}{
		{
			name: "API: service account without the IAM API enablement",
			edit: replaceIn(t, "iam.tf", "  display_name = \"Cloud Scheduler identity calling the scheduled functions\"\n\n  depends_on = [google_project_service.api]\n", "  display_name = \"Cloud Scheduler identity calling the scheduled functions\"\n"),
			want: "API rule: google_service_account.scheduler needs iam.googleapis.com but does not depend on its enablement",
		},
		{
			name: "API: HTTP redirect URL map without the Compute enablement",
			edit: replaceIn(t, "api.tf", "  # Nothing else it references enables Compute first.\n  depends_on = [google_project_service.api]\n", ""),
			want: "API rule: google_compute_url_map.http_redirect needs compute.googleapis.com but does not depend on its enablement",
		},
		{
			name: "API: an API left out of the enabled list",
			edit: replaceIn(t, "project.tf", "    \"cloudscheduler.googleapis.com\",\n", ""),
			want: "API rule: google_cloud_scheduler_job.job needs cloudscheduler.googleapis.com, which no google_project_service enables",
		},
		{
			name: "metric: alert on an application metric nothing creates",
			edit: replaceIn(t, "monitoring.tf", `metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["reconcile_corrections"]}\"`, `metric.type = \"workload.googleapis.com/engagement/reconcile_corrections\"`),
			want: "metric rule: module.engagement.google_monitoring_alert_policy.reconcile_corrections names metric workload.googleapis.com/engagement/reconcile_corrections, which is not built in and which nothing in this apply creates",
		},
		{
			name: "metric: alert that does not wait for the log metric it reads",
			edit: replaceIn(t, "monitoring.tf", `metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["reconcile_corrections"]}\"`, `metric.type = \"logging.googleapis.com/user/engagement/reconcile_runs_over_threshold\"`),
			want: "metric rule: module.engagement.google_monitoring_alert_policy.reconcile_corrections names metric logging.googleapis.com/user/engagement/reconcile_runs_over_threshold but does not depend on google_logging_metric.reconcile_corrections",
		},
		{
			name: "grant: push subscription before its invoker grant",
			edit: replaceIn(t, "pubsub.tf", "    google_cloud_run_v2_service_iam_member.push_invoker,\n", ""),
			want: `grant rule: push subscription module.engagement.google_pubsub_subscription.push["counter-apply"] is created before its push identity may invoke function "apply-counters"`,
		},
		{
			name: "grant: push subscription before the token creator grant",
			edit: replaceIn(t, "pubsub.tf", "    google_service_account_iam_member.push_token_creator,\n", ""),
			want: `grant rule: push subscription module.engagement.google_pubsub_subscription.push["counter-apply"] is created before the Pub/Sub service agent may mint`,
		},
		{
			name: "grant: scheduler job before its invoker grant",
			edit: replaceIn(t, "scheduler.tf", "  depends_on = [google_cloud_run_v2_service_iam_member.scheduler_invoker]\n", ""),
			want: "grant rule: scheduler job module.engagement.google_cloud_scheduler_job.job",
		},
		{
			name: "grant: Pub/Sub service agent bound before it is created",
			edit: replaceIn(t, "project.tf", "  pubsub_agent = google_project_service_identity.pubsub.member\n", "  pubsub_agent = \"serviceAccount:service-123@gcp-sa-pubsub.iam.gserviceaccount.com\"\n"),
			want: "grants to the service agent serviceAccount:service-123@gcp-sa-pubsub.iam.gserviceaccount.com written out by hand",
		},
		{
			name: "grant: function built before the build identity reads the staging buckets",
			edit: replaceIn(t, "functions.tf", "  depends_on = [\n    google_project_iam_member.builder,\n    google_project_iam_member.builder_staging,\n", "  depends_on = [\n    google_project_iam_member.builder,\n"),
			want: "grant rule: google_cloudfunctions2_function.fn is built before its build identity has google_project_iam_member roles/storage.objectAdmin",
		},
		{
			name: "propagation: alert reads its log metric straight after creating it",
			edit: replaceIn(t, "monitoring.tf", `metric.type = \"logging.googleapis.com/user/${time_sleep.log_metrics.triggers["reconcile_corrections"]}\"`, `metric.type = \"logging.googleapis.com/user/${google_logging_metric.reconcile_corrections.name}\"`),
			want: "propagation rule: google_monitoring_alert_policy.reconcile_corrections reads log-based metric logging.googleapis.com/user/engagement/reconcile_runs_over_threshold without a time_sleep of at least 10m0s after google_logging_metric.reconcile_corrections",
		},
		{
			name: "propagation: log metric sleep shorter than the API's 10 minutes",
			edit: replaceIn(t, "monitoring.tf", "  create_duration = \"600s\"\n", "  create_duration = \"120s\"\n"),
			want: "propagation rule: google_monitoring_alert_policy.rollup_lag reads log-based metric logging.googleapis.com/user/engagement/rollup_lag_seconds without a time_sleep of at least 10m0s",
		},
		{
			name: "propagation: function built right after its build grants",
			edit: replaceIn(t, "functions.tf", "    time_sleep.function_grants,\n  ]", "    google_project_iam_member.builder,\n    google_project_iam_member.builder_staging,\n    google_storage_bucket_iam_member.builder_source,\n    google_secret_manager_secret_iam_member.page_token,\n  ]"),
			want: "propagation rule: google_cloudfunctions2_function.fn uses grant google_project_iam_member.builder_staging without a time_sleep of at least 7m0s after it",
		},
		{
			name: "propagation: function revision starts right after its secret grant",
			edit: both(
				replaceIn(t, "functions.tf", "    google_secret_manager_secret_iam_member.page_token,\n  ]\n}", "  ]\n}"),
				replaceIn(t, "functions.tf", "    time_sleep.function_grants,\n", "    time_sleep.function_grants,\n    google_secret_manager_secret_iam_member.page_token,\n"),
			),
			want: "propagation rule: google_cloudfunctions2_function.fn uses grant google_secret_manager_secret_iam_member.page_token without a time_sleep",
		},
		{
			name: "grant: public function started before it may read its secret",
			// The secret grants, the page token's and the viewer-hash key's.
			edit: replaceIn(t, "functions.tf", "    google_secret_manager_secret_iam_member.viewer_hash_key,\n    google_secret_manager_secret_iam_member.page_token,\n  ]\n}", "  ]\n}"),
			want: "grant rule: google_cloudfunctions2_function.fn reads secret PAGE_TOKEN_SECRET before its runtime identity may (roles/secretmanager.secretAccessor)",
		},
		{
			name: "propagation: function grants waited on for the provider example's 60 s only",
			edit: replaceIn(t, "functions.tf", "  create_duration = \"420s\"\n", "  create_duration = \"60s\"\n"),
			want: "propagation rule: google_cloudfunctions2_function.fn uses grant google_project_iam_member.builder_staging without a time_sleep of at least 7m0s after it",
		},
		{
			name: "API: resources created as soon as their API is enabled",
			edit: replaceIn(t, "project.tf", "  disable_on_destroy = false\n\n  depends_on = [time_sleep.apis_enabled]\n", "  disable_on_destroy = false\n"),
			want: "API rule: google_service_account.scheduler needs iam.googleapis.com but does not wait a time_sleep of at least 5m0s after its enablement",
		},
		{
			name: "API: a wait after the enablement shorter than its propagation",
			edit: replaceIn(t, "project.tf", "  create_duration = \"300s\"\n", "  create_duration = \"30s\"\n"),
			want: "API rule: google_service_account.scheduler needs iam.googleapis.com but does not wait a time_sleep of at least 5m0s",
		},
		{
			name: "Bigtable: autoscaling maximum above 10 times the minimum",
			edit: replaceIn(t, "bigtable.tf", "        max_nodes  = cluster.value.max_nodes\n", "        max_nodes  = cluster.value.max_nodes * 10\n"),
			want: "Bigtable scaling rule: module.engagement.google_bigtable_instance.main cluster engagement-c1 scales 1–30 nodes: Bigtable refuses a maximum above 10× the minimum",
		},
		{
			name: "outlier: detection that never ejects (the API's default enforcement)",
			edit: replaceIn(t, "api.tf", "    enforcing_consecutive_errors = 100\n", ""),
			want: "outlier rule: module.engagement.google_compute_backend_service.fn[\"Counts\"] enforces consecutive-error ejection at 0%",
		},
		{
			name: "outlier: no outlier detection on the CDN backend",
			edit: func(root string) {
				p := filepath.Join(root, ModuleDir, "api.tf")
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				// The second outlier_detection block is the CDN backend's.
				s := string(b)
				i := strings.LastIndex(s, "  outlier_detection {")
				j := strings.Index(s[i:], "\n  }\n")
				if i < 0 || j < 0 {
					t.Fatal("api.tf has no outlier_detection block")
				}
				if err := os.WriteFile(p, []byte(s[:i]+s[i+j+len("\n  }\n"):]), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: "outlier rule: module.engagement.google_compute_backend_service.cdn[\"Counts\"] has no outlier detection",
		},
		{
			name: "schema: functions deployed without waiting for the database's DDL",
			edit: replaceIn(t, "functions.tf", "    google_spanner_database.main,\n", ""),
			want: "schema rule: google_cloudfunctions2_function.fn is deployed without waiting for google_spanner_database.main",
		},
	}
	code := loadCode(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := copyOf(t, tc.edit)
			r, err := toolchain.CheckEnvironment(root, "dev")
			if err != nil {
				t.Fatalf("the broken copy must still plan (only the rule may catch it): %v", err)
			}
			errs := GraphRules(r.PlanJSON, r.Graph, code.Topology)
			if !containsErr(errs, tc.want) {
				t.Fatalf("the graph rules did not report %q; they said: %v", tc.want, errors.Join(errs...))
			}
			t.Logf("fails as it must: %s", tc.want)
		})
	}
}

// The page-token secret is never in a plan or in state: nothing but an
// ephemeral resource generates it, and the secret version gets it through
// the write-only argument (null in the plan).
func TestPageTokenSecretNotInState(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		if errs[env] != nil {
			t.Fatalf("%s: %v", env, errs[env])
		}
		p := res[env].PlanJSON
		for _, rc := range p.ResourceChanges {
			if rc.Type == "random_password" || rc.Type == "random_string" {
				t.Errorf("%s: %s keeps a generated secret in state", env, rc.Address)
			}
		}
		versions := p.Instances("google_secret_manager_secret_version", "page_token")
		if len(versions) != 1 {
			t.Fatalf("%s: %d page-token secret versions planned", env, len(versions))
		}
		for _, rc := range versions {
			for _, attr := range []string{"secret_data", "secret_data_wo"} {
				if v := rc.Get(attr); v != nil {
					t.Errorf("%s: %s.%s is %v in the plan, want null", env, rc.Address, attr, v)
				}
			}
			if rc.Num("secret_data_wo_version") < 1 {
				t.Errorf("%s: secret_data_wo_version is not set, so the write-only value is never sent", env)
			}
		}
		for _, e := range SecretPinRule(p) {
			t.Errorf("%s: %v", env, e)
		}
	}

	// A rotation's first step writes the new generation beside the signing
	// one, and every public function reads both by number.
	t.Run("rotation step 1", func(t *testing.T) {
		t.Parallel()
		r, err := toolchain.CheckEnvironment(copyOf(t, nil), "prod", "-var", "page_token_secret_accepted=2")
		if err != nil {
			t.Fatal(err)
		}
		if got := sortedSet(keySet(r.PlanJSON.Instances("google_secret_manager_secret_version", "page_token"))); fmt.Sprint(got) != "[1 2]" {
			t.Errorf("secret versions planned %v, want generations [1 2]", got)
		}
		for ep, rc := range r.PlanJSON.Instances("google_cloudfunctions2_function", "fn") {
			secrets, _ := rc.Get("service_config", 0, "secret_environment_variables").([]any)
			pageTokens := 0
			for i := range secrets {
				if k, _ := dig(secrets, i, "key").(string); strings.HasPrefix(k, "PAGE_TOKEN_SECRET") {
					pageTokens++
				}
			}
			if public := pageTokens > 0; public && pageTokens != 2 {
				t.Errorf("%s reads %d page-token secrets, want the signing and the accepted one", ep, pageTokens)
			}
		}
		for _, e := range SecretPinRule(r.PlanJSON) {
			t.Error(e)
		}
	})
	t.Run("broken: secret read at latest", func(t *testing.T) {
		t.Parallel()
		root := copyOf(t, replaceIn(t, "functions.tf", "version    = google_secret_manager_secret_version.page_token[secret_environment_variables.value].version", `version    = "latest"`))
		r, err := toolchain.CheckEnvironment(root, "dev")
		if err != nil {
			t.Fatal(err)
		}
		if errs := SecretPinRule(r.PlanJSON); !containsErr(errs, `reads PAGE_TOKEN_SECRET at version "latest"`) {
			t.Fatalf("the secret pin rule did not report the unpinned secret: %v", errors.Join(errs...))
		}
	})
}

func keySet[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// The front door: the cdnRoutes of topology.json, and only those, go through
// a Cloud CDN backend with the documented cache rules; every other public
// backend never caches; Cloud Armor throttles per IP on all of them.
func TestFrontDoor(t *testing.T) {
	res, errs := envResults(t)
	code := loadCode(t)
	for _, env := range Environments {
		if errs[env] != nil {
			t.Fatalf("%s: %v", env, errs[env])
		}
		p := res[env].PlanJSON
		cdnPaths, otherPaths := map[string]bool{}, map[string]bool{}
		for _, f := range code.Topology.Functions {
			if !f.Public {
				continue
			}
			for _, r := range f.Routes {
				if strings.HasSuffix(r, "/") {
					r += "*"
				}
				if slices.Contains(f.CDNRoutes, strings.TrimSuffix(r, "*")) {
					cdnPaths[r] = true
				} else {
					otherPaths[r] = true
				}
			}
			cdn, ok := p.Instances("google_compute_backend_service", "cdn")[f.Name]
			if len(f.CDNRoutes) == 0 {
				if ok {
					t.Errorf("%s: %s has a CDN backend but no cdnRoutes", env, f.Name)
				}
			} else if !ok {
				t.Errorf("%s: %s has cdnRoutes %v but no CDN backend", env, f.Name, f.CDNRoutes)
			} else {
				if v, _ := cdn.Get("enable_cdn").(bool); !v {
					t.Errorf("%s: the CDN backend of %s has Cloud CDN off", env, f.Name)
				}
				for _, c := range []struct {
					path []any
					want any
				}{
					{[]any{"cdn_policy", 0, "cache_mode"}, "USE_ORIGIN_HEADERS"},
					{[]any{"cdn_policy", 0, "negative_caching"}, false},
					{[]any{"cdn_policy", 0, "cache_key_policy", 0, "include_host"}, false},
					{[]any{"cdn_policy", 0, "cache_key_policy", 0, "include_protocol"}, false},
					{[]any{"cdn_policy", 0, "cache_key_policy", 0, "include_query_string"}, true},
				} {
					if got := cdn.Get(c.path...); got != c.want {
						t.Errorf("%s: CDN backend of %s: %v = %v, want %v", env, f.Name, c.path, got, c.want)
					}
				}
				if got := fmt.Sprint(cdn.Get("cdn_policy", 0, "cache_key_policy", 0, "query_string_whitelist")); got != "[ids]" {
					t.Errorf("%s: CDN cache key query parameters %s, want [ids]", env, got)
				}
			}
			fn := p.Instances("google_compute_backend_service", "fn")[f.Name]
			if v, _ := fn.Get("enable_cdn").(bool); v {
				t.Errorf("%s: the uncached backend of %s has Cloud CDN on", env, f.Name)
			}
		}
		// The URL map routes exactly those paths (services are unknown at
		// plan time; which backend a path goes to is in api.tf's two
		// path_rule blocks, one per backend kind).
		got := map[string]bool{}
		for _, rc := range p.Instances("google_compute_url_map", "api") {
			rules, _ := rc.Get("path_matcher", 0, "path_rule").([]any)
			for _, r := range rules {
				paths, _ := dig(r, "paths").([]any)
				for _, x := range paths {
					got[x.(string)] = true
				}
			}
		}
		for path := range cdnPaths {
			otherPaths[path] = true
		}
		if fmt.Sprint(sortedSet(got)) != fmt.Sprint(sortedSet(otherPaths)) {
			t.Errorf("%s: URL map paths %v, topology routes %v", env, sortedSet(got), sortedSet(otherPaths))
		}
		// Cloud Armor: a per-IP throttle before the default rule.
		armor := p.Instances("google_compute_security_policy", "api")[""]
		throttle := false
		rules, _ := armor.Get("rule").([]any)
		for _, r := range rules {
			if dig(r, "action") == "throttle" && dig(r, "rate_limit_options", 0, "enforce_on_key") == "IP" && dig(r, "rate_limit_options", 0, "exceed_action") == "deny(429)" {
				throttle = true
			}
		}
		if !throttle {
			t.Errorf("%s: no per-IP throttle rule in the Cloud Armor policy", env)
		}
		for _, name := range []string{"fn", "cdn"} {
			for k, rc := range p.Instances("google_compute_backend_service", name) {
				if u, _ := dig(rc.Change.AfterUnknown, "security_policy").(bool); !u && rc.Str("security_policy") == "" {
					t.Errorf("%s: backend %s[%s] has no Cloud Armor policy", env, name, k)
				}
			}
		}
	}
}

// Prod: alerts must reach someone, and Spanner scales itself.
func TestProdRequirements(t *testing.T) {
	res, errs := envResults(t)
	if errs["prod"] != nil {
		t.Fatal(errs["prod"])
	}
	p := res["prod"].PlanJSON
	for _, rc := range p.Instances("google_spanner_instance", "main") {
		if l, _ := rc.Get("autoscaling_config").([]any); len(l) != 1 {
			t.Error("prod Spanner has no managed autoscaler")
		}
		if rc.Get("processing_units") != nil {
			t.Error("prod Spanner sets fixed processing units beside the autoscaler")
		}
	}
	if n := len(p.Instances("google_monitoring_notification_channel", "email")); n == 0 {
		t.Error("prod has no notification channel")
	}
	for _, rc := range p.ResourceChanges {
		if rc.Type != "google_monitoring_alert_policy" {
			continue
		}
		if u, _ := dig(rc.Change.AfterUnknown, "notification_channels").([]any); len(u) == 0 {
			t.Errorf("prod alert %s notifies nobody", rc.Address)
		}
	}

	// The public API outlives a region: every public function, its NEGs and
	// its backends in two regions. Request logs are sampled.
	for _, e := range RegionRule(p, loadCode(t).Topology, 2) {
		t.Error(e)
	}
	for k, rc := range p.Instances("google_compute_backend_service", "fn") {
		if r := rc.Num("log_config", 0, "sample_rate"); r <= 0 || r >= 1 {
			t.Errorf("prod backend %s logs a share %v of requests, want between 0 and 1 exclusive", k, r)
		}
	}

	// Copies of prod broken on purpose fail the region rule: planned with
	// one region, with the scheduler jobs or the push subscriptions of the
	// first region only, with regional buckets.
	for _, tc := range []struct {
		name string
		edit func(root string)
		vars []string
		want string
	}{
		{"one region", nil, []string{"-var", "extra_regions=[]"},
			"region rule: http function Counts runs in 1 region(s) [us-central1], want at least 2"},
		{"scheduler jobs in the first region only",
			replaceIn(t, "scheduler.tf", "for r in local.regions : (r == var.region ? name", "for r in [var.region] : (r == var.region ? name"), nil,
			"region rule: scheduled function Rollup runs in [us-central1 us-east1] but its job"},
		{"push subscriptions in the first region only",
			replaceIn(t, "pubsub.tf", "for r in local.regions : (r == var.region ? name", "for r in [var.region] : (r == var.region ? name"), nil,
			"region rule: event function ApplyCounters runs in [us-central1 us-east1] but subscription counter-apply pushes from [us-central1]"},
		{"buckets in one region", nil, []string{"-var", "bucket_location=us-central1"},
			"region rule: bucket module.engagement.google_storage_bucket.source is in region us-central1"},
	} {
		t.Run("broken: "+tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := toolchain.CheckEnvironment(copyOf(t, tc.edit), "prod", tc.vars...)
			if err != nil {
				t.Fatal(err)
			}
			if errs := RegionRule(r.PlanJSON, loadCode(t).Topology, 2); !containsErr(errs, tc.want) {
				t.Fatalf("the region rule did not report %q: %v", tc.want, errors.Join(errs...))
			}
		})
	}

	// Without an alert e-mail, prod does not plan.
	t.Run("no alert e-mail", func(t *testing.T) {
		t.Parallel()
		root := copyOf(t, nil)
		_, err := toolchain.CheckEnvironment(root, "prod", "-var", "alert_emails=[]")
		if err == nil || !strings.Contains(err.Error(), "prod needs at least one alert e-mail") {
			t.Fatalf("prod planned without an alert e-mail: %v", err)
		}
	})
}

// The cross-check holds every region's instance of a function and every
// region's copy of a job, not only the first region's: a copy of prod
// whose second region opens its event and scheduled functions to the
// internet, or fires a job on another schedule there, fails it.
func TestCrossCheckPerRegion(t *testing.T) {
	needToolchain(t)
	code := loadCode(t)
	root := copyOf(t, both(
		replaceIn(t, "functions.tf", `ingress_settings = each.value.public ? "ALLOW_INTERNAL_AND_GCLB" : "ALLOW_INTERNAL_ONLY"`,
			`ingress_settings = each.value.public ? "ALLOW_INTERNAL_AND_GCLB" : (each.value.region == var.region ? "ALLOW_INTERNAL_ONLY" : "ALLOW_ALL")`),
		replaceIn(t, "scheduler.tf", "  schedule         = each.value.schedule\n", "  schedule         = each.value.region == var.region ? each.value.schedule : \"0 0 1 1 *\"\n"),
	))
	r, err := toolchain.CheckEnvironment(root, "prod")
	if err != nil {
		t.Fatal(err)
	}
	errs := CrossCheck(r.PlanJSON, code)
	for _, want := range []string{
		`function ApplyCounters has ingress "ALLOW_ALL", want "ALLOW_INTERNAL_ONLY"`,
		`scheduler job rollup-0 runs "0 0 1 1 *"`,
	} {
		if !containsErr(errs, want) {
			t.Errorf("the cross-check did not report %q: %v", want, errors.Join(errs...))
		}
	}
}
