package check

import (
	"errors"
	"strings"
	"testing"

	rollupfn "github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/ratelimit"
)

// The clusters of prod (terraform/envs/prod/variables.tf).
const (
	prodPrimary   = "engagement-c1"
	prodSecondary = "engagement-c2"
)

// flipPlans plans prod on the tree at root with the transactional profile
// on prod's primary cluster and on its secondary one: one tree, so that
// nothing but the variable differs between the plans.
func flipPlans(t *testing.T, root string) (before, after *Plan) {
	t.Helper()
	plan := func(cluster string) *Plan {
		r, err := toolchain.CheckEnvironment(root, "prod", "-var", "bigtable_transactional_cluster="+cluster)
		if err != nil {
			t.Fatal(err)
		}
		return r.PlanJSON
	}
	return plan(prodPrimary), plan(prodSecondary)
}

// The cluster the transactional profile is created on is one variable:
// changing it changes the transactional app profile and nothing else;
// prod's default is its primary cluster. (An existing profile is moved by
// the failover's gcloud command, which Terraform then keeps:
// TestFailoverKept.)
func TestTransactionalFailoverFlip(t *testing.T) {
	res, errs := envResults(t)
	if errs["prod"] != nil {
		t.Fatal(errs["prod"])
	}
	if got := res["prod"].PlanJSON.Instances("google_bigtable_app_profile", "transactional")[""].Str("single_cluster_routing", 0, "cluster_id"); got != prodPrimary {
		t.Errorf("prod's transactional app profile routes to %q by default, want %q", got, prodPrimary)
	}
	before, after := flipPlans(t, copyOf(t, nil))
	for _, e := range FailoverFlip(before, after, prodPrimary, prodSecondary) {
		t.Error(e)
	}
	// A cluster that is not one of the instance's does not plan.
	t.Run("unknown cluster", func(t *testing.T) {
		_, err := toolchain.CheckEnvironment(copyOf(t, nil), "prod", "-var", "bigtable_transactional_cluster=engagement-c9")
		if err == nil || !containsErr([]error{err}, "must be the id of one of bigtable_clusters") {
			t.Fatalf("an unknown cluster planned: %v", err)
		}
	})
}

// The failover is one gcloud command (docs/failover.md), and Terraform keeps
// what it did: the transactional profile ignores changes to its routing. A
// copy without that fails.
func TestFailoverKept(t *testing.T) {
	for _, e := range FailoverKeptRule(repo) {
		t.Error(e)
	}
	t.Run("broken: the next apply moves the profile back", func(t *testing.T) {
		root := copyOf(t, replaceIn(t, "bigtable.tf", "    ignore_changes = [single_cluster_routing]\n", "    ignore_changes = [description]\n"))
		if errs := FailoverKeptRule(root); !containsErr(errs, "does not ignore changes to single_cluster_routing") {
			t.Fatalf("the failover rule did not report it: %v", errors.Join(errs...))
		}
	})
}

// Broken copies: a profile that ignores the variable, and a variable that
// moves more than the profile, fail the flip check.
func TestTransactionalFailoverFlipFailsWhenBroken(t *testing.T) {
	needToolchain(t)
	cases := []struct {
		name string
		edit func(root string)
		want string
	}{
		{
			name: "profile ignores the variable",
			edit: replaceIn(t, "bigtable.tf", "cluster_id                 = coalesce(var.bigtable_transactional_cluster, var.bigtable_clusters[0].id)", "cluster_id                 = var.bigtable_clusters[0].id"),
			want: `with bigtable_transactional_cluster = "engagement-c2" the transactional app profile routes to "engagement-c1"`,
		},
		{
			name: "the variable also changes the functions",
			edit: replaceIn(t, "functions.tf", "BIGTABLE_TRANSACTIONAL_APP_PROFILE = google_bigtable_app_profile.transactional.app_profile_id", `BIGTABLE_TRANSACTIONAL_APP_PROFILE = "${google_bigtable_app_profile.transactional.app_profile_id}${var.bigtable_transactional_cluster == var.bigtable_clusters[0].id ? "" : "-"}"`),
			want: "module.engagement.google_cloudfunctions2_function.fn",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before, after := flipPlans(t, copyOf(t, tc.edit))
			errs := FailoverFlip(before, after, prodPrimary, prodSecondary)
			if !containsErr(errs, tc.want) {
				t.Fatalf("the flip check did not report %q; it said: %v", tc.want, errors.Join(errs...))
			}
			t.Logf("fails as it must: %v", errors.Join(errs...))
		})
	}
}

// The alert on the rate limits' degradation counts the line the limiter
// writes; a plan whose metric counts another line fails.
func TestDegradedAlert(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		if errs[env] != nil {
			t.Fatalf("%s: %v", env, errs[env])
		}
		for _, e := range DegradedAlert(res[env].PlanJSON, ratelimit.LogDegraded) {
			t.Errorf("%s: %v", env, e)
		}
	}
	var broken Plan
	for _, rc := range res["dev"].PlanJSON.ResourceChanges {
		if rc.Type == "google_logging_metric" && rc.Name == "rate_limit_degraded" {
			after := map[string]any{}
			for k, v := range rc.Change.After {
				after[k] = v
			}
			after["filter"] = strings.Replace(after["filter"].(string), ratelimit.LogDegraded, "ratelimit: degraded", 1)
			rc.Change.After = after
		}
		broken.ResourceChanges = append(broken.ResourceChanges, rc)
	}
	if errs := DegradedAlert(&broken, ratelimit.LogDegraded); !containsErr(errs, "does not count the line") {
		t.Errorf("a metric counting another line passed: %v", errors.Join(errs...))
	}
}

// The alert on stalled counters counts the line the rollup writes; a plan
// whose metric counts another line, or whose alert reads another metric,
// fails.
func TestStalledCountersAlert(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		if errs[env] != nil {
			t.Fatalf("%s: %v", env, errs[env])
		}
		for _, e := range LogLineAlert(res[env].PlanJSON, "stalled_counters", rollupfn.LogStalled) {
			t.Errorf("%s: %v", env, e)
		}
	}
	broken := func(typ, field, from, to string) *Plan {
		var p Plan
		for _, rc := range res["dev"].PlanJSON.ResourceChanges {
			if rc.Type == typ && rc.Name == "stalled_counters" {
				after := map[string]any{}
				for k, v := range rc.Change.After {
					after[k] = v
				}
				if field == "filter" {
					after[field] = strings.Replace(after[field].(string), from, to, 1)
				} else {
					after["conditions"] = []any{map[string]any{"condition_threshold": []any{map[string]any{"filter": to}}}}
				}
				rc.Change.After = after
			}
			p.ResourceChanges = append(p.ResourceChanges, rc)
		}
		return &p
	}
	if errs := LogLineAlert(broken("google_logging_metric", "filter", rollupfn.LogStalled, "rollup: stalled"), "stalled_counters", rollupfn.LogStalled); !containsErr(errs, "does not count the line") {
		t.Errorf("a metric counting another line passed: %v", errors.Join(errs...))
	}
	other := `metric.type = "logging.googleapis.com/user/engagement/rollup_lag_seconds"`
	if errs := LogLineAlert(broken("google_monitoring_alert_policy", "conditions", "", other), "stalled_counters", rollupfn.LogStalled); !containsErr(errs, "not the log metric") {
		t.Errorf("an alert reading another metric passed: %v", errors.Join(errs...))
	}
}
