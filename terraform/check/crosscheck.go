package check

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/videngage/engagement/shared/topology"
)

// Plan is the part of `terraform show -json <plan>` the checks read.
type Plan struct {
	ResourceChanges []ResourceChange `json:"resource_changes"`
}

// ResourceChange is one planned resource instance.
type ResourceChange struct {
	Address string `json:"address"`
	Mode    string `json:"mode"`
	Type    string `json:"type"`
	Name    string `json:"name"`
	Index   any    `json:"index"`
	Change  struct {
		Actions      []string       `json:"actions"`
		After        map[string]any `json:"after"`
		AfterUnknown map[string]any `json:"after_unknown"`
	} `json:"change"`
}

// Key is the for_each key of the instance ("" without for_each).
func (rc ResourceChange) Key() string {
	if s, ok := rc.Index.(string); ok {
		return s
	}
	return ""
}

// Instances returns the managed instances of type.name, by key.
func (p *Plan) Instances(typ, name string) map[string]ResourceChange {
	out := map[string]ResourceChange{}
	for _, rc := range p.ResourceChanges {
		if rc.Mode == "managed" && rc.Type == typ && rc.Name == name {
			out[rc.Key()] = rc
		}
	}
	return out
}

// Str reads a string at path (attribute names and list indexes) of After.
func (rc ResourceChange) Str(path ...any) string {
	s, _ := dig(rc.Change.After, path...).(string)
	return s
}

// Num reads a number at path of After.
func (rc ResourceChange) Num(path ...any) float64 {
	f, _ := dig(rc.Change.After, path...).(float64)
	return f
}

// Get reads any value at path of After.
func (rc ResourceChange) Get(path ...any) any { return dig(rc.Change.After, path...) }

func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// keysAt lists the keys of the map at path, known or unknown.
func (rc ResourceChange) keysAt(path ...any) []string {
	seen := map[string]bool{}
	for _, src := range []map[string]any{rc.Change.After, rc.Change.AfterUnknown} {
		if m, ok := dig(src, path...).(map[string]any); ok {
			for k := range m {
				seen[k] = true
			}
		}
	}
	return sortedSet(seen)
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// diffSets reports what is only in a and only in b.
func diffSets(what, aName string, a map[string]bool, bName string, b map[string]bool) []error {
	var errs []error
	for _, k := range sortedSet(a) {
		if !b[k] {
			errs = append(errs, fmt.Errorf("%s %q is in %s but not in %s", what, k, aName, bName))
		}
	}
	for _, k := range sortedSet(b) {
		if !a[k] {
			errs = append(errs, fmt.Errorf("%s %q is in %s but not in %s", what, k, bName, aName))
		}
	}
	return errs
}

func set(items ...string) map[string]bool {
	m := map[string]bool{}
	for _, i := range items {
		m[i] = true
	}
	return m
}

var camelBoundary = regexp.MustCompile(`([a-z0-9])([A-Z])`)

// FunctionID is the deployed name of an entry point (ApplyCounters ->
// apply-counters), as terraform/modules/engagement/topology.tf derives it.
func FunctionID(name string) string {
	return strings.ToLower(camelBoundary.ReplaceAllString(name, "$1-$2"))
}

// Local-only variables that Terraform does not set: the platform sets PORT,
// and the emulator hosts exist only in the local stack.
func cloudEnvVar(name string) bool {
	return name != "PORT" && !strings.HasSuffix(name, "_EMULATOR_HOST")
}

// runtimeEnvVar reports whether the Go runtime, not shared/config, reads
// name: the functions may set it without shared/config knowing it.
func runtimeEnvVar(name string) bool { return name == "GOGC" || name == "GOMEMLIMIT" }

// CrossCheck compares a plan of terraform/envs/<env> with the code, both ways.
func CrossCheck(p *Plan, c *Code) []error {
	var errs []error
	add := func(e ...error) { errs = append(errs, e...) }
	top := c.Topology

	// --- functions: entry points, kinds, registrations, concurrency, ingress
	fns := p.Instances("google_cloudfunctions2_function", "fn")
	tfEntry, topoFn, codeFn := map[string]bool{}, map[string]bool{}, map[string]bool{}
	byEntry := map[string][]ResourceChange{} // an instance per region
	for _, rc := range fns {
		ep := rc.Str("build_config", 0, "entry_point")
		tfEntry[ep] = true
		byEntry[ep] = append(byEntry[ep], rc)
	}
	kinds := map[string]string{}
	for _, f := range top.Functions {
		topoFn[f.Name] = true
		kinds[f.Name] = f.Kind
	}
	for name := range c.Registered {
		codeFn[name] = true
	}
	add(diffSets("function entry point", "Terraform", tfEntry, "topology.json", topoFn)...)
	add(diffSets("function entry point", "Terraform", tfEntry, "the code (functions/ registrations)", codeFn)...)
	for _, f := range top.Functions {
		for _, rc := range byEntry[f.Name] {
			if got, want := rc.Str("name"), FunctionID(f.Name); got != want {
				add(fmt.Errorf("function %s is deployed as %q, want %q", f.Name, got, want))
			}
			if reg, ok := c.Registered[f.Name]; ok {
				want := "HTTP"
				if f.Kind == "event" {
					want = "Push"
				}
				if reg.Kind != want {
					add(fmt.Errorf("function %s is a %s function in topology.json but registered with %s (%s)", f.Name, f.Kind, reg.Kind, reg.Pos))
				}
				if !c.RootImport[reg.Package] {
					add(fmt.Errorf("function %s: package %s is not imported by the module root package, so Cloud Functions cannot find its entry point", f.Name, reg.Package))
				}
			}
			// Cloud Run serves more than one request at a time only with a
			// whole vCPU or more.
			conc := rc.Num("service_config", 0, "max_instance_request_concurrency")
			cpu, _ := strconv.ParseFloat(rc.Str("service_config", 0, "available_cpu"), 64)
			if conc < 1 || (conc > 1 && cpu < 1) {
				add(fmt.Errorf("function %s serves %v requests at a time on %q vCPU; Cloud Run needs 1 or more, and a whole vCPU for more than 1", f.Name, conc, rc.Str("service_config", 0, "available_cpu")))
			}
			// A push still running at the ack deadline is delivered again
			// while it runs: the function must answer within the deadline.
			if timeout := rc.Num("service_config", 0, "timeout_seconds"); f.Kind == "event" {
				for _, t := range top.PubSub.Topics {
					for _, s := range t.Subscriptions {
						if ack := s.AckDeadline(top.PubSub.Delivery); s.Function == f.Name && timeout > float64(ack) {
							add(fmt.Errorf("event function %s may run %vs, longer than the push subscriptions' ack deadline of %ds (%s)", f.Name, timeout, ack, s.Name))
						}
					}
				}
			}
			wantIngress := "ALLOW_INTERNAL_ONLY"
			if f.Kind == "http" && f.Public {
				wantIngress = "ALLOW_INTERNAL_AND_GCLB"
			}
			if got := rc.Str("service_config", 0, "ingress_settings"); got != wantIngress {
				add(fmt.Errorf("function %s has ingress %q, want %q", f.Name, got, wantIngress))
			}
		}
	}

	// --- environment variables vs shared/config
	cfgVars := map[string]bool{}
	for name := range c.EnvVars {
		if cloudEnvVar(name) {
			cfgVars[name] = true
		}
	}
	tfVars := map[string]bool{}
	for _, rc := range fns {
		ep := rc.Str("build_config", 0, "entry_point")
		fnVars := set(rc.keysAt("service_config", 0, "environment_variables")...)
		if secrets, ok := rc.Get("service_config", 0, "secret_environment_variables").([]any); ok {
			for i := range secrets {
				if k, ok := dig(secrets, i, "key").(string); ok {
					fnVars[k] = true
				}
			}
		}
		for k := range fnVars {
			if runtimeEnvVar(k) {
				continue
			}
			tfVars[k] = true
			if !cloudEnvVar(k) {
				add(fmt.Errorf("function %s sets %s, which only the local stack may set", ep, k))
			}
		}
		for k := range cfgVars {
			// The page-token secrets are the public functions' alone, the
			// viewer-hash key ApplyViews' alone (its registration's check).
			if !fnVars[k] && !(strings.HasPrefix(k, "PAGE_TOKEN_SECRET") && !isPublic(top, ep)) && !(k == "VIEWER_HASH_KEY" && ep != "ApplyViews") {
				add(fmt.Errorf("function %s does not set %s (shared/config reads it)", ep, k))
			}
		}
	}
	add(diffSets("environment variable", "Terraform", tfVars, "shared/config", cfgVars)...)
	// Names that the local stack takes from the defaults must be the same in
	// the cloud.
	for _, k := range []string{"SPANNER_INSTANCE", "SPANNER_DATABASE", "BIGTABLE_INSTANCE", "HISTORY_TOPIC", "COUNTER_TOPIC", "FIRESTORE_DATABASE"} {
		def, ok := c.EnvVars[k]
		if !ok {
			continue
		}
		for _, rc := range fns {
			if got, ok := rc.Get("service_config", 0, "environment_variables", k).(string); ok && got != def {
				add(fmt.Errorf("function %s sets %s=%q but shared/config's default (used locally) is %q", rc.Str("build_config", 0, "entry_point"), k, got, def))
			}
		}
	}

	// --- Pub/Sub
	topicsTF, topicsTopo := map[string]bool{}, map[string]bool{}
	for _, name := range []string{"topic", "dead_letter"} {
		for _, rc := range p.Instances("google_pubsub_topic", name) {
			topicsTF[rc.Str("name")] = true
		}
	}
	subsTF, subsTopo := map[string]bool{}, map[string]bool{}
	// A subscription of topology.json has one push subscription per region
	// (RegionRule): its own name in the first region, key "<name>@<region>"
	// and name "<name>-<region>" in each other.
	pushSubs := map[string][]ResourceChange{}
	for k, rc := range p.Instances("google_pubsub_subscription", "push") {
		base, region, extra := strings.Cut(k, "@")
		if want := base + "-" + region; extra && rc.Str("name") != want {
			add(fmt.Errorf("push subscription %s is named %q, want %q", rc.Address, rc.Str("name"), want))
		}
		if !extra {
			base = rc.Str("name")
		}
		subsTF[base] = true
		pushSubs[base] = append(pushSubs[base], rc)
	}
	for _, rc := range p.Instances("google_pubsub_subscription", "dead_letter") {
		subsTF[rc.Str("name")] = true
	}
	d := top.PubSub.Delivery
	dlPublishers := p.Instances("google_pubsub_topic_iam_member", "dead_letter_publisher")
	dlSubscribers := p.Instances("google_pubsub_subscription_iam_member", "dead_letter_subscriber")
	for _, t := range top.PubSub.Topics {
		topicsTopo[t.Name] = true
		topicsTopo[t.DeadLetterTopic] = true
		subsTopo[top.PubSub.DeadLetterSubscription(t.DeadLetterTopic)] = true
		if _, ok := dlPublishers[t.DeadLetterTopic]; !ok {
			add(fmt.Errorf("the Pub/Sub service agent cannot publish to dead-letter topic %s", t.DeadLetterTopic))
		}
		for _, s := range t.Subscriptions {
			subsTopo[s.Name] = true
			for _, rc := range pushSubs[s.Name] {
				if got, want := rc.Str("labels", "function"), FunctionID(s.Function); got != want {
					add(fmt.Errorf("subscription %s pushes to function %q, topology.json says %q", s.Name, got, want))
				}
				if kinds[s.Function] != "event" {
					add(fmt.Errorf("subscription %s pushes to %s, which is not an event function", s.Name, s.Function))
				}
				if reg, ok := c.Registered[s.Function]; ok && reg.Kind != "Push" {
					add(fmt.Errorf("subscription %s pushes to %s, which the code registers as %s", s.Name, s.Function, reg.Kind))
				}
				if got := rc.Num("dead_letter_policy", 0, "max_delivery_attempts"); got != float64(d.MaxDeliveryAttempts) {
					add(fmt.Errorf("subscription %s: max_delivery_attempts %v, topology.json says %d", s.Name, got, d.MaxDeliveryAttempts))
				}
				if got := rc.Num("ack_deadline_seconds"); got != float64(s.AckDeadline(d)) {
					add(fmt.Errorf("subscription %s: ack deadline %v, topology.json says %d", s.Name, got, s.AckDeadline(d)))
				}
				if got, want := rc.Str("retry_policy", 0, "minimum_backoff"), fmt.Sprintf("%ds", d.MinimumBackoffSeconds); got != want {
					add(fmt.Errorf("subscription %s: minimum backoff %q, want %q", s.Name, got, want))
				}
				if got, want := rc.Str("retry_policy", 0, "maximum_backoff"), fmt.Sprintf("%ds", d.MaximumBackoffSeconds); got != want {
					add(fmt.Errorf("subscription %s: maximum backoff %q, want %q", s.Name, got, want))
				}
				if _, ok := dlSubscribers[rc.Key()]; !ok {
					add(fmt.Errorf("the Pub/Sub service agent cannot acknowledge on %s, so dead-lettering fails", rc.Str("name")))
				}
			}
		}
	}
	add(diffSets("topic", "Terraform", topicsTF, "topology.json", topicsTopo)...)
	add(diffSets("subscription", "Terraform", subsTF, "topology.json", subsTopo)...)
	for _, k := range []string{"HISTORY_TOPIC", "COUNTER_TOPIC", "ERASURE_TOPIC", "EXPORT_TOPIC"} {
		if def, ok := c.EnvVars[k]; ok && !topicsTopo[def] {
			add(fmt.Errorf("shared/config's default %s=%q is not a topic of topology.json", k, def))
		}
	}

	// --- Spanner
	for _, rc := range p.Instances("google_spanner_instance", "main") {
		if got := rc.Str("name"); got != top.Spanner.Instance {
			add(fmt.Errorf("Spanner instance %q, topology.json says %q", got, top.Spanner.Instance))
		}
	}
	dbs := p.Instances("google_spanner_database", "main")
	if len(dbs) != 1 {
		add(fmt.Errorf("want one Spanner database, the plan has %d", len(dbs)))
	}
	for _, rc := range dbs {
		if got := rc.Str("name"); got != top.Spanner.Database {
			add(fmt.Errorf("Spanner database %q, topology.json says %q", got, top.Spanner.Database))
		}
		var ddl []string
		if l, ok := rc.Get("ddl").([]any); ok {
			for _, s := range l {
				str, _ := s.(string)
				ddl = append(ddl, str)
			}
		}
		if !reflect.DeepEqual(ddl, c.DDL) {
			add(fmt.Errorf("Spanner DDL in Terraform (%d statements) differs from topology.DDL() (%d statements):\n%s", len(ddl), len(c.DDL), firstDiff(ddl, c.DDL)))
		}
	}
	if def := c.EnvVars["SPANNER_DATABASE"]; def != "" && def != top.Spanner.Database {
		add(fmt.Errorf("shared/config's SPANNER_DATABASE default %q is not topology.json's %q", def, top.Spanner.Database))
	}
	if def := c.EnvVars["SPANNER_INSTANCE"]; def != "" && def != top.Spanner.Instance {
		add(fmt.Errorf("shared/config's SPANNER_INSTANCE default %q is not topology.json's %q", def, top.Spanner.Instance))
	}

	// --- Bigtable
	for _, rc := range p.Instances("google_bigtable_instance", "main") {
		if got := rc.Str("name"); got != top.Bigtable.Instance {
			add(fmt.Errorf("Bigtable instance %q, topology.json says %q", got, top.Bigtable.Instance))
		}
	}
	if def := c.EnvVars["BIGTABLE_INSTANCE"]; def != "" && def != top.Bigtable.Instance {
		add(fmt.Errorf("shared/config's BIGTABLE_INSTANCE default %q is not topology.json's %q", def, top.Bigtable.Instance))
	}
	famTF, famTopo := map[string]bool{}, map[string]bool{}
	for _, rc := range p.Instances("google_bigtable_table", "table") {
		fams, _ := rc.Get("column_family").([]any)
		for i := range fams {
			famTF[rc.Str("name")+"/"+fmt.Sprint(dig(fams, i, "family"))] = true
		}
		if len(fams) == 0 {
			famTF[rc.Str("name")+"/"] = true
		}
	}
	gc := p.Instances("google_bigtable_gc_policy", "family")
	for _, t := range top.Bigtable.Tables {
		for _, f := range t.Families {
			famTopo[t.Name+"/"+f.Name] = true
			_, isFixed, err := f.FixedMaxAge()
			if err != nil {
				add(err)
				continue
			}
			want, why := f.MaxAge, "topology.json's fixed maxAge"
			if !isFixed {
				days, ok := top.Bigtable.Defaults[f.MaxAgeDaysVar]
				if !ok {
					add(fmt.Errorf("family %s/%s names GC variable %q, which has no default in topology.json", t.Name, f.Name, f.MaxAgeDaysVar))
					continue
				}
				want, why = fmt.Sprintf("%dh", days*24), fmt.Sprintf("%s default %d days", f.MaxAgeDaysVar, days)
			}
			rc, ok := gc[t.Name+"/"+f.Name]
			if !ok {
				add(fmt.Errorf("family %s/%s has no GC policy in Terraform", t.Name, f.Name))
				continue
			}
			if got := rc.Str("max_age", 0, "duration"); got != want {
				add(fmt.Errorf("family %s/%s: GC max age %q, want %q (%s)", t.Name, f.Name, got, want, why))
			}
			if got := rc.Str("table"); got != "" && got != t.Name {
				add(fmt.Errorf("GC policy of %s/%s is on table %q", t.Name, f.Name, got))
			}
			if got := rc.Str("column_family"); got != f.Name {
				add(fmt.Errorf("GC policy of %s/%s is on family %q", t.Name, f.Name, got))
			}
		}
	}
	add(diffSets("Bigtable table/family", "Terraform", famTF, "topology.json", famTopo)...)
	profiles := map[string]bool{}
	for _, name := range []string{"history", "failover"} {
		for _, rc := range p.Instances("google_bigtable_app_profile", name) {
			profiles[rc.Str("app_profile_id")] = true
		}
	}
	for _, rc := range fns {
		if prof, ok := rc.Get("service_config", 0, "environment_variables", "BIGTABLE_APP_PROFILE").(string); ok && !profiles[prof] {
			add(fmt.Errorf("function %s uses Bigtable app profile %q, which Terraform does not create", rc.Str("build_config", 0, "entry_point"), prof))
		}
	}

	// --- Cloud Scheduler
	jobsTF, jobsTopo := map[string]bool{}, map[string]bool{}
	jobs := p.Instances("google_cloud_scheduler_job", "job")
	jobsByName := map[string][]ResourceChange{}
	for _, rc := range jobs {
		jobsTF[rc.Str("name")] = true
		jobsByName[rc.Str("name")] = append(jobsByName[rc.Str("name")], rc)
	}
	calls := regexp.MustCompile(`^Calls (\w+) at (\S+)$`)
	// A fanOut job of topology.json is deployed as <name>-<k>, k from 0.
	deployed := func(j topology.Scheduled) []string {
		if !j.FanOut {
			return []string{j.Name}
		}
		var names []string
		for k := 0; ; k++ {
			name := fmt.Sprintf("%s-%d", j.Name, k)
			if _, ok := jobs[name]; !ok {
				break
			}
			names = append(names, name)
		}
		if len(names) == 0 {
			return []string{j.Name + "-0"} // reported missing below
		}
		return names
	}
	for _, j := range top.Scheduler {
		for _, name := range deployed(j) {
			jobsTopo[name] = true
			// The job in every region (its instances share the name).
			for _, rc := range jobsByName[name] {
				if got := rc.Str("schedule"); got != j.Schedule {
					add(fmt.Errorf("scheduler job %s runs %q, topology.json says %q", name, got, j.Schedule))
				}
				m := calls.FindStringSubmatch(rc.Str("description"))
				if m == nil {
					add(fmt.Errorf("scheduler job %s: description %q does not say which function it calls", name, rc.Str("description")))
				} else {
					f, _ := top.Function(j.Function)
					if m[1] != j.Function {
						add(fmt.Errorf("scheduler job %s calls %s, topology.json says %s", name, m[1], j.Function))
					}
					if f.Kind != "scheduled" {
						add(fmt.Errorf("scheduler job %s targets %s, which is not a scheduled function", name, j.Function))
					}
					if len(f.Routes) == 0 || m[2] != f.Routes[0] {
						add(fmt.Errorf("scheduler job %s calls route %s, topology.json's route of %s is %v", name, m[2], j.Function, f.Routes))
					}
				}
				if reg, ok := c.Registered[j.Function]; !ok || reg.Kind != "HTTP" {
					add(fmt.Errorf("scheduler job %s targets %s, which the code does not register as an HTTP function", name, j.Function))
				}
				body, err := base64.StdEncoding.DecodeString(rc.Str("http_target", 0, "body"))
				if err != nil {
					add(fmt.Errorf("scheduler job %s: body is not base64: %v", name, err))
				} else if !sameJSON(body, j.Body) {
					add(fmt.Errorf("scheduler job %s sends %s, topology.json says %v", name, body, j.Body))
				}
				if oidc, _ := rc.Get("http_target", 0, "oidc_token").([]any); len(oidc) != 1 {
					add(fmt.Errorf("scheduler job %s calls without an OIDC token", name))
				}
			}
		}
	}
	add(diffSets("scheduler job", "Terraform", jobsTF, "topology.json", jobsTopo)...)

	// --- load balancer: one path rule per public route
	lbTF, lbTopo := map[string]bool{}, map[string]bool{}
	for _, rc := range p.Instances("google_compute_url_map", "api") {
		rules, _ := rc.Get("path_matcher", 0, "path_rule").([]any)
		for i := range rules {
			ps, _ := dig(rules, i, "paths").([]any)
			for _, x := range ps {
				lbTF[fmt.Sprint(x)] = true
			}
		}
	}
	for _, f := range top.Functions {
		if f.Kind != "http" || !f.Public {
			continue
		}
		for _, r := range f.Routes {
			if strings.HasSuffix(r, "/") {
				r += "*"
			}
			lbTopo[r] = true
		}
	}
	add(diffSets("load balancer path", "Terraform", lbTF, "topology.json's public routes", lbTopo)...)

	// --- identities and least privilege
	sas := p.Instances("google_service_account", "fn")
	grants := map[string]map[string]ResourceChange{
		"Spanner":   p.Instances("google_spanner_database_iam_member", "fn"),
		"Bigtable":  p.Instances("google_bigtable_instance_iam_member", "fn"),
		"Firestore": p.Instances("google_project_iam_member", "fn_firestore"),
		"Objects":   p.Instances("google_storage_bucket_iam_member", "fn_objects"),
	}
	publishers := map[string]map[string]bool{}
	for key := range p.Instances("google_pubsub_topic_iam_member", "fn_publisher") {
		fn, topic, _ := strings.Cut(key, "/")
		if publishers[fn] == nil {
			publishers[fn] = map[string]bool{}
		}
		publishers[fn][topic] = true
	}
	invokers := map[string]map[string]ResourceChange{
		"http":      p.Instances("google_cloud_run_v2_service_iam_member", "public_invoker"),
		"event":     p.Instances("google_cloud_run_v2_service_iam_member", "push_invoker"),
		"scheduled": p.Instances("google_cloud_run_v2_service_iam_member", "scheduler_invoker"),
	}
	for _, f := range top.Functions {
		if _, ok := sas[f.Name]; !ok {
			add(fmt.Errorf("function %s has no service account of its own", f.Name))
		}
		for kind, inv := range invokers {
			_, has := inv[f.Name]
			if want := kind == f.Kind && (kind != "http" || f.Public); has != want {
				add(fmt.Errorf("function %s (%s): %s invoker binding present=%v, want %v", f.Name, f.Kind, kind, has, want))
			}
		}
		if rc, ok := invokers["http"][f.Name]; ok && rc.Str("member") != "allUsers" {
			add(fmt.Errorf("public function %s is invocable by %q, want allUsers behind the load balancer", f.Name, rc.Str("member")))
		}
		reg, ok := c.Registered[f.Name]
		if !ok || reg.Needs == nil {
			continue
		}
		for product, g := range grants {
			_, granted := g[f.Name]
			if granted != reg.Needs[product] {
				add(fmt.Errorf("function %s: Terraform grants %s access=%v, but its registration (%s) needs it=%v", f.Name, product, granted, reg.Pos, reg.Needs[product]))
			}
		}
		if (len(publishers[f.Name]) > 0) != reg.Needs["PubSub"] {
			add(fmt.Errorf("function %s: Terraform lets it publish to %v, but its registration (%s) needs Pub/Sub=%v", f.Name, sortedSet(publishers[f.Name]), reg.Pos, reg.Needs["PubSub"]))
		}
		if reg.Needs["PubSub"] {
			add(diffSets("topic published by "+f.Name, "Terraform's grants", publishers[f.Name], "the code ("+reg.Package+")", reg.Topics)...)
		}
	}
	return errs
}

func isPublic(top *topology.Topology, name string) bool {
	f, _ := top.Function(name)
	return f.Kind == "http" && f.Public
}

func sameJSON(got []byte, want any) bool {
	var g any
	if err := json.Unmarshal(got, &g); err != nil {
		return false
	}
	w, err := json.Marshal(want)
	if err != nil {
		return false
	}
	var wv any
	_ = json.Unmarshal(w, &wv)
	return reflect.DeepEqual(g, wv)
}

func firstDiff(a, b []string) string {
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("statement %d:\n  terraform: %q\n  code:      %q", i, x, y)
		}
	}
	return ""
}

// plannedDDL is the ddl list of the plan's Spanner database.
func plannedDDL(p *Plan) []string {
	var ddl []string
	for _, rc := range p.Instances("google_spanner_database", "main") {
		if l, ok := rc.Get("ddl").([]any); ok {
			for _, s := range l {
				str, _ := s.(string)
				ddl = append(ddl, str)
			}
		}
	}
	return ddl
}

// DDLRule: the plan's Spanner DDL is exactly the applied history of
// shared/topology/ddl/ddl.lock (topology.LockedDDL of the newest commit).
// A list that loses or changes an applied statement makes the provider
// recreate the database; one with statements the lock lacks was never
// checked to be an append.
func DDLRule(p *Plan, locked []string) []error {
	ddl := plannedDDL(p)
	for i, s := range locked {
		switch {
		case i >= len(ddl):
			return []error{fmt.Errorf("DDL rule: the plan's Spanner DDL has %d statements, the applied history %d: it drops applied statements from %d on and the provider would recreate the database", len(ddl), len(locked), i+1)}
		case ddl[i] != s:
			return []error{fmt.Errorf("DDL rule: the plan's Spanner DDL changes applied statement %d (%.60q): the provider would recreate the database", i+1, s)}
		}
	}
	if len(ddl) > len(locked) {
		return []error{fmt.Errorf("DDL rule: the plan's Spanner DDL has %d statements that ddl.lock does not hold (go run ./tools/ddllock)", len(ddl)-len(locked))}
	}
	return nil
}

// SecretPinRule: every secret a function reads is read by version number,
// never "latest": "latest" is resolved when each instance starts, so during
// a rotation the instances of one revision would hold different secrets.
func SecretPinRule(p *Plan) []error {
	var errs []error
	for _, rc := range p.Instances("google_cloudfunctions2_function", "fn") {
		secrets, _ := rc.Get("service_config", 0, "secret_environment_variables").([]any)
		for i, s := range secrets {
			unknown, _ := dig(rc.Change.AfterUnknown, "service_config", 0, "secret_environment_variables", i, "version").(bool)
			if v, _ := dig(s, "version").(string); !unknown && (v == "" || v == "latest") {
				errs = append(errs, fmt.Errorf("secret pin rule: %s reads %v at version %q, not a pinned version", rc.Address, dig(s, "key"), v))
			}
		}
	}
	return errs
}

// RegionRule: every function, public, event or scheduled, runs in at least
// min regions, and in each of them it has what reaches it: a public
// function a serverless NEG (and every backend service of it one backend
// per region), an event function a push subscription of each of its
// topology.json subscriptions in that region (labels function and
// region), a scheduled function every one of its jobs (fan-out copies
// included) in that region. With min above 1, the buckets the functions
// and their builds read (the source and exports buckets) are in a multi-
// or dual-region location, not in one region.
func RegionRule(p *Plan, top *topology.Topology, min int) []error {
	var errs []error
	fnRegions := map[string]map[string]bool{}
	for _, rc := range p.Instances("google_cloudfunctions2_function", "fn") {
		ep := rc.Str("build_config", 0, "entry_point")
		if fnRegions[ep] == nil {
			fnRegions[ep] = map[string]bool{}
		}
		fnRegions[ep][rc.Str("location")] = true
	}
	negRegions := map[string]map[string]bool{}
	for k, rc := range p.Instances("google_compute_region_network_endpoint_group", "fn") {
		ep, _, _ := strings.Cut(k, "@")
		if negRegions[ep] == nil {
			negRegions[ep] = map[string]bool{}
		}
		negRegions[ep][rc.Str("region")] = true
	}
	// Push subscriptions by topology.json subscription and region: the
	// for_each key is the subscription's name, "@<region>" elsewhere.
	pushRegions := map[string]map[string]bool{}
	for k, rc := range p.Instances("google_pubsub_subscription", "push") {
		name, _, _ := strings.Cut(k, "@")
		if pushRegions[name] == nil {
			pushRegions[name] = map[string]bool{}
		}
		pushRegions[name][rc.Str("labels", "region")] = true
	}
	jobRegions := map[string]map[string]bool{}
	for _, rc := range p.Instances("google_cloud_scheduler_job", "job") {
		name := rc.Str("name")
		if jobRegions[name] == nil {
			jobRegions[name] = map[string]bool{}
		}
		jobRegions[name][rc.Str("region")] = true
	}
	jobsOf := func(fn string) []string {
		var names []string
		for _, j := range top.Scheduler {
			if j.Function != fn {
				continue
			}
			if !j.FanOut {
				names = append(names, j.Name)
				continue
			}
			for k := 0; ; k++ {
				name := fmt.Sprintf("%s-%d", j.Name, k)
				if _, ok := jobRegions[name]; !ok {
					if k == 0 {
						names = append(names, name) // reported missing below
					}
					break
				}
				names = append(names, name)
			}
		}
		return names
	}
	for _, f := range top.Functions {
		got := sortedSet(fnRegions[f.Name])
		if len(got) < min {
			errs = append(errs, fmt.Errorf("region rule: %s function %s runs in %d region(s) %v, want at least %d", f.Kind, f.Name, len(got), got, min))
		}
		switch {
		case f.Kind == "http" && f.Public:
			if negs := sortedSet(negRegions[f.Name]); fmt.Sprint(negs) != fmt.Sprint(got) {
				errs = append(errs, fmt.Errorf("region rule: public function %s runs in %v but has serverless NEGs in %v", f.Name, got, negs))
			}
			for _, name := range []string{"fn", "cdn"} {
				bs, ok := p.Instances("google_compute_backend_service", name)[f.Name]
				if !ok {
					continue
				}
				if l, _ := bs.Get("backend").([]any); len(l) != len(got) {
					errs = append(errs, fmt.Errorf("region rule: backend service %s of %s has %d backend(s), want one per region %v", name, f.Name, len(l), got))
				}
			}
		case f.Kind == "event":
			for _, t := range top.PubSub.Topics {
				for _, sub := range t.Subscriptions {
					if sub.Function != f.Name {
						continue
					}
					if pr := sortedSet(pushRegions[sub.Name]); fmt.Sprint(pr) != fmt.Sprint(got) {
						errs = append(errs, fmt.Errorf("region rule: event function %s runs in %v but subscription %s pushes from %v", f.Name, got, sub.Name, pr))
					}
				}
			}
		case f.Kind == "scheduled":
			for _, job := range jobsOf(f.Name) {
				if jr := sortedSet(jobRegions[job]); fmt.Sprint(jr) != fmt.Sprint(got) {
					errs = append(errs, fmt.Errorf("region rule: scheduled function %s runs in %v but its job %s fires in %v", f.Name, got, job, jr))
				}
			}
		}
	}
	if min > 1 {
		for _, name := range []string{"source", "exports"} {
			for _, rc := range p.Instances("google_storage_bucket", name) {
				// Every region's name has a hyphen (us-central1); no multi-
				// or predefined dual-region's does (US, EU, NAM4).
				if loc := rc.Str("location"); strings.Contains(loc, "-") {
					errs = append(errs, fmt.Errorf("region rule: bucket %s is in region %s: the functions of the other regions lose it with that region", rc.Address, loc))
				}
			}
		}
	}
	return errs
}
