package capacity

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const root = "../.."

func plan(t *testing.T, d *Deployment) *Plan {
	t.Helper()
	c, err := LoadCosts(root)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := ProfileFor(d.Env)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Model(d, c, prof)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func load(t *testing.T, root, env string) *Deployment {
	t.Helper()
	d, err := LoadDeployment(root, env)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The deployed settings carry each environment's load.
func TestEnvironmentsCarryTheirLoad(t *testing.T) {
	for _, env := range []string{"prod", "dev"} {
		t.Run(env, func(t *testing.T) {
			p := plan(t, load(t, root, env))
			if err := p.Err(); err != nil {
				t.Error(err)
			}
			var sb strings.Builder
			WriteTable(&sb, p)
			t.Log("\n" + sb.String())
		})
	}
}

// Prod runs in two regions, either carrying the whole load alone: its
// functions' limits hold per region, and it asks for each region's Cloud
// Run CPU, the Spanner nodes and the Bigtable nodes the plan needs. Dev
// runs in one region and asks for nothing.
func TestRegionsAndQuotas(t *testing.T) {
	p := plan(t, load(t, root, "prod"))
	if got := fmt.Sprint(p.Deployment.Regions); got != "[us-central1 us-east1]" {
		t.Errorf("prod runs in %s, want us-central1 and us-east1", got)
	}
	if p.DuplicateDeliveries != 1 {
		t.Errorf("prod applies each message %d more times, want once per extra region", p.DuplicateDeliveries)
	}
	if p.RegionVCPU != p.DesignVCPU || p.RegionVCPU == 0 {
		t.Errorf("one region carries %.0f vCPU, the whole load is %.0f", p.RegionVCPU, p.DesignVCPU)
	}
	if len(p.Quotas) != 3 || p.Deployment.Quotas == nil {
		t.Fatalf("prod quotas %+v asked %+v", p.Quotas, p.Deployment.Quotas)
	}
	for _, q := range p.Quotas {
		if q.Need <= 0 || float64(q.Asked) < q.Need {
			t.Errorf("%s: need %.0f, asked %d", q.Quota, q.Need, q.Asked)
		}
		t.Logf("%s: need %.0f %s, asked %d", q.Quota, q.Need, q.Unit, q.Asked)
	}
	d := plan(t, load(t, root, "dev"))
	if len(d.Deployment.Regions) != 1 || d.Deployment.Quotas != nil || d.DuplicateDeliveries != 0 {
		t.Errorf("dev: regions %v, quotas %+v, duplicates %d", d.Deployment.Regions, d.Deployment.Quotas, d.DuplicateDeliveries)
	}
}

// Copies broken on purpose: each must be refused, naming what breaks.
func TestBrokenCopiesFail(t *testing.T) {
	cases := []struct {
		name    string
		env     string
		breakIt func(t *testing.T, d *Deployment, p *Plan)
		want    string // in a violation
	}{
		{"two rollup partitions on one instance with concurrency 1", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			setFn(d, "Rollup", func(f *Function) { f.MaxInstances, f.Concurrency = 1, 1 })
		}, "Rollup: 1 instances × concurrency 1"},
		{"two rollup partitions on one instance with concurrency 1, in dev", "dev", func(t *testing.T, d *Deployment, _ *Plan) {
			setFn(d, "Rollup", func(f *Function) { f.MaxInstances, f.Concurrency = 1, 1 })
		}, "get 429"},
		{"reconcile's slices, hourly and daily runs on one slot each minute", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			setFn(d, "Reconcile", func(f *Function) { f.MaxInstances, f.Concurrency = 2, 1 })
		}, "Reconcile: 2 instances"},
		{"a prod event function capped below its peak", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			need := fnPlan(t, p, "ApplyCounters").Instances
			setFn(d, "ApplyCounters", func(f *Function) { f.MaxInstances = int(math.Ceil(need)) - 1 })
		}, "ApplyCounters"},
		{"a prod event function with less than 2× headroom", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			need := fnPlan(t, p, "ApplyViews").Instances
			setFn(d, "ApplyViews", func(f *Function) { f.MaxInstances = int(math.Ceil(1.5 * need)) })
		}, "ApplyViews"},
		{"a public function with dev's instance limit in prod", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			setFn(d, "Counts", func(f *Function) { f.MaxInstances = 20 })
		}, "Counts"},
		{"the reconciliation's timeout below its run's bound", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			setFn(d, "Reconcile", func(f *Function) { f.Timeout = 120 })
		}, "shorter than a run's own bound"},
		{"a third rollup partition without slots for it", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			r := fnPlan(t, p, "Rollup")
			// Partitions until the slots fall short of twice the overlap.
			for i := 0; float64(r.Slots()) >= Headroom*2*float64(countJobsOf(d, "Rollup")); i++ {
				d.Jobs = append(d.Jobs, Job{Name: fmt.Sprintf("rollup-extra-%d", i), Function: "Rollup", Schedule: "* * * * *"})
			}
		}, "Rollup"},
		{"the detection with one per-minute job in prod", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			var jobs []Job
			for _, j := range d.Jobs {
				if j.Function != "DetectManipulation" || j.Name == "detect-manipulation-0" {
					jobs = append(jobs, j)
				}
			}
			d.Jobs = jobs
		}, "raise detection.jobs"},
		{"the detection's instances below the invocations a step keeps busy", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			setFn(d, "DetectManipulation", func(f *Function) { f.MaxInstances = int(p.Detection.Busy) })
		}, "but a step's work keeps"},
		{"the detection's merge in too few buckets for a share's budget", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			d.Detection.MergeBuckets = 32
		}, "every step would be skipped"},
		{"the detection taking two shares an instance", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			setFn(d, "DetectManipulation", func(f *Function) { f.Concurrency = 2 })
		}, "concurrency must be 1"},
		{"Spanner's autoscaler capped at one node", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			d.Spanner.MaxProcessingUnits = 1000
		}, "Spanner: at most 1000 processing units"},
		{"a Bigtable cluster capped at 3 nodes", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			d.Bigtable[0].MaxNodes = 3
		}, "Bigtable cluster engagement-c1: at most 3 nodes"},
		{"Spanner's autoscaler 7% above its need (the maximum of before)", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			d.Spanner.MaxProcessingUnits = int(math.Ceil(1.07*p.SpannerPU/1000)) * 1000
		}, "Spanner: at most"},
		{"Bigtable's autoscaler at its need at the CPU target, not twice", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			d.Bigtable[1].MaxNodes = int(math.Ceil(p.BigtableNodes))
		}, "Bigtable cluster engagement-c2: at most"},
		{"Cloud Run quota asked below what one region needs alone", "prod", func(t *testing.T, d *Deployment, p *Plan) {
			d.Quotas.RunVCPUPerRegion = int(p.RegionVCPU)
		}, "quota: Cloud Run CPU in each of [us-central1 us-east1]: quota_requests asks for"},
		{"Spanner quota asked below the autoscaler's maximum", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			d.Quotas.SpannerNodes = d.Spanner.MaxProcessingUnits/1000 - 1
		}, "quota: Spanner nodes of nam6"},
		{"Bigtable quota asked below a cluster's maximum", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			d.Quotas.BigtableNodesPerZone = d.Bigtable[0].MaxNodes / 2
		}, "quota: Bigtable SSD nodes in each cluster's zone"},
		{"prod asking for no quota at all", "prod", func(t *testing.T, d *Deployment, _ *Plan) {
			d.Quotas = nil
		}, "quota_requests asks for nothing"},
		{"dev's Spanner at 100 processing units below its load", "dev", func(t *testing.T, d *Deployment, p *Plan) {
			d.Spanner.ProcessingUnits = int(p.SpannerPUHeadroom/2/100) * 100
			d.Spanner.MaxProcessingUnits = d.Spanner.ProcessingUnits
		}, "Spanner: at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := load(t, root, c.env)
			c.breakIt(t, d, plan(t, load(t, root, c.env)))
			err := plan(t, d).Err()
			if err == nil {
				t.Fatal("the broken copy passes")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refused, but not for %q:\n%v", c.want, err)
			}
		})
	}
}

// Terraform deploys the detection's job as detection.jobs copies, and the
// model works the design rate's step with them.
func TestDetectionFansOut(t *testing.T) {
	for _, env := range []string{"prod", "dev"} {
		d := load(t, root, env)
		if n := countJobsOf(d, "DetectManipulation"); n != d.Detection.Jobs || n < 1 {
			t.Errorf("%s: %d DetectManipulation jobs, detection.jobs is %d", env, n, d.Detection.Jobs)
		}
		for _, j := range d.Jobs {
			if j.Function == "DetectManipulation" && !strings.HasPrefix(j.Name, "detect-manipulation-") {
				t.Errorf("%s: job %s is not a copy detect-manipulation-<k>", env, j.Name)
			}
		}
		p := plan(t, d)
		if p.Detection.Busy <= 0 || p.Detection.Working < Headroom*p.Detection.Busy {
			t.Errorf("%s: detection plan %+v", env, p.Detection)
		}
		var sb strings.Builder
		writeDetection(&sb, p)
		t.Log(sb.String())
	}
}

func countJobsOf(d *Deployment, fn string) int {
	n := 0
	for _, j := range d.Jobs {
		if j.Function == fn {
			n++
		}
	}
	return n
}

func setFn(d *Deployment, name string, f func(*Function)) {
	fn := d.Functions[name]
	f(&fn)
	d.Functions[name] = fn
}

func fnPlan(t *testing.T, p *Plan, name string) FunctionPlan {
	t.Helper()
	for _, f := range p.Functions {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no function %s", name)
	return FunctionPlan{}
}

// copyTree copies what LoadDeployment reads into a new root.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, dir := range []string{"terraform/envs", "terraform/modules"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if e.IsDir() {
				if e.Name() == ".terraform" {
					return filepath.SkipDir
				}
				return os.MkdirAll(filepath.Join(dst, rel), 0o755)
			}
			if !strings.HasSuffix(p, ".tf") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{topologyFile, CostsFile} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755)
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// edit replaces what re matches in root's file with repl, once at least.
func edit(t *testing.T, root, file, re, repl string) {
	t.Helper()
	p := filepath.Join(root, file)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	rx := regexp.MustCompile(re)
	if !rx.Match(b) {
		t.Fatalf("%s: nothing matches %s", file, re)
	}
	if err := os.WriteFile(p, rx.ReplaceAll(b, []byte(repl)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The model reads Terraform as Terraform would: a broken copy of the files
// themselves is refused.
func TestBrokenTerraformFails(t *testing.T) {
	cases := []struct {
		name, file, re, repl, want string
	}{
		{"scheduled functions back at one instance of one request", "terraform/envs/prod/variables.tf",
			`scheduled\s*=\s*\{[^}]*\}`, `scheduled = { memory = "512Mi", cpu = "1", timeout_seconds = 120, concurrency = 1, min_instances = 0, max_instances = 1 }`,
			"Rollup: 1 instances × concurrency 1"},
		{"prod no longer passes its overrides (the module's default is none)", "terraform/envs/prod/main.tf",
			`function_overrides\s*=\s*var\.function_overrides`, ``, "Reconcile: timeout"},
		{"prod asking for the default Cloud Run quota of a region", "terraform/envs/prod/variables.tf",
			`run_vcpu_per_region\s*=\s*\d+`, `run_vcpu_per_region = 1000`,
			"quota: Cloud Run CPU in each of [us-central1 us-east1]: quota_requests asks for 1000 vCPU"},
		{"event functions back at one push at a time on 40 instances", "terraform/envs/prod/variables.tf",
			`event\s*=\s*\{[^}]*\}`, `event = { memory = "512Mi", cpu = "1", timeout_seconds = 60, concurrency = 1, min_instances = 0, max_instances = 40 }`,
			"ApplyCounters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyTree(t)
			if err := plan(t, load(t, dir, "prod")).Err(); err != nil {
				t.Fatalf("the copy fails before the edit: %v", err)
			}
			edit(t, dir, c.file, c.re, c.repl)
			err := plan(t, load(t, dir, "prod")).Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want a refusal naming %q, got %v", c.want, err)
			}
		})
	}
}

// The concurrency is what functions.tf's expression makes of the
// settings: an expression that forces event functions to one request at
// a time is read as such.
func TestConcurrencyFromTheModuleExpression(t *testing.T) {
	const attr = `max_instance_request_concurrency\s*=[^\n]*`
	for _, c := range []struct {
		expr string
		want int
	}{
		{`max_instance_request_concurrency = each.value.kind == "event" ? 1 : local.function_settings[each.value.name].concurrency`, 1},
		{`max_instance_request_concurrency = local.function_settings[each.value.name].concurrency`, 40},
	} {
		dir := copyTree(t)
		edit(t, dir, "terraform/modules/engagement/functions.tf", attr, c.expr)
		edit(t, dir, "terraform/envs/prod/variables.tf", `(event\s*=\s*\{[^}]*concurrency\s*=\s*)[0-9]+`, `${1}40`)
		d := load(t, dir, "prod")
		if got := d.Functions["ApplyCounters"].Concurrency; got != c.want {
			t.Errorf("%s: ApplyCounters concurrency %d, want %d", c.expr, got, c.want)
		}
	}
}

func TestPeakOverlap(t *testing.T) {
	every := "* * * * *"
	cases := []struct {
		name string
		jobs map[string]string
		hold time.Duration
		want int
	}{
		{"two partitions, each holding 70 s of every minute", map[string]string{"a": every, "b": every}, 70 * time.Second, 4},
		{"two partitions, each done within its minute", map[string]string{"a": every, "b": every}, 50 * time.Second, 2},
		{"a run ending as the next begins counts with it", map[string]string{"a": every}, time.Minute, 2},
		{"9-minute runs every minute, plus an hourly one", map[string]string{"s": every, "h": "7 * * * *"}, 9 * time.Minute, 11},
		{"hourly runs never meet", map[string]string{"h": "7 * * * *", "d": "37 * * * *"}, 9 * time.Minute, 1},
		{"a daily run late in the day", map[string]string{"d": "17 3 * * *"}, time.Hour, 1},
		{"every 15 minutes, an hour each", map[string]string{"q": "*/15 * * * *"}, time.Hour, 5},
		{"a run past midnight meets the next day's", map[string]string{"n": "50 23 * * *", "m": "0 0 * * *"}, 20 * time.Minute, 2},
	}
	for _, c := range cases {
		hold := map[string]time.Duration{}
		for j := range c.jobs {
			hold[j] = c.hold
		}
		got, err := peakOverlap(c.jobs, hold)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Peak != c.want {
			t.Errorf("%s: peak %d (%v at %v), want %d", c.name, got.Peak, got.Jobs, got.At, c.want)
		}
	}
	for _, bad := range []string{"* * 1 * *", "* *", "61 * * * *", "*/0 * * * *", "a * * * *"} {
		if _, err := minutesOfDay(bad); err == nil {
			t.Errorf("schedule %q accepted", bad)
		}
	}
}

// A figure nobody measured stops the model.
func TestMissingFigureFails(t *testing.T) {
	c, err := LoadCosts(root)
	if err != nil {
		t.Fatal(err)
	}
	delete(c.Figures, "comment.cpu_us")
	if _, err := Model(load(t, root, "prod"), c, Design); err == nil || !strings.Contains(err.Error(), "comment.cpu_us") {
		t.Fatalf("got %v, want an error naming comment.cpu_us", err)
	}
	c, _ = LoadCosts(root)
	f := c.Figures["view.apply_history_push_ms"]
	f.Value = 0
	c.Figures["view.apply_history_push_ms"] = f
	if _, err := Model(load(t, root, "prod"), c, Design); err == nil || !strings.Contains(err.Error(), "view.apply_history_push_ms") {
		t.Fatalf("got %v, want an error naming view.apply_history_push_ms", err)
	}
}

// Every scheduled function of topology.json has a known run bound, and
// the deployed ones run it whole.
func TestScheduledFunctionsHaveRunBounds(t *testing.T) {
	d := load(t, root, "prod")
	for _, n := range d.FunctionNames() {
		f := d.Functions[n]
		if f.Kind != "scheduled" {
			continue
		}
		b, ok := runBounds[n]
		if !ok {
			t.Errorf("%s: no run bound", n)
			continue
		}
		if time.Duration(f.Timeout)*time.Second < b {
			t.Errorf("%s: timeout %ds under its run bound %v", n, f.Timeout, b)
		}
	}
}

// A consumer that takes several pushes at once is sized by its CPU per
// message, which must have been measured.
func TestConcurrentConsumerNeedsCPUPerMessage(t *testing.T) {
	c, err := LoadCosts(root)
	if err != nil {
		t.Fatal(err)
	}
	d := load(t, root, "prod")
	setFn(d, "ApplyCounters", func(f *Function) { f.Concurrency = 80 })
	delete(c.Figures, "applycounters.cpu_us_per_message")
	if _, err := Model(d, c, Design); err == nil || !strings.Contains(err.Error(), "applycounters.cpu_us_per_message") {
		t.Fatalf("got %v, want an error naming applycounters.cpu_us_per_message", err)
	}
	c.Figures["applycounters.cpu_us_per_message"] = Figure{Value: 1000, Unit: "µs", Run: c.Figures["reaction.cpu_us"].Run}
	p, err := Model(d, c, Design)
	if err != nil {
		t.Fatal(err)
	}
	fp := fnPlan(t, p, "ApplyCounters")
	want := fp.RequestsPerSec * 1000e-6
	if math.Abs(fp.BusyVCPU-want) > 1e-9 || fp.Instances < want/cloudRunCPUTarget-1e-9 {
		t.Fatalf("busy vCPU %v, instances %v; want %v vCPU and the instances it needs", fp.BusyVCPU, fp.Instances, want)
	}
}

// The price per million operations charges the whole hourly cost: every
// kind's share plus the scheduled jobs' add up to the total, and each
// kind's price is its hourly cost over its operations.
func TestPricePerMillion(t *testing.T) {
	for _, env := range []string{"prod", "dev"} {
		p := plan(t, load(t, root, env))
		if len(p.Prices) != len(Kinds)+1 {
			t.Fatalf("%s: %d prices, want one per kind and the total", env, len(p.Prices))
		}
		var sum float64
		for _, pr := range p.Prices[:len(Kinds)] {
			if pr.OpsPerSec <= 0 || pr.HourlyCost <= 0 || pr.PerMillion <= 0 {
				t.Errorf("%s: %+v", env, pr)
			}
			if want := pr.HourlyCost / (pr.OpsPerSec * 3600) * 1e6; math.Abs(pr.PerMillion-want) > 1e-9 {
				t.Errorf("%s %s: %v per million, want %v", env, pr.Kind, pr.PerMillion, want)
			}
			sum += pr.HourlyCost
		}
		all := p.Prices[len(Kinds)]
		if math.Abs(sum+all.SharedHourly-p.Cost.Total()) > 1e-6*p.Cost.Total() || all.HourlyCost != p.Cost.Total() {
			t.Errorf("%s: kinds $%.2f + shared $%.2f an hour, total $%.2f", env, sum, all.SharedHourly, p.Cost.Total())
		}
		t.Logf("%s: $%.2f per million operations", env, all.PerMillion)
	}
}
