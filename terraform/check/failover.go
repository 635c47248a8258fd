package check

import (
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// TransactionalProfile is the address of the single-cluster app profile that
// bigtable_transactional_cluster routes (docs/failover.md).
const TransactionalProfile = "module.engagement.google_bigtable_app_profile.transactional"

// PlanDiff lists the addresses whose planned values (known and unknown)
// differ between two plans of one environment, or that only one plan has,
// sorted.
func PlanDiff(a, b *Plan) []string {
	byAddr := func(p *Plan) map[string]ResourceChange {
		m := map[string]ResourceChange{}
		for _, rc := range p.ResourceChanges {
			m[rc.Address] = rc
		}
		return m
	}
	am, bm := byAddr(a), byAddr(b)
	var out []string
	for addr, ra := range am {
		rb, ok := bm[addr]
		if !ok || !reflect.DeepEqual(ra.Change.After, rb.Change.After) || !reflect.DeepEqual(ra.Change.AfterUnknown, rb.Change.AfterUnknown) {
			out = append(out, addr)
		}
	}
	for addr := range bm {
		if _, ok := am[addr]; !ok {
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// FailoverFlip checks that moving bigtable_transactional_cluster from one
// cluster to another (before and after: plans of one environment made with
// each value) changes the transactional app profile's cluster to the new
// one, and nothing else in the plan: no function, cluster or other profile.
func FailoverFlip(before, after *Plan, from, to string) []error {
	var errs []error
	diff := PlanDiff(before, after)
	if len(diff) != 1 || diff[0] != TransactionalProfile {
		errs = append(errs, fmt.Errorf("flipping bigtable_transactional_cluster from %q to %q changes %v, want only %s", from, to, diff, TransactionalProfile))
	}
	for _, c := range []struct {
		p    *Plan
		want string
	}{{before, from}, {after, to}} {
		rc, ok := c.p.Instances("google_bigtable_app_profile", "transactional")[""]
		if !ok {
			errs = append(errs, fmt.Errorf("no transactional app profile planned"))
			continue
		}
		if got := rc.Str("single_cluster_routing", 0, "cluster_id"); got != c.want {
			errs = append(errs, fmt.Errorf("with bigtable_transactional_cluster = %q the transactional app profile routes to %q", c.want, got))
		}
		if v, _ := rc.Get("single_cluster_routing", 0, "allow_transactional_writes").(bool); !v {
			errs = append(errs, fmt.Errorf("with bigtable_transactional_cluster = %q the transactional app profile does not allow transactional writes", c.want))
		}
	}
	return errs
}

// DegradedAlert checks that the log-based metric of the rate limits'
// degradation counts the very line shared/ratelimit writes (logMessage), and
// that an alert policy reads that metric.
func DegradedAlert(p *Plan, logMessage string) []error {
	return LogLineAlert(p, "rate_limit_degraded", logMessage)
}

// LogLineAlert checks that the log-based metric name counts the very line
// the code writes (logMessage), and that the alert policy of the same name
// reads that metric.
func LogLineAlert(p *Plan, name, logMessage string) []error {
	m, ok := p.Instances("google_logging_metric", name)[""]
	if !ok {
		return []error{fmt.Errorf("no google_logging_metric.%s planned", name)}
	}
	var errs []error
	if want := fmt.Sprintf("jsonPayload.message=%q", logMessage); !strings.Contains(m.Str("filter"), want) {
		errs = append(errs, fmt.Errorf("the %s log metric's filter %q does not count the line %s", name, m.Str("filter"), want))
	}
	a, ok := p.Instances("google_monitoring_alert_policy", name)[""]
	if !ok {
		return append(errs, fmt.Errorf("no google_monitoring_alert_policy.%s planned", name))
	}
	if f := a.Str("conditions", 0, "condition_threshold", 0, "filter"); !strings.Contains(f, "logging.googleapis.com/user/"+m.Str("name")) {
		errs = append(errs, fmt.Errorf("the %s alert reads %q, not the log metric %s", name, f, m.Str("name")))
	}
	return errs
}

// FailoverKeptRule: the transactional app profile of the module (root: a
// tree holding terraform/) ignores changes to its single_cluster_routing,
// so that the failover's one command (gcloud bigtable app-profiles update
// --route-to, docs/failover.md) is not undone by the next apply. A plan
// cannot show a lifecycle block, so the rule reads the module's HCL.
func FailoverKeptRule(root string) []error {
	p := filepath.Join(root, ModuleDir, "bigtable.tf")
	f, diags := hclparse.NewParser().ParseHCLFile(p)
	if diags.HasErrors() {
		return []error{fmt.Errorf("failover rule: %s: %s", p, diags.Error())}
	}
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type != "resource" || len(b.Labels) != 2 || b.Labels[0] != "google_bigtable_app_profile" || b.Labels[1] != "transactional" {
			continue
		}
		for _, lc := range b.Body.Blocks {
			if lc.Type != "lifecycle" {
				continue
			}
			attr, ok := lc.Body.Attributes["ignore_changes"]
			if !ok {
				continue
			}
			exprs, _ := hcl.ExprList(attr.Expr)
			for _, tr := range exprs {
				if t, d := hcl.AbsTraversalForExpr(tr); !d.HasErrors() && len(t) == 1 && t.RootName() == "single_cluster_routing" {
					return nil
				}
			}
		}
		return []error{fmt.Errorf("failover rule: google_bigtable_app_profile.transactional does not ignore changes to single_cluster_routing: the next apply would move the profile back to bigtable_transactional_cluster after a failover")}
	}
	return []error{fmt.Errorf("failover rule: %s has no google_bigtable_app_profile.transactional", p)}
}
