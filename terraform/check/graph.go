package check

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/videngage/engagement/shared/topology"
)

// Graph is the resource dependency graph of `terraform graph` (Terraform's
// summary of the configuration: one node per resource or data block, an edge
// from a block to every block it depends on, through depends_on or a
// reference, locals and variables included). Nodes are addresses without the
// module path: "google_pubsub_topic.topic", "data.google_project.this".
type Graph struct {
	Edges map[string][]string
}

var dotEdge = regexp.MustCompile(`^\s*"([^"]+)" -> "([^"]+)"`)
var dotNode = regexp.MustCompile(`^\s*"([^"]+)" \[label=`)

// ParseGraph reads the DOT output of `terraform graph`.
func ParseGraph(dot string) *Graph {
	g := &Graph{Edges: map[string][]string{}}
	for _, line := range strings.Split(dot, "\n") {
		if m := dotEdge.FindStringSubmatch(line); m != nil {
			from, to := blockAddr(m[1]), blockAddr(m[2])
			g.Edges[from] = append(g.Edges[from], to)
		} else if m := dotNode.FindStringSubmatch(line); m != nil {
			if _, ok := g.Edges[blockAddr(m[1])]; !ok {
				g.Edges[blockAddr(m[1])] = nil
			}
		}
	}
	return g
}

// blockAddr drops the module path of an address.
func blockAddr(a string) string {
	for strings.HasPrefix(a, "module.") {
		parts := strings.SplitN(a, ".", 3)
		if len(parts) < 3 {
			return a
		}
		a = parts[2]
	}
	return a
}

// Reach lists every block that from depends on, directly or transitively.
func (g *Graph) Reach(from string) map[string]bool {
	seen := map[string]bool{}
	stack := []string{from}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range g.Edges[n] {
			if !seen[d] {
				seen[d] = true
				stack = append(stack, d)
			}
		}
	}
	return seen
}

// Nodes lists the blocks of the graph, sorted.
func (g *Graph) Nodes() []string {
	out := make([]string, 0, len(g.Edges))
	for n := range g.Edges {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// blockType is the resource type of a block address ("data." and
// "ephemeral." kept).
func blockType(addr string) string {
	parts := strings.Split(addr, ".")
	if (parts[0] == "data" || parts[0] == "ephemeral") && len(parts) >= 3 {
		return parts[0] + "." + parts[1]
	}
	return parts[0]
}

// blockOf is the block address of a planned instance.
func blockOf(rc ResourceChange) string {
	a := blockAddr(rc.Address)
	if i := strings.Index(a, "["); i >= 0 {
		a = a[:i]
	}
	return a
}

// instancesOf groups the planned managed instances by block.
func instancesOf(p *Plan) map[string][]ResourceChange {
	out := map[string][]ResourceChange{}
	for _, rc := range p.ResourceChanges {
		if rc.Mode == "managed" {
			out[blockOf(rc)] = append(out[blockOf(rc)], rc)
		}
	}
	return out
}

// BootstrapAPIs are on before the first apply: enabling any API needs Service
// Usage, and reading or changing the project's IAM policy needs Resource
// Manager (docs/deploy.md enables both by hand).
var BootstrapAPIs = []string{"serviceusage.googleapis.com", "cloudresourcemanager.googleapis.com"}

// APIs lists, for every resource and data source type terraform/ uses, the
// Google APIs its create calls need. A type missing here fails the check, so
// a new type is classified when it is added. random_* and time_* need none.
var APIs = map[string][]string{
	"data.google_project":    {"cloudresourcemanager.googleapis.com"},
	"google_project_service": {"serviceusage.googleapis.com"},
	// And the API of the service it names (APIRule adds it).
	"google_project_service_identity":              {"serviceusage.googleapis.com"},
	"google_project_iam_member":                    {"cloudresourcemanager.googleapis.com"},
	"google_project_iam_audit_config":              {"cloudresourcemanager.googleapis.com"},
	"google_service_account":                       {"iam.googleapis.com"},
	"google_service_account_iam_member":            {"iam.googleapis.com"},
	"google_bigtable_instance":                     {"bigtableadmin.googleapis.com"},
	"google_bigtable_table":                        {"bigtableadmin.googleapis.com"},
	"google_bigtable_gc_policy":                    {"bigtableadmin.googleapis.com"},
	"google_bigtable_app_profile":                  {"bigtableadmin.googleapis.com"},
	"google_bigtable_instance_iam_member":          {"bigtableadmin.googleapis.com"},
	"google_cloud_run_v2_service_iam_member":       {"run.googleapis.com"},
	"google_cloud_scheduler_job":                   {"cloudscheduler.googleapis.com"},
	"google_cloud_quotas_quota_preference":         {"cloudquotas.googleapis.com"},
	"google_cloudfunctions2_function":              {"cloudfunctions.googleapis.com", "run.googleapis.com", "cloudbuild.googleapis.com", "artifactregistry.googleapis.com"},
	"google_compute_backend_service":               {"compute.googleapis.com"},
	"google_compute_global_address":                {"compute.googleapis.com"},
	"google_compute_global_forwarding_rule":        {"compute.googleapis.com"},
	"google_compute_managed_ssl_certificate":       {"compute.googleapis.com"},
	"google_compute_region_network_endpoint_group": {"compute.googleapis.com"},
	"google_compute_security_policy":               {"compute.googleapis.com"},
	"google_compute_ssl_policy":                    {"compute.googleapis.com"},
	"google_billing_budget":                        {"billingbudgets.googleapis.com"},
	"google_identity_platform_config":              {"identitytoolkit.googleapis.com"},
	"google_compute_target_http_proxy":             {"compute.googleapis.com"},
	"google_compute_target_https_proxy":            {"compute.googleapis.com"},
	"google_compute_url_map":                       {"compute.googleapis.com"},
	"google_firestore_database":                    {"firestore.googleapis.com"},
	"google_firestore_backup_schedule":             {"firestore.googleapis.com"},
	"google_logging_metric":                        {"logging.googleapis.com"},
	"google_monitoring_alert_policy":               {"monitoring.googleapis.com"},
	"google_monitoring_notification_channel":       {"monitoring.googleapis.com"},
	"google_monitoring_metric_descriptor":          {"monitoring.googleapis.com"},
	"google_monitoring_dashboard":                  {"monitoring.googleapis.com"},
	"google_pubsub_topic":                          {"pubsub.googleapis.com"},
	"google_pubsub_subscription":                   {"pubsub.googleapis.com"},
	"google_pubsub_topic_iam_member":               {"pubsub.googleapis.com"},
	"google_pubsub_subscription_iam_member":        {"pubsub.googleapis.com"},
	"google_secret_manager_secret":                 {"secretmanager.googleapis.com"},
	"google_secret_manager_secret_version":         {"secretmanager.googleapis.com"},
	"google_secret_manager_secret_iam_member":      {"secretmanager.googleapis.com"},
	"google_spanner_instance":                      {"spanner.googleapis.com"},
	"google_spanner_database":                      {"spanner.googleapis.com"},
	"google_spanner_database_iam_member":           {"spanner.googleapis.com"},
	"google_spanner_backup_schedule":               {"spanner.googleapis.com"},
	"google_storage_bucket":                        {"storage.googleapis.com"},
	"google_storage_bucket_object":                 {"storage.googleapis.com"},
	"google_storage_bucket_iam_member":             {"storage.googleapis.com"},
}

// APIRule: every block whose type needs a Google API depends, directly or
// through references, on a google_project_service block that enables it
// (unless it is a bootstrap API), through a time_sleep of at least
// APIPropagation after that enablement. On a fresh project most APIs are
// off, Terraform creates whatever does not depend on the enablement in
// parallel with it, and an API answers SERVICE_DISABLED for a while after
// its enablement returns.
func APIRule(p *Plan, g *Graph) []error {
	var errs []error
	naps, _ := sleeps(p)               // the propagation rule reports a bad duration
	enabledBy := map[string][]string{} // api -> google_project_service blocks
	for block, rcs := range instancesOf(p) {
		if blockType(block) != "google_project_service" {
			continue
		}
		for _, rc := range rcs {
			enabledBy[rc.Str("service")] = append(enabledBy[rc.Str("service")], block)
		}
	}
	for _, n := range g.Nodes() {
		typ := blockType(n)
		if local := strings.TrimPrefix(strings.TrimPrefix(typ, "data."), "ephemeral."); strings.HasPrefix(local, "random_") || strings.HasPrefix(local, "time_") {
			continue
		}
		apis, ok := APIs[typ]
		if !ok {
			errs = append(errs, fmt.Errorf("API rule: no API is known for %s (%s); add the type to check.APIs", typ, n))
			continue
		}
		reach := g.Reach(n)
		if typ == "google_project_service_identity" {
			apis = append([]string(nil), apis...)
			for _, rc := range instancesOf(p)[n] {
				apis = append(apis, rc.Str("service"))
			}
		}
		for _, api := range apis {
			if contains(BootstrapAPIs, api) {
				continue
			}
			blocks := enabledBy[api]
			if len(blocks) == 0 {
				errs = append(errs, fmt.Errorf("API rule: %s needs %s, which no google_project_service enables", n, api))
				continue
			}
			found, waited := false, false
			for _, b := range blocks {
				found = found || reach[b]
				waited = waited || reach[b] && waitsFor(g, naps, n, b, APIPropagation)
			}
			if !found {
				errs = append(errs, fmt.Errorf("API rule: %s needs %s but does not depend on its enablement (%s)", n, api, strings.Join(blocks, ", ")))
			} else if !waited {
				errs = append(errs, fmt.Errorf("API rule: %s needs %s but does not wait a time_sleep of at least %s after its enablement (%s)", n, api, APIPropagation, strings.Join(blocks, ", ")))
			}
		}
	}
	return errs
}

// BuiltinMetricPrefixes are the metric types Google Cloud defines on every
// project (https://cloud.google.com/monitoring/api/metrics_gcp): an alert may
// name them before anything was written. Any other metric type — user log
// metrics (logging.googleapis.com/user/), custom., external., workload. and
// prometheus.googleapis.com/ — exists only once created, so it must be
// created in the same apply.
var BuiltinMetricPrefixes = []string{
	"pubsub.googleapis.com/",
	"run.googleapis.com/",
	"cloudfunctions.googleapis.com/",
	"spanner.googleapis.com/",
	"bigtable.googleapis.com/",
	"firestore.googleapis.com/",
	"loadbalancing.googleapis.com/",
	"networksecurity.googleapis.com/",
	"cloudscheduler.googleapis.com/",
	"serviceruntime.googleapis.com/",
	// The count of log entries by resource and severity, on every project.
	"logging.googleapis.com/log_entry_count",
}

// metricTypeRef finds metric types in filters, as HCL strings or inside a
// JSON document (a dashboard's, where the quotes are escaped).
var metricTypeRef = regexp.MustCompile(`metric\.type\s*=\s*\\?"([^"\\]+)\\?"`)

// metricConsumers are the types whose configuration names metrics.
var metricConsumers = []string{"google_monitoring_alert_policy", "google_monitoring_dashboard", "google_monitoring_slo"}

// MetricRule: no alert policy, dashboard or SLO names a metric type that is
// neither built in nor created by a block it depends on. Cloud Monitoring
// refuses an alert on a metric type that does not exist yet.
func MetricRule(p *Plan, g *Graph) []error {
	var errs []error
	created := map[string]string{} // metric type -> block creating it
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" {
			continue
		}
		switch rc.Type {
		case "google_logging_metric":
			created["logging.googleapis.com/user/"+rc.Str("name")] = blockOf(rc)
		case "google_monitoring_metric_descriptor":
			created[rc.Str("type")] = blockOf(rc)
		}
	}
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || !contains(metricConsumers, rc.Type) {
			continue
		}
		for _, u := range unknownStrings(rc.Change.AfterUnknown, "") {
			if strings.Contains(u, "filter") || strings.Contains(u, "query") || strings.Contains(u, "json") {
				errs = append(errs, fmt.Errorf("metric rule: %s: %s is unknown at plan time, so the metrics it names cannot be checked", rc.Address, u))
			}
		}
		if dig(rc.Change.After, "conditions") != nil {
			for i, c := range rc.Get("conditions").([]any) {
				for _, q := range []string{"condition_prometheus_query_language", "condition_monitoring_query_language", "condition_sql"} {
					if l, _ := dig(c, q).([]any); len(l) > 0 {
						errs = append(errs, fmt.Errorf("metric rule: %s condition %d uses %s, whose metric names this check does not read; use a filter", rc.Address, i, q))
					}
				}
			}
		}
		reach := g.Reach(blockOf(rc))
		for _, s := range allStrings(rc.Change.After) {
			for _, m := range metricTypeRef.FindAllStringSubmatch(s, -1) {
				mt := m[1]
				if hasAnyPrefix(mt, BuiltinMetricPrefixes) {
					continue
				}
				block, ok := created[mt]
				switch {
				case !ok:
					errs = append(errs, fmt.Errorf("metric rule: %s names metric %s, which is not built in and which nothing in this apply creates", rc.Address, mt))
				case !reach[block]:
					errs = append(errs, fmt.Errorf("metric rule: %s names metric %s but does not depend on %s, which creates it", rc.Address, mt, block))
				}
			}
		}
	}
	return errs
}

// GrantRule: every IAM grant a first request needs exists before the
// resource that makes that request. A push subscription starts delivering
// when created (its push identity needs run.invoker on the function, and
// the Pub/Sub service agent needs to mint that identity's tokens); a
// scheduler job calls on its first tick (run.invoker for its identity); a
// function is built as soon as it is created (the build identity needs
// logs, Artifact Registry, and the source and staging buckets).
func GrantRule(p *Plan, g *Graph, top *topology.Topology) []error {
	var errs []error
	byBlock := instancesOf(p)
	// grants lists the (block, instance) grants of role that block from
	// depends on, with the instance's attribute attr.
	grants := func(from, role, attr string) map[string]bool {
		out := map[string]bool{}
		for b := range g.Reach(from) {
			for _, rc := range byBlock[b] {
				if strings.HasSuffix(rc.Type, "_iam_member") && rc.Str("role") == role {
					out[rc.Str(attr)] = true
				}
			}
		}
		return out
	}
	// pubsubAgentGrants lists the grants of role that block from depends on
	// whose member is the Pub/Sub service agent: the grant's block reaches
	// the google_project_service_identity of pubsub.googleapis.com its
	// member is taken from (unknown at plan time, so the member itself
	// cannot tell). A function's grant of the same role to itself (signBlob)
	// mints no push identity's token.
	pubsubAgentGrants := func(from, role string) map[string]bool {
		out := map[string]bool{}
		for b := range g.Reach(from) {
			agent := false
			for d := range g.Reach(b) {
				for _, rc := range byBlock[d] {
					agent = agent || rc.Type == "google_project_service_identity" && rc.Str("service") == "pubsub.googleapis.com"
				}
			}
			for _, rc := range byBlock[b] {
				if agent && strings.HasSuffix(rc.Type, "_iam_member") && rc.Str("role") == role {
					out[rc.Address] = true
				}
			}
		}
		return out
	}
	for block, rcs := range byBlock {
		switch blockType(block) {
		case "google_pubsub_subscription":
			invokers := grants(block, "roles/run.invoker", "name")
			minters := pubsubAgentGrants(block, "roles/iam.serviceAccountTokenCreator")
			for _, rc := range rcs {
				if l, _ := rc.Get("push_config").([]any); len(l) == 0 {
					continue
				}
				fn := rc.Str("labels", "function")
				if !invokers[fn] {
					errs = append(errs, fmt.Errorf("grant rule: push subscription %s is created before its push identity may invoke function %q (roles/run.invoker)", rc.Address, fn))
				}
				if len(minters) == 0 {
					errs = append(errs, fmt.Errorf("grant rule: push subscription %s is created before the Pub/Sub service agent may mint the push identity's tokens (roles/iam.serviceAccountTokenCreator)", rc.Address))
				}
			}
		case "google_cloud_scheduler_job":
			invokers := grants(block, "roles/run.invoker", "name")
			for _, rc := range rcs {
				j, ok := top.Job(rc.Str("name"))
				fn := FunctionID(j.Function)
				if !ok {
					errs = append(errs, fmt.Errorf("grant rule: scheduler job %s is not in topology.json", rc.Address))
				} else if !invokers[fn] {
					errs = append(errs, fmt.Errorf("grant rule: scheduler job %s is created before its identity may invoke function %q (roles/run.invoker)", rc.Address, fn))
				}
			}
		case "google_cloudfunctions2_function":
			reach := g.Reach(block)
			roles := map[string]bool{}
			for b := range reach {
				for _, rc := range byBlock[b] {
					if strings.HasSuffix(rc.Type, "_iam_member") {
						roles[rc.Type+" "+rc.Str("role")] = true
					}
				}
			}
			for _, rc := range rcs {
				secrets, _ := rc.Get("service_config", 0, "secret_environment_variables").([]any)
				for _, s := range secrets {
					if !roles["google_secret_manager_secret_iam_member roles/secretmanager.secretAccessor"] {
						errs = append(errs, fmt.Errorf("grant rule: %s reads secret %v before its runtime identity may (roles/secretmanager.secretAccessor)", block, dig(s, "key")))
						break
					}
				}
			}
			for _, want := range []string{
				"google_project_iam_member roles/logging.logWriter",
				"google_project_iam_member roles/artifactregistry.writer",
				"google_project_iam_member roles/storage.objectAdmin",
				"google_storage_bucket_iam_member roles/storage.objectViewer",
			} {
				if !roles[want] {
					errs = append(errs, fmt.Errorf("grant rule: %s is built before its build identity has %s", block, want))
				}
			}
		}
	}
	// A Google service agent (service-<n>@gcp-sa-*.iam.gserviceaccount.com)
	// appears some time after its API is enabled; a grant to it written out
	// by hand can run before it exists. Taken from the
	// google_project_service_identity that creates it, the member is
	// unknown at plan time and the grant waits for it.
	for _, rc := range p.ResourceChanges {
		if rc.Mode == "managed" && strings.HasSuffix(rc.Type, "_iam_member") && strings.Contains(rc.Str("member"), "@gcp-sa-") {
			errs = append(errs, fmt.Errorf("grant rule: %s grants to the service agent %s written out by hand; take it from google_project_service_identity so that it exists first", rc.Address, rc.Str("member")))
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// SchemaRule: every function is deployed after the Spanner database, whose
// DDL is the schema the function's code reads. An apply that adds a column
// (shared/topology/ddl) and the code reading it would otherwise update both
// at once, and the new code could serve before the column exists.
func SchemaRule(p *Plan, g *Graph) []error {
	var errs []error
	byBlock := instancesOf(p)
	var dbs []string
	for block := range byBlock {
		if blockType(block) == "google_spanner_database" {
			dbs = append(dbs, block)
		}
	}
	for block := range byBlock {
		if blockType(block) != "google_cloudfunctions2_function" {
			continue
		}
		reach := g.Reach(block)
		for _, db := range dbs {
			if !reach[db] {
				errs = append(errs, fmt.Errorf("schema rule: %s is deployed without waiting for %s, whose schema its code reads", block, db))
			}
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// Waits for what Google propagates after the call that makes it returns.
const (
	// LogMetricPropagation: Cloud Monitoring answers 404 to an alert policy
	// on a log-based metric "created recently" for "up to 10 minutes" (its
	// own error message; terraform-provider-google issue 11102).
	LogMetricPropagation = 10 * time.Minute
	// GrantPropagation: "Changes to allow or deny policies typically
	// propagate in 2 minutes, but could potentially take 7 minutes or
	// longer" (https://cloud.google.com/iam/docs/access-change-propagation).
	// A function built or started before its identity's grants hold fails
	// the apply; the pipeline's rerun is a new plan, build and approval.
	GrantPropagation = 7 * time.Minute
	// APIPropagation: a Google API answers SERVICE_DISABLED for a while
	// after its enablement returns; its error says "If you enabled this API
	// recently, wait a few minutes for the action to propagate to our
	// systems and retry". Five minutes is "a few" read generously.
	APIPropagation = 5 * time.Minute
)

// sleeps lists the time_sleep blocks of the plan with their create_duration.
func sleeps(p *Plan) (map[string]time.Duration, []error) {
	out := map[string]time.Duration{}
	var errs []error
	for block, rcs := range instancesOf(p) {
		if blockType(block) != "time_sleep" {
			continue
		}
		for _, rc := range rcs {
			d, err := time.ParseDuration(rc.Str("create_duration"))
			if err != nil {
				errs = append(errs, fmt.Errorf("propagation rule: %s: create_duration %q is not a duration known at plan time", rc.Address, rc.Str("create_duration")))
				continue
			}
			if old, ok := out[block]; !ok || d < old {
				out[block] = d
			}
		}
	}
	return out, errs
}

// waitsFor says whether from reaches target only after a time_sleep of at
// least min that itself depends on target.
func waitsFor(g *Graph, naps map[string]time.Duration, from, target string, min time.Duration) bool {
	reach := g.Reach(from)
	for s, d := range naps {
		if d >= min && reach[s] && g.Reach(s)[target] {
			return true
		}
	}
	return false
}

// PropagationRule: what Google creates is not usable the moment the call
// returns, and graph order alone cannot wait for it; a time_sleep between
// the two does. Every alert policy, dashboard or SLO that names a log-based
// metric created in this apply waits LogMetricPropagation after that
// metric; every function waits GrantPropagation after every IAM grant it
// depends on (its build runs as the build identity the moment it is
// created, and its revision starts as its runtime identity).
func PropagationRule(p *Plan, g *Graph) []error {
	naps, errs := sleeps(p)
	metricBlock := map[string]string{} // metric type -> google_logging_metric block
	for _, rc := range p.ResourceChanges {
		if rc.Mode == "managed" && rc.Type == "google_logging_metric" {
			metricBlock["logging.googleapis.com/user/"+rc.Str("name")] = blockOf(rc)
		}
	}
	seen := map[string]bool{}
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || !contains(metricConsumers, rc.Type) {
			continue
		}
		for _, s := range allStrings(rc.Change.After) {
			for _, m := range metricTypeRef.FindAllStringSubmatch(s, -1) {
				mb, ok := metricBlock[m[1]]
				key := blockOf(rc) + " " + mb
				if !ok || seen[key] {
					continue
				}
				seen[key] = true
				if !waitsFor(g, naps, blockOf(rc), mb, LogMetricPropagation) {
					errs = append(errs, fmt.Errorf("propagation rule: %s reads log-based metric %s without a time_sleep of at least %s after %s (the API answers 404 meanwhile)", blockOf(rc), m[1], LogMetricPropagation, mb))
				}
			}
		}
	}
	for block := range instancesOf(p) {
		if blockType(block) != "google_cloudfunctions2_function" {
			continue
		}
		for dep := range g.Reach(block) {
			if !strings.HasSuffix(blockType(dep), "_iam_member") {
				continue
			}
			if !waitsFor(g, naps, block, dep, GrantPropagation) {
				errs = append(errs, fmt.Errorf("propagation rule: %s uses grant %s without a time_sleep of at least %s after it", block, dep, GrantPropagation))
			}
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

// GraphRules runs the fresh-project and ordering rules.
func GraphRules(p *Plan, g *Graph, top *topology.Topology) []error {
	var errs []error
	errs = append(errs, APIRule(p, g)...)
	errs = append(errs, MetricRule(p, g)...)
	errs = append(errs, GrantRule(p, g, top)...)
	errs = append(errs, SchemaRule(p, g)...)
	errs = append(errs, PropagationRule(p, g)...)
	errs = append(errs, BigtableScalingRule(p)...)
	errs = append(errs, OutlierRule(p)...)
	return errs
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// allStrings lists every string in v.
func allStrings(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = append(out, x)
	case []any:
		for _, e := range x {
			out = append(out, allStrings(e)...)
		}
	case map[string]any:
		for _, e := range x {
			out = append(out, allStrings(e)...)
		}
	}
	return out
}

// unknownStrings lists the paths of after_unknown that are true.
func unknownStrings(v any, path string) []string {
	var out []string
	switch x := v.(type) {
	case bool:
		if x {
			out = append(out, path)
		}
	case []any:
		for i, e := range x {
			out = append(out, unknownStrings(e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case map[string]any:
		for k, e := range x {
			out = append(out, unknownStrings(e, strings.TrimPrefix(path+"."+k, "."))...)
		}
	}
	return out
}
