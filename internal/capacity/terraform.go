package capacity

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/videngage/engagement/shared/topology"
)

// Paths of the Terraform the model reads, from the repository root.
const (
	moduleDir = "terraform/modules/engagement"
	envsDir   = "terraform/envs"
	// topologyFile is the file the module reads with jsondecode(file(...)).
	topologyFile = "shared/topology/topology.json"
)

// Function is one deployed function as Terraform configures it: the values
// its google_cloudfunctions2_function.service_config evaluates to.
type Function struct {
	Name   string
	Kind   string // topology.KindHTTP, KindScheduled, KindEvent
	Public bool
	// CPU in vCPUs and memory in MiB of one instance.
	CPU       float64
	MemoryMiB float64
	Timeout   int // seconds
	// Concurrency is max_instance_request_concurrency: requests one
	// instance serves at once.
	Concurrency  int
	MinInstances int
	MaxInstances int
}

// Slots is how many requests the function serves at once at most.
func (f Function) Slots() int { return f.Concurrency * f.MaxInstances }

// Spanner is the instance's compute capacity.
type Spanner struct {
	Config  string // regional-<region>, or a multi-region such as nam6
	Edition string
	// ProcessingUnits is the fixed capacity, or the autoscaler's minimum.
	ProcessingUnits int
	// MaxProcessingUnits is what the instance can reach: the autoscaler's
	// maximum, or the fixed capacity.
	MaxProcessingUnits int
	// HighPriorityCPUPercent is the autoscaler's target (0: fixed).
	HighPriorityCPUPercent float64
}

// MultiRegion reports whether the configuration spans regions.
func (s Spanner) MultiRegion() bool { return !strings.HasPrefix(s.Config, "regional-") }

// BigtableCluster is one cluster of the Bigtable instance.
type BigtableCluster struct {
	ID                 string
	Zone               string
	MinNodes, MaxNodes int
	StorageType        string
}

// Job is a Cloud Scheduler job of topology.json.
type Job struct {
	Name, Function, Schedule string
	Body                     map[string]any
}

// Detection is the manipulation detection's layout and fan-out as the
// module's detection variable sets them.
type Detection struct {
	Partitions, MergeBuckets, MaxShareCandidates int
	// Jobs is how many Cloud Scheduler jobs call DetectManipulation.
	Jobs int
}

// Deployment is an environment as Terraform would deploy it.
type Deployment struct {
	Env       string
	Region    string
	Functions map[string]Function
	// Jobs are the Cloud Scheduler jobs as the module deploys them (a
	// fanOut job of topology.json as its copies).
	Jobs      []Job
	Detection Detection
	Spanner   Spanner
	Bigtable  []BigtableCluster
	// Pushes are the functions each topic's push subscriptions call.
	Pushes map[string][]string
	// Regions are where every function, job and push subscription runs:
	// Region first.
	Regions []string
	// Quotas are what the environment asks Google Cloud for (nil: none).
	Quotas *Quotas
}

// FunctionNames are the deployment's functions in name order.
func (d *Deployment) FunctionNames() []string {
	var ns []string
	for n := range d.Functions {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// LoadDeployment reads the environment env (terraform/envs/<env>) of the
// repository at root: each module input as the environment's main.tf passes
// it (the environment's variable defaults) or the module's default, the
// function settings evaluated from the module's own expressions in
// functions.tf, and the functions and jobs of topology.json.
func LoadDeployment(root, env string) (*Deployment, error) {
	top, err := readTopology(root)
	if err != nil {
		return nil, err
	}
	p := hclparse.NewParser()
	envBodies, err := parseDir(p, filepath.Join(root, envsDir, env))
	if err != nil {
		return nil, err
	}
	modBodies, err := parseDir(p, filepath.Join(root, moduleDir))
	if err != nil {
		return nil, err
	}
	envVars, err := variableDefaults(envBodies)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", envsDir, env, err)
	}
	modDefaults, err := variableDefaults(modBodies)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", moduleDir, err)
	}
	args, err := moduleArguments(envBodies)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", envsDir, env, err)
	}
	envCtx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": cty.ObjectVal(envVars)}, Functions: functions()}
	// input is the module variable name as the module sees it.
	input := func(name string) (cty.Value, error) {
		if e, ok := args[name]; ok {
			v, diags := e.Value(envCtx)
			if diags.HasErrors() {
				return cty.NilVal, fmt.Errorf("module argument %s: %s", name, diags.Error())
			}
			return v, nil
		}
		if v, ok := modDefaults[name]; ok {
			return v, nil
		}
		return cty.NilVal, fmt.Errorf("module input %s: neither passed by %s/%s nor defaulted in %s", name, envsDir, env, moduleDir)
	}

	d := &Deployment{Env: env, Functions: map[string]Function{}, Pushes: map[string][]string{}}
	region, err := input("region")
	if err != nil {
		return nil, err
	}
	if d.Region, err = str(region); err != nil {
		return nil, fmt.Errorf("region: %w", err)
	}
	if err := d.readRegions(input); err != nil {
		return nil, err
	}
	if err := d.readQuotas(input); err != nil {
		return nil, err
	}
	if err := d.readFunctions(modBodies, top, input); err != nil {
		return nil, err
	}
	if err := d.readSpanner(input); err != nil {
		return nil, err
	}
	if err := d.readBigtable(input); err != nil {
		return nil, err
	}
	if err := d.readDetection(input); err != nil {
		return nil, err
	}
	if err := d.readJobs(root, modBodies, top, input); err != nil {
		return nil, err
	}
	for _, t := range top.PubSub.Topics {
		for _, s := range t.Subscriptions {
			d.Pushes[t.Name] = append(d.Pushes[t.Name], s.Function)
		}
	}
	return d, nil
}

func readTopology(root string) (*topology.Topology, error) {
	b, err := os.ReadFile(filepath.Join(root, topologyFile))
	if err != nil {
		return nil, err
	}
	var t topology.Topology
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", topologyFile, err)
	}
	return &t, nil
}

// parseDir parses every .tf file of dir, by file name.
func parseDir(p *hclparse.Parser, dir string) (map[string]*hclsyntax.Body, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no Terraform files", dir)
	}
	out := map[string]*hclsyntax.Body{}
	for _, path := range paths {
		f, diags := p.ParseHCLFile(path)
		if diags.HasErrors() {
			return nil, fmt.Errorf("%s: %s", path, diags.Error())
		}
		out[path] = f.Body.(*hclsyntax.Body)
	}
	return out, nil
}

// blocks are the blocks of type typ with these labels in any of bodies.
func blocks(bodies map[string]*hclsyntax.Body, typ string, labels ...string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	var paths []string
	for p := range bodies {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, b := range bodies[p].Blocks {
			if b.Type != typ || len(b.Labels) < len(labels) {
				continue
			}
			match := true
			for i, l := range labels {
				match = match && b.Labels[i] == l
			}
			if match {
				out = append(out, b)
			}
		}
	}
	return out
}

// variableDefaults are the default values of the variables declared in
// bodies (variables without a default are left out).
func variableDefaults(bodies map[string]*hclsyntax.Body) (map[string]cty.Value, error) {
	out := map[string]cty.Value{}
	for _, b := range blocks(bodies, "variable") {
		a, ok := b.Body.Attributes["default"]
		if !ok {
			continue
		}
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("variable %s: default: %s", b.Labels[0], diags.Error())
		}
		out[b.Labels[0]] = v
	}
	return out, nil
}

// moduleArguments are the arguments main.tf passes to the engagement module.
func moduleArguments(bodies map[string]*hclsyntax.Body) (map[string]hclsyntax.Expression, error) {
	bs := blocks(bodies, "module", "engagement")
	if len(bs) != 1 {
		return nil, fmt.Errorf(`want one module "engagement" block, found %d`, len(bs))
	}
	out := map[string]hclsyntax.Expression{}
	for n, a := range bs[0].Body.Attributes {
		out[n] = a.Expr
	}
	return out, nil
}

// functions are the Terraform functions the module's expressions the model
// evaluates may call.
func functions() map[string]function.Function {
	return map[string]function.Function{
		"merge":      stdlib.MergeFunc,
		"try":        tryfunc.TryFunc,
		"can":        tryfunc.CanFunc,
		"min":        stdlib.MinFunc,
		"max":        stdlib.MaxFunc,
		"floor":      stdlib.FloorFunc,
		"lower":      stdlib.LowerFunc,
		"tonumber":   stdlib.MakeToFunc(cty.Number),
		"tostring":   stdlib.MakeToFunc(cty.String),
		"endswith":   endsWith,
		"trimsuffix": stdlib.TrimSuffixFunc,
		"contains":   stdlib.ContainsFunc,
		"keys":       stdlib.KeysFunc,
		"length":     stdlib.LengthFunc,
		"range":      stdlib.RangeFunc,
	}
}

var endsWith = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "str", Type: cty.String}, {Name: "suffix", Type: cty.String}},
	Type:   function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return cty.BoolVal(strings.HasSuffix(args[0].AsString(), args[1].AsString())), nil
	},
})

// readFunctions evaluates the module's function_settings local and the
// service_config of google_cloudfunctions2_function.fn for every function
// of topology.json, with each.value as the module's local.functions has it.
func (d *Deployment) readFunctions(mod map[string]*hclsyntax.Body, top *topology.Topology, input func(string) (cty.Value, error)) error {
	defaults, err := input("function_defaults")
	if err != nil {
		return err
	}
	overrides, err := input("function_overrides")
	if err != nil {
		return err
	}
	var settingsExpr hclsyntax.Expression
	for _, b := range blocks(mod, "locals") {
		if a, ok := b.Body.Attributes["function_settings"]; ok {
			settingsExpr = a.Expr
		}
	}
	if settingsExpr == nil {
		return fmt.Errorf("%s: no local function_settings", moduleDir)
	}
	fns := map[string]cty.Value{}
	for _, f := range top.Functions {
		fns[f.Name] = cty.ObjectVal(map[string]cty.Value{
			"name":   cty.StringVal(f.Name),
			"kind":   cty.StringVal(f.Kind),
			"public": cty.BoolVal(f.Public),
		})
	}
	local := map[string]cty.Value{"functions": cty.ObjectVal(fns)}
	vars := cty.ObjectVal(map[string]cty.Value{"function_defaults": defaults, "function_overrides": overrides})
	ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": vars, "local": cty.ObjectVal(local)}, Functions: functions()}
	settings, diags := settingsExpr.Value(ctx)
	if diags.HasErrors() {
		return fmt.Errorf("%s: local.function_settings: %s", moduleDir, diags.Error())
	}
	local["function_settings"] = settings

	res := blocks(mod, "resource", "google_cloudfunctions2_function", "fn")
	if len(res) != 1 {
		return fmt.Errorf(`%s: want one resource "google_cloudfunctions2_function" "fn", found %d`, moduleDir, len(res))
	}
	var sc *hclsyntax.Body
	for _, b := range res[0].Body.Blocks {
		if b.Type == "service_config" {
			sc = b.Body
		}
	}
	if sc == nil {
		return fmt.Errorf("%s: google_cloudfunctions2_function.fn has no service_config", moduleDir)
	}
	for _, f := range top.Functions {
		ctx := &hcl.EvalContext{
			Variables: map[string]cty.Value{
				"var":   vars,
				"local": cty.ObjectVal(local),
				"each":  cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal(f.Name), "value": fns[f.Name]}),
			},
			Functions: functions(),
		}
		attr := func(name string) (cty.Value, error) {
			a, ok := sc.Attributes[name]
			if !ok {
				return cty.NilVal, fmt.Errorf("service_config has no %s", name)
			}
			v, diags := a.Expr.Value(ctx)
			if diags.HasErrors() {
				return cty.NilVal, fmt.Errorf("service_config.%s: %s", name, diags.Error())
			}
			return v, nil
		}
		fn := Function{Name: f.Name, Kind: f.Kind, Public: f.Public}
		var errs []error
		num := func(name string) int {
			v, err := attr(name)
			if err == nil {
				var n int
				n, err = integer(v)
				if err == nil {
					return n
				}
			}
			errs = append(errs, err)
			return 0
		}
		fn.Timeout = num("timeout_seconds")
		fn.Concurrency = num("max_instance_request_concurrency")
		fn.MinInstances = num("min_instance_count")
		fn.MaxInstances = num("max_instance_count")
		if v, err := attr("available_cpu"); err != nil {
			errs = append(errs, err)
		} else if s, err := str(v); err != nil {
			errs = append(errs, err)
		} else if fn.CPU, err = strconv.ParseFloat(s, 64); err != nil {
			errs = append(errs, fmt.Errorf("available_cpu %q: %w", s, err))
		}
		if v, err := attr("available_memory"); err != nil {
			errs = append(errs, err)
		} else if s, err := str(v); err != nil {
			errs = append(errs, err)
		} else if fn.MemoryMiB, err = mebibytes(s); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("function %s: %v", f.Name, errs)
		}
		d.Functions[f.Name] = fn
	}
	return nil
}

func (d *Deployment) readSpanner(input func(string) (cty.Value, error)) error {
	var err error
	get := func(name string) cty.Value {
		v, e := input(name)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	config, edition, pu, auto := get("spanner_config"), get("spanner_edition"), get("spanner_processing_units"), get("spanner_autoscaling")
	if err != nil {
		return err
	}
	s := Spanner{}
	if s.Config, err = str(config); err != nil {
		return fmt.Errorf("spanner_config: %w", err)
	}
	if s.Edition, err = str(edition); err != nil {
		return fmt.Errorf("spanner_edition: %w", err)
	}
	// The instance's processing_units is set only without the autoscaler
	// (spanner.tf).
	if auto.IsNull() {
		if s.ProcessingUnits, err = integer(pu); err != nil {
			return fmt.Errorf("spanner_processing_units: %w", err)
		}
		s.MaxProcessingUnits = s.ProcessingUnits
	} else {
		if s.ProcessingUnits, err = integer(auto.GetAttr("min_processing_units")); err != nil {
			return fmt.Errorf("spanner_autoscaling.min_processing_units: %w", err)
		}
		if s.MaxProcessingUnits, err = integer(auto.GetAttr("max_processing_units")); err != nil {
			return fmt.Errorf("spanner_autoscaling.max_processing_units: %w", err)
		}
		var t int
		if t, err = integer(auto.GetAttr("high_priority_cpu_percent")); err != nil {
			return fmt.Errorf("spanner_autoscaling.high_priority_cpu_percent: %w", err)
		}
		s.HighPriorityCPUPercent = float64(t)
	}
	d.Spanner = s
	return nil
}

func (d *Deployment) readBigtable(input func(string) (cty.Value, error)) error {
	v, err := input("bigtable_clusters")
	if err != nil {
		return err
	}
	if !v.CanIterateElements() {
		return fmt.Errorf("bigtable_clusters is not a list")
	}
	for it := v.ElementIterator(); it.Next(); {
		_, c := it.Element()
		var bc BigtableCluster
		var errs []error
		s := func(name string) string {
			if !c.Type().HasAttribute(name) {
				return ""
			}
			x, err := str(c.GetAttr(name))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			return x
		}
		n := func(name string) int {
			if !c.Type().HasAttribute(name) {
				errs = append(errs, fmt.Errorf("no %s", name))
				return 0
			}
			x, err := integer(c.GetAttr(name))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			return x
		}
		bc.ID, bc.Zone, bc.StorageType = s("id"), s("zone"), s("storage_type")
		if bc.StorageType == "" {
			bc.StorageType = "SSD" // the variable's optional default
		}
		bc.MinNodes, bc.MaxNodes = n("min_nodes"), n("max_nodes")
		if len(errs) > 0 {
			return fmt.Errorf("bigtable_clusters: %v", errs)
		}
		d.Bigtable = append(d.Bigtable, bc)
	}
	return nil
}

// readDetection reads the module's detection variable.
func (d *Deployment) readDetection(input func(string) (cty.Value, error)) error {
	v, err := input("detection")
	if err != nil {
		return err
	}
	var errs []error
	num := func(name string) int {
		if !v.Type().IsObjectType() || !v.Type().HasAttribute(name) {
			errs = append(errs, fmt.Errorf("detection has no %s", name))
			return 0
		}
		n, err := integer(v.GetAttr(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("detection.%s: %w", name, err))
		}
		return n
	}
	d.Detection = Detection{Partitions: num("partitions"), MergeBuckets: num("merge_buckets"),
		MaxShareCandidates: num("max_share_candidates"), Jobs: num("jobs")}
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

// readJobs evaluates the module's scheduler_fan_out and scheduler_jobs
// locals over topology.json: the Cloud Scheduler jobs it deploys, by name.
func (d *Deployment) readJobs(root string, mod map[string]*hclsyntax.Body, top *topology.Topology, input func(string) (cty.Value, error)) error {
	b, err := os.ReadFile(filepath.Join(root, topologyFile))
	if err != nil {
		return err
	}
	ty, err := ctyjson.ImpliedType(b)
	if err != nil {
		return fmt.Errorf("%s: %w", topologyFile, err)
	}
	topo, err := ctyjson.Unmarshal(b, ty)
	if err != nil {
		return fmt.Errorf("%s: %w", topologyFile, err)
	}
	detection, err := input("detection")
	if err != nil {
		return err
	}
	vars := cty.ObjectVal(map[string]cty.Value{"detection": detection})
	local := map[string]cty.Value{"topology": topo}
	for _, name := range []string{"scheduler_fan_out", "scheduler_jobs"} {
		var expr hclsyntax.Expression
		for _, blk := range blocks(mod, "locals") {
			if a, ok := blk.Body.Attributes[name]; ok {
				expr = a.Expr
			}
		}
		if expr == nil {
			return fmt.Errorf("%s: no local %s", moduleDir, name)
		}
		ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": vars, "local": cty.ObjectVal(local)}, Functions: functions()}
		v, diags := expr.Value(ctx)
		if diags.HasErrors() {
			return fmt.Errorf("%s: local.%s: %s", moduleDir, name, diags.Error())
		}
		local[name] = v
	}
	jobs := local["scheduler_jobs"]
	if !jobs.CanIterateElements() {
		return fmt.Errorf("%s: local.scheduler_jobs is %s, not a map", moduleDir, jobs.Type().FriendlyName())
	}
	for it := jobs.ElementIterator(); it.Next(); {
		k, v := it.Element()
		name := k.AsString()
		fn, err := str(v.GetAttr("function"))
		if err != nil {
			return fmt.Errorf("scheduler job %s: function: %w", name, err)
		}
		// The job's schedule and body are topology.json's entry's.
		entry, ok := top.Job(name)
		if !ok || entry.Function != fn {
			return fmt.Errorf("scheduler job %s: no entry of %s calls %s under that name", name, topologyFile, fn)
		}
		d.Jobs = append(d.Jobs, Job{Name: name, Function: fn, Schedule: entry.Schedule, Body: entry.Body})
	}
	sort.Slice(d.Jobs, func(a, b int) bool { return d.Jobs[a].Name < d.Jobs[b].Name })
	return nil
}

func str(v cty.Value) (string, error) {
	if v.IsNull() || !v.IsKnown() {
		return "", fmt.Errorf("no value")
	}
	if v.Type() == cty.Number {
		return v.AsBigFloat().Text('f', -1), nil
	}
	if v.Type() != cty.String {
		return "", fmt.Errorf("%s is not a string", v.Type().FriendlyName())
	}
	return v.AsString(), nil
}

func integer(v cty.Value) (int, error) {
	if v.IsNull() || !v.IsKnown() {
		return 0, fmt.Errorf("no value")
	}
	if v.Type() == cty.String {
		n, err := strconv.Atoi(v.AsString())
		if err != nil {
			return 0, err
		}
		return n, nil
	}
	if v.Type() != cty.Number {
		return 0, fmt.Errorf("%s is not a number", v.Type().FriendlyName())
	}
	i, acc := v.AsBigFloat().Int64()
	if acc != big.Exact {
		return 0, fmt.Errorf("%s is not a whole number", v.AsBigFloat().Text('f', -1))
	}
	return int(i), nil
}

var memory = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(Mi|Gi|M|G)$`)

// mebibytes reads a Cloud Functions memory setting ("512Mi", "1Gi").
func mebibytes(s string) (float64, error) {
	m := memory.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("memory %q is not <n>Mi or <n>Gi", s)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	switch m[2] {
	case "Gi":
		n *= 1024
	case "G":
		n *= 1e9 / (1 << 20)
	case "M":
		n *= 1e6 / (1 << 20)
	}
	return n, nil
}
