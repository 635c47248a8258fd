package check

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The pipeline: three builds, each run by its own trigger as its own
// identity (terraform/bootstrap). The rules below are checked on the
// committed files and on copies broken on purpose, which must fail them.

const (
	// snapshotDir is where the plan and apply builds unpack the planned
	// commit; Terraform runs nowhere else.
	snapshotDir = ".pipeline/tree"
	// terraformImage is the one image Terraform runs in, at the exact
	// version of _TERRAFORM_VERSION.
	terraformImage = "hashicorp/terraform:${_TERRAFORM_VERSION}"
)

// pipelineFiles maps each identity to the build file it runs.
var pipelineFiles = map[string]string{
	"test":  "cloudbuild-test.yaml",
	"plan":  "cloudbuild.yaml",
	"apply": "cloudbuild-apply.yaml",
}

func serviceAccountOf(id string) string {
	return "projects/${PROJECT_ID}/serviceAccounts/engagement-" + id + "@${PROJECT_ID}.iam.gserviceaccount.com"
}

// pipelineBuilds reads the three build files, as text and decoded.
func pipelineBuilds(t *testing.T) (map[string]cloudBuild, map[string]string) {
	t.Helper()
	builds, texts := map[string]cloudBuild{}, map[string]string{}
	for id, file := range pipelineFiles {
		builds[id], texts[id] = readBuild(t, file)
	}
	return builds, texts
}

// withText decodes a copy of one build file with each old text replaced by
// the new one (pairs: old, new, old, new, ...).
func withText(t *testing.T, builds map[string]cloudBuild, texts map[string]string, id string, pairs ...string) map[string]cloudBuild {
	t.Helper()
	text := texts[id]
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(text, pairs[i]) {
			t.Fatalf("%s does not contain %q: the broken copy would not be broken", pipelineFiles[id], pairs[i])
		}
		text = strings.Replace(text, pairs[i], pairs[i+1], 1)
	}
	cb, err := decodeBuild([]byte(text))
	if err != nil {
		t.Fatalf("broken %s: %v", pipelineFiles[id], err)
	}
	out := maps(builds)
	out[id] = cb
	return out
}

func maps(m map[string]cloudBuild) map[string]cloudBuild {
	out := map[string]cloudBuild{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func stepOf(cb cloudBuild, id string) (buildStep, bool) {
	for _, s := range cb.Steps {
		if s.ID == id {
			return s, true
		}
	}
	return buildStep{}, false
}

// IdentityRule: every build names its own service account, and logs to
// Cloud Logging only, which a build run as a user-managed account needs (the
// account holds roles/logging.logWriter, see BootstrapRule).
func IdentityRule(builds map[string]cloudBuild) []error {
	var errs []error
	for id, cb := range builds {
		file := pipelineFiles[id]
		if want := serviceAccountOf(id); cb.ServiceAccount != want {
			errs = append(errs, fmt.Errorf("%s runs as %q, want %s", file, cb.ServiceAccount, want))
		}
		if cb.Options.Logging != "CLOUD_LOGGING_ONLY" {
			errs = append(errs, fmt.Errorf("%s logs with %q, want CLOUD_LOGGING_ONLY (builds run as a user-managed account)", file, cb.Options.Logging))
		}
	}
	return errs
}

var exactVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// PinRule: one exact Terraform version, the same in every build, and every
// Terraform step in the image of that version (a plan applies only with the
// version that made it).
func PinRule(builds map[string]cloudBuild) []error {
	var errs []error
	var versions []string
	for _, id := range []string{"test", "plan", "apply"} {
		cb, file := builds[id], pipelineFiles[id]
		v := cb.Substitutions["_TERRAFORM_VERSION"]
		if !exactVersion.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s: _TERRAFORM_VERSION=%q is not an exact version", file, v))
		}
		versions = append(versions, v)
		for name, val := range cb.Substitutions {
			if strings.Contains(val, "hashicorp/terraform") {
				errs = append(errs, fmt.Errorf("%s: substitution %s=%q names a Terraform image; steps name %s", file, name, val, terraformImage))
			}
		}
		for _, s := range cb.Steps {
			if strings.Contains(s.Name, "terraform") && s.Name != terraformImage {
				errs = append(errs, fmt.Errorf("%s: step %s runs in %q, want %s", file, s.ID, s.Name, terraformImage))
			}
		}
	}
	if len(slices.Compact(slices.Clone(versions))) != 1 {
		errs = append(errs, fmt.Errorf("_TERRAFORM_VERSION differs between the builds (test, plan, apply): %v", versions))
	}
	return errs
}

var runsTests = regexp.MustCompile(`\.ci/run|make test|go test`)

// SeparationRule: the tests run only in the test build, whose identity can
// deploy nothing; the test build runs no Terraform and no gcloud.
func SeparationRule(builds map[string]cloudBuild) []error {
	var errs []error
	for id, cb := range builds {
		for _, s := range cb.Steps {
			c := s.Name + " " + s.command()
			if id != "test" && runsTests.MatchString(c) {
				errs = append(errs, fmt.Errorf("%s: step %s runs the tests as engagement-%s; they run in cloudbuild-test.yaml", pipelineFiles[id], s.ID, id))
			}
			if id == "test" && (s.Name == terraformImage || strings.Contains(s.Name, "cli:slim") || strings.Contains(s.command(), "gcloud ")) {
				errs = append(errs, fmt.Errorf("%s: step %s deploys or calls Google Cloud", pipelineFiles[id], s.ID))
			}
		}
	}
	return errs
}

// SnapshotRule: the plan and apply builds run Terraform (and build the
// archive) only in the snapshot of the planned commit, never in the build's
// own checkout; the apply build verifies the sums of the plan build's record
// before it unpacks anything.
func SnapshotRule(builds map[string]cloudBuild) []error {
	var errs []error
	for _, id := range []string{"plan", "apply"} {
		cb, file := builds[id], pipelineFiles[id]
		for _, s := range cb.Steps {
			if (s.Name == terraformImage || s.Entrypoint == "go") && !strings.HasPrefix(s.Dir, snapshotDir+"/") && s.Dir != snapshotDir {
				errs = append(errs, fmt.Errorf("%s: step %s runs in %q, not in the snapshot %s", file, s.ID, s.Dir, snapshotDir))
			}
			for _, a := range append(slices.Clone(s.Args), s.Dir) {
				for _, m := range regexp.MustCompile(`(\S*)terraform/envs/`).FindAllStringSubmatch(a, -1) {
					if !strings.HasSuffix(m[1], "tree/") {
						errs = append(errs, fmt.Errorf("%s: step %s reads %q of the checkout, not of the snapshot", file, s.ID, m[0]))
					}
				}
			}
		}
	}
	fetch, ok := stepOf(builds["apply"], "fetch-plan")
	c := fetch.command()
	check, untar := strings.Index(c, "sha256sum --check --strict plan.sha256"), strings.Index(c, "tar -xzf")
	if !ok || check < 0 || untar < 0 || check > untar {
		errs = append(errs, fmt.Errorf("cloudbuild-apply.yaml: fetch-plan does not check the recorded sums (sha256sum --check --strict plan.sha256) before it unpacks the snapshot"))
	}
	return errs
}

// EnvOnlyRule: the steps that validate substitutions take them as
// environment variables; a substitution pasted into script text could inject
// a command before it is validated.
func EnvOnlyRule(builds map[string]cloudBuild) []error {
	var errs []error
	for _, v := range []struct{ id, step string }{{"plan", "validate"}, {"apply", "verify-plan"}} {
		s, ok := stepOf(builds[v.id], v.step)
		if !ok {
			errs = append(errs, fmt.Errorf("%s has no step %s", pipelineFiles[v.id], v.step))
			continue
		}
		for _, a := range s.Args {
			if m := substRef.FindString(a); m != "" {
				errs = append(errs, fmt.Errorf("%s: step %s pastes %q into its script; pass it in env", pipelineFiles[v.id], v.step, strings.TrimSpace(m)))
			}
		}
	}
	return errs
}

func pipelineRules(builds map[string]cloudBuild) []error {
	var errs []error
	for _, rule := range []func(map[string]cloudBuild) []error{IdentityRule, PinRule, SeparationRule, SnapshotRule, EnvOnlyRule} {
		errs = append(errs, rule(builds)...)
	}
	return errs
}

func TestPipelineRules(t *testing.T) {
	builds, texts := pipelineBuilds(t)
	for _, err := range pipelineRules(builds) {
		t.Error(err)
	}

	broken := []struct {
		name, id, old, new string
	}{
		{"plan build without a service account", "plan", "serviceAccount: projects/${PROJECT_ID}/serviceAccounts/engagement-plan@${PROJECT_ID}.iam.gserviceaccount.com\n", ""},
		{"test build as the plan identity", "test", "engagement-test@", "engagement-plan@"},
		{"apply build logging to the default bucket", "apply", "logging: CLOUD_LOGGING_ONLY", "logging: LEGACY"},
		{"floating Terraform tag", "apply", "name: hashicorp/terraform:${_TERRAFORM_VERSION}\n    dir: .pipeline/tree/terraform/envs/${_ENV}\n    args: [\"apply\"", "name: hashicorp/terraform:1.11\n    dir: .pipeline/tree/terraform/envs/${_ENV}\n    args: [\"apply\""},
		{"minor-only Terraform version", "plan", "_TERRAFORM_VERSION: 1.11.4", "_TERRAFORM_VERSION: \"1.11\""},
		{"tests and plan at different versions", "test", "_TERRAFORM_VERSION: 1.11.4", "_TERRAFORM_VERSION: 1.11.3"},
		{"tests in the plan build", "plan", "args: [\"run\", \"./tools/gcfbuild\"", "args: [\"test\", \"./...\"]\n  - id: archive2\n    name: ${_GO_IMAGE}\n    dir: .pipeline/tree\n    entrypoint: go\n    args: [\"run\", \"./tools/gcfbuild\""},
		{"apply reading the checkout", "apply", "dir: .pipeline/tree/terraform/envs/${_ENV}\n    args: [\"apply\"", "dir: terraform/envs/${_ENV}\n    args: [\"apply\""},
		{"plan from the checkout", "plan", "dir: .pipeline/tree/terraform/envs/${_ENV}\n    args:\n      - plan", "dir: terraform/envs/${_ENV}\n    args:\n      - plan"},
		{"apply without the hash verification", "apply", "sha256sum --check --strict plan.sha256\n", "\n"},
		{"substitution pasted into the validation script", "plan", `[[ "$$ENV" =~`, `[[ "${_ENV}" =~`},
	}
	for _, b := range broken {
		t.Run("broken/"+b.name, func(t *testing.T) {
			errs := pipelineRules(withText(t, builds, texts, b.id, b.old, b.new))
			if len(errs) == 0 {
				t.Fatal("the broken copy passes the pipeline rules")
			}
			t.Logf("refused as expected: %v", errs[0])
		})
	}
}

// The offline checks and the CI tests run the Terraform the builds pin.
func TestTerraformVersionPinned(t *testing.T) {
	needToolchain(t)
	builds, _ := pipelineBuilds(t)
	out, err := exec.Command(toolchain.Terraform, "version", "-json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	if want := builds["plan"].Substitutions["_TERRAFORM_VERSION"]; v.Version != want {
		t.Errorf("terraform on the PATH is %s, the builds pin %s: the offline check must run the pinned version", v.Version, want)
	}
}

// --- running the steps' scripts ----------------------------------------------------

var stepSubst = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// substitute does what Cloud Build does to a step: $$ becomes $, ${NAME}
// and $NAME the substitution's value ("" when unset).
func substitute(s string, vals map[string]string) string {
	return stepSubst.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		return vals[strings.Trim(m, "${}")]
	})
}

// buildValues are the substitutions of one build: its defaults (resolved
// against the built-ins), then overrides.
func buildValues(cb cloudBuild, builtins, overrides map[string]string) map[string]string {
	vals := map[string]string{}
	for k, v := range builtins {
		vals[k] = v
	}
	for k, v := range cb.Substitutions {
		vals[k] = substitute(v, builtins)
	}
	for k, v := range overrides {
		vals[k] = v
	}
	return vals
}

// fakeGcloud answers the gcloud calls of the pipeline's scripts from a
// directory: gs://… objects under gcs/; build records as builds/<id>.json,
// with <id>.approval (the approval state) and <id>.fields (the fields
// builds list filters on, one name=value a line); trigger ids as
// triggers/<name>.
const fakeGcloud = `#!/usr/bin/env bash
set -eu
r="$FAKE_GCLOUD"
fmt="" filter="" args=()
for a in "$@"; do
  case "$a" in
    --format=*) fmt="${a#--format=}" ;;
    --filter=*) filter="${a#--filter=}" ;;
    --*) ;;
    *) args+=("$a") ;;
  esac
done
path() { case "$1" in gs://*) echo "$r/gcs/${1#gs://}" ;; *) echo "$1" ;; esac; }
case "${args[0]} ${args[1]}" in
"storage cp")
  n=${#args[@]}
  dst="$(path "${args[n-1]}")"
  for ((i = 2; i < n - 1; i++)); do
    src="$(path "${args[i]}")"
    [ -e "$src" ] || { echo "fake gcloud: no object ${args[i]}" >&2; exit 1; }
    if [[ "${args[n-1]}" == */ || -d "$dst" ]]; then mkdir -p "$dst" && cp "$src" "$dst/"; else cp "$src" "$dst"; fi
  done ;;
"builds describe")
  case "$fmt" in
  json) cat "$r/builds/${args[2]}.json" ;;
  "value(approval.state)") cat "$r/builds/${args[2]}.approval" 2>/dev/null || true ;;
  *) echo "fake gcloud: format $fmt" >&2; exit 1 ;;
  esac ;;
"builds triggers") cat "$r/triggers/${args[3]}" ;;
"builds list")
  for f in "$r"/builds/*.fields; do
    ok=1
    while read -r clause; do grep -qxF -- "$clause" "$f" || ok=0; done < <(echo "$filter" | sed 's/ AND /\n/g')
    if [ $ok = 1 ]; then basename "$f" .fields; break; fi
  done ;;
*) echo "fake gcloud: unsupported call $*" >&2; exit 1 ;;
esac
`

// runStep runs a bash step of a build as Cloud Build would, in workspace
// (for /workspace), with gcloud answered from the fake directory.
func runStep(t *testing.T, cb cloudBuild, id string, vals map[string]string, workspace, fake string, extraEnv ...string) (string, error) {
	t.Helper()
	s, ok := stepOf(cb, id)
	if !ok {
		return "", fmt.Errorf("no step %s", id)
	}
	if s.Entrypoint != "bash" || len(s.Args) != 2 || s.Args[0] != "-ceu" {
		return "", fmt.Errorf("step %s is not a bash -ceu script", id)
	}
	ws := func(x string) string { return strings.ReplaceAll(substitute(x, vals), "/workspace", workspace) }
	bin := filepath.Join(fake, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "gcloud"), []byte(fakeGcloud), 0o755); err != nil {
		t.Fatal(err)
	}
	// The system's Python, not a version manager's shim (which can cost
	// seconds a call).
	if _, err := os.Lstat(filepath.Join(bin, "python3")); err != nil {
		py, err := exec.LookPath("python3")
		if _, serr := os.Stat("/usr/bin/python3"); serr == nil {
			py, err = "/usr/bin/python3", nil
		}
		if err != nil {
			t.Fatalf("the steps need python3: %v", err)
		}
		if err := os.Symlink(py, filepath.Join(bin, "python3")); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-ceu", ws(s.Args[1]))
	cmd.Dir = filepath.Join(workspace, ws(s.Dir))
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FAKE_GCLOUD="+fake)
	for _, e := range s.Env {
		cmd.Env = append(cmd.Env, ws(e))
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var planBuiltins = map[string]string{
	"PROJECT_ID": "check-prod",
	"BUILD_ID":   "11111111-2222-3333-4444-555555555555",
	"LOCATION":   "us-central1",
	"COMMIT_SHA": "0123456789abcdef0123456789abcdef01234567",
}

var goodPlanSubs = map[string]string{
	"_ENV":          "prod",
	"_API_DOMAIN":   "api.example.test",
	"_ALERT_EMAILS": `["oncall@example.test", "second@example.test"]`,
}

// ValidateRefusals runs the plan build's validate step with good
// substitutions (it must pass) and with malformed ones (each must fail).
func ValidateRefusals(t *testing.T, plan cloudBuild) []error {
	t.Helper()
	dir := t.TempDir()
	run := func(over map[string]string) error {
		subs := maps2(goodPlanSubs, over)
		_, err := runStep(t, plan, "validate", buildValues(plan, planBuiltins, subs), dir, filepath.Join(dir, "fake"))
		return err
	}
	var errs []error
	if err := run(nil); err != nil {
		errs = append(errs, fmt.Errorf("validate refuses good substitutions: %v", err))
	}
	for _, bad := range []map[string]string{
		{"_ENV": "staging"},
		{"_ENV": "prod; gcloud projects delete x"},
		{"_SOURCE_VERSION": "abc1234"},
		{"_SOURCE_VERSION": "$(id)"},
		{"_API_DOMAIN": ""},
		{"_API_DOMAIN": `api.example.test"; touch /tmp/pwned; "`},
		{"_TF_STATE_BUCKET": "Not_A_Bucket"},
		{"_TERRAFORM_VERSION": "1.11"},
		{"_TERRAFORM_VERSION": "latest"},
		{"_ALERT_EMAILS": "oncall@example.test"},
		{"_ALERT_EMAILS": `["not an address"]`},
		{"_ALERT_EMAILS": `{"a": "b@example.test"}`},
	} {
		if err := run(bad); err == nil {
			errs = append(errs, fmt.Errorf("validate accepts %v", bad))
		}
	}
	return errs
}

func maps2(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func TestPlanValidatesSubstitutions(t *testing.T) {
	builds, texts := pipelineBuilds(t)
	for _, err := range ValidateRefusals(t, builds["plan"]) {
		t.Error(err)
	}
	t.Run("broken/no check of _ENV", func(t *testing.T) {
		b := withText(t, builds, texts, "plan", `[[ "$$ENV" =~ ^(dev|prod)$$ ]] || fail "_ENV=$$ENV (dev or prod)"`, "true")
		if errs := ValidateRefusals(t, b["plan"]); len(errs) == 0 {
			t.Fatal("a validate step that does not check _ENV passes")
		}
	})
	t.Run("broken/no check of the alert e-mails", func(t *testing.T) {
		b := withText(t, builds, texts, "plan", "sys.exit(not (", "sys.exit(0 and (")
		if errs := ValidateRefusals(t, b["plan"]); len(errs) == 0 {
			t.Fatal("a validate step that does not check _ALERT_EMAILS passes")
		}
	})
}

// A stored plan, as the plan build's snapshot and store-plan steps leave it
// in the (fake) state bucket, and the plan build's record.
type storedPlan struct {
	fake    string // fake gcloud directory (gcs/, builds/, triggers.json)
	record  map[string]any
	planned string // content of the planned main.tf
	sums    string
}

func makeStoredPlan(t *testing.T, plan cloudBuild) *storedPlan {
	t.Helper()
	ws, fake := t.TempDir(), t.TempDir()
	sp := &storedPlan{fake: fake, planned: "# the planned commit\n"}
	writeFile(t, filepath.Join(ws, "terraform/envs/prod/main.tf"), sp.planned)
	writeFile(t, filepath.Join(ws, ".git/HEAD"), "ref: refs/heads/main\n")
	vals := buildValues(plan, planBuiltins, goodPlanSubs)
	if out, err := runStep(t, plan, "snapshot", vals, ws, fake); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(ws, snapshotDir, ".git")); err == nil {
		t.Error("the snapshot holds .git")
	}
	// What archive and terraform-plan leave.
	writeFile(t, filepath.Join(ws, "source.zip"), PlaceholderArchive)
	writeFile(t, filepath.Join(ws, snapshotDir, "terraform/envs/prod/tfplan"), "the plan\n")
	output := filepath.Join(t.TempDir(), "builder-output")
	if err := os.MkdirAll(output, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runStep(t, plan, "store-plan", vals, ws, fake, "BUILDER_OUTPUT="+output); err != nil {
		t.Fatalf("store-plan: %v\n%s", err, out)
	}
	sp.sums = readFile(t, filepath.Join(output, "output"))
	for _, f := range []string{"tfplan", "tree.tgz", "source.zip"} {
		obj := filepath.Join(fake, "gcs", vals["_TF_STATE_BUCKET"], "plans/prod", vals["BUILD_ID"], f)
		sum := sha256.Sum256([]byte(readFile(t, obj)))
		if !strings.Contains(sp.sums, hex.EncodeToString(sum[:])+"  "+f+"\n") {
			t.Errorf("store-plan's output %q does not hold the SHA-256 of the stored %s", sp.sums, f)
		}
	}
	var steps []map[string]any
	outputs := make([]string, len(plan.Steps))
	for i, s := range plan.Steps {
		steps = append(steps, map[string]any{"id": s.ID})
		if s.ID == "store-plan" {
			outputs[i] = base64.StdEncoding.EncodeToString([]byte(sp.sums))
		}
	}
	sp.record = map[string]any{
		"id":             vals["BUILD_ID"],
		"status":         "SUCCESS",
		"buildTriggerId": "plan-trigger",
		"serviceAccount": substitute(plan.ServiceAccount, vals),
		"substitutions": map[string]any{
			"_ENV": "prod", "_TF_STATE_BUCKET": vals["_TF_STATE_BUCKET"], "_TERRAFORM_VERSION": vals["_TERRAFORM_VERSION"],
			"COMMIT_SHA": vals["COMMIT_SHA"], "TRIGGER_NAME": "engagement-plan",
		},
		"steps":   steps,
		"results": map[string]any{"buildStepOutputs": outputs},
	}
	return sp
}

// applyCase is one apply attempt: what differs from an approved run of the
// apply trigger on a tested plan.
type applyCase struct {
	name      string
	trigger   string                            // TRIGGER_NAME of the apply build
	approval  string                            // its approval state
	planID    string                            // _PLAN_BUILD_ID
	editPlan  func(map[string]any)              // the plan build's record
	testedSHA string                            // COMMIT_SHA of the successful test build
	tamper    string                            // object of the stored plan replaced
	tamperSum bool                              // and the stored sums with its sum
	refused   bool                              // the apply must refuse
	after     func(t *testing.T, ws string) any // checks after an accepted run
}

// ApplyRefusals runs the apply build's verify-plan and fetch-plan steps for
// each case, against a plan stored by the plan build's own steps; it returns
// the cases where the apply did not do what it must.
func ApplyRefusals(t *testing.T, sp *storedPlan, apply cloudBuild, only ...string) []error {
	t.Helper()
	planID := planBuiltins["BUILD_ID"]
	sha := planBuiltins["COMMIT_SHA"]
	sub := func(k, v string) func(map[string]any) {
		return func(r map[string]any) { r["substitutions"].(map[string]any)[k] = v }
	}
	set := func(k string, v any) func(map[string]any) { return func(r map[string]any) { r[k] = v } }
	cases := []applyCase{
		{name: "approved trigger run of a tested plan"},
		{name: "build submitted by hand", trigger: "-", refused: true},
		{name: "build not approved", approval: "PENDING", refused: true},
		{name: "malformed plan build id", planID: "x; rm -rf /", refused: true},
		{name: "plan build that failed", editPlan: set("status", "FAILURE"), refused: true},
		{name: "plan build of another trigger", editPlan: set("buildTriggerId", "someone-elses-trigger"), refused: true},
		{name: "plan build as another identity", editPlan: set("serviceAccount", "projects/check-prod/serviceAccounts/123-compute@developer.gserviceaccount.com"), refused: true},
		{name: "plan of another environment", editPlan: sub("_ENV", "dev"), refused: true},
		{name: "plan with another Terraform", editPlan: sub("_TERRAFORM_VERSION", "1.12.0"), refused: true},
		{name: "plan with no recorded sums", editPlan: set("results", map[string]any{}), refused: true},
		{name: "commit without a successful test build", testedSHA: strings.Repeat("f", 40), refused: true},
		{name: "stored snapshot replaced", tamper: "tree.tgz", refused: true},
		{name: "stored plan replaced", tamper: "tfplan", refused: true},
		{name: "stored archive replaced", tamper: "source.zip", refused: true},
		{name: "stored snapshot and stored sums replaced", tamper: "tree.tgz", tamperSum: true, refused: true},
	}
	var errs []error
	for _, c := range cases {
		if len(only) > 0 && !slices.Contains(only, c.name) {
			continue
		}
		fake := t.TempDir()
		if err := os.CopyFS(fake, os.DirFS(sp.fake)); err != nil {
			t.Fatal(err)
		}
		record := map[string]any{}
		b, _ := json.Marshal(sp.record)
		_ = json.Unmarshal(b, &record)
		if c.editPlan != nil {
			c.editPlan(record)
		}
		self := "99999999-8888-7777-6666-555555555555"
		approval := c.approval
		if approval == "" {
			approval = "APPROVED"
		}
		tested := c.testedSHA
		if tested == "" {
			tested = sha
		}
		js, _ := json.Marshal(record)
		writeFile(t, filepath.Join(fake, "builds", planID+".json"), string(js))
		writeFile(t, filepath.Join(fake, "builds", planID+".fields"), fmt.Sprintf("buildTriggerId=%v\nstatus=%v\nsubstitutions.COMMIT_SHA=%s\n", record["buildTriggerId"], record["status"], sha))
		writeFile(t, filepath.Join(fake, "builds", self+".approval"), approval+"\n")
		writeFile(t, filepath.Join(fake, "builds", self+".fields"), "buildTriggerId=apply-trigger\nstatus=WORKING\n")
		writeFile(t, filepath.Join(fake, "builds", "aaaaaaaa-0000-0000-0000-000000000000.fields"), "buildTriggerId=test-trigger\nstatus=SUCCESS\nsubstitutions.COMMIT_SHA="+tested+"\n")
		// A failed test build of the planned commit, which does not count.
		writeFile(t, filepath.Join(fake, "builds", "bbbbbbbb-0000-0000-0000-000000000000.fields"), "buildTriggerId=test-trigger\nstatus=FAILURE\nsubstitutions.COMMIT_SHA="+sha+"\n")
		for name, id := range map[string]string{"engagement-plan": "plan-trigger", "engagement-test": "test-trigger", "engagement-apply": "apply-trigger"} {
			writeFile(t, filepath.Join(fake, "triggers", name), id+"\n")
		}
		bucket := filepath.Join(fake, "gcs", "check-prod-tfstate", "plans", "prod", planID)
		if c.tamper != "" {
			replaced := "replaced after the plan\n"
			if c.tamper == "tree.tgz" {
				// A well-formed snapshot of another tree.
				other := t.TempDir()
				writeFile(t, filepath.Join(other, "terraform/envs/prod/main.tf"), "# not the planned commit\n")
				if out, err := exec.Command("tar", "-czf", filepath.Join(other, "tree.tgz"), "-C", other, "terraform").CombinedOutput(); err != nil {
					t.Fatalf("tar: %v\n%s", err, out)
				}
				replaced = readFile(t, filepath.Join(other, "tree.tgz"))
			}
			writeFile(t, filepath.Join(bucket, c.tamper), replaced)
			if c.tamperSum {
				sum := sha256.Sum256([]byte(replaced))
				sums := regexp.MustCompile(`(?m)^[0-9a-f]{64}  `+regexp.QuoteMeta(c.tamper)+`$`).ReplaceAllString(sp.sums, hex.EncodeToString(sum[:])+"  "+c.tamper)
				writeFile(t, filepath.Join(bucket, "plan.sha256"), sums)
			}
		}
		trigger := c.trigger
		if trigger == "" {
			trigger = "engagement-apply"
		} else if trigger == "-" {
			trigger = ""
		}
		id := c.planID
		if id == "" {
			id = planID
		}
		vals := buildValues(apply, map[string]string{"PROJECT_ID": "check-prod", "BUILD_ID": self, "LOCATION": "us-central1", "TRIGGER_NAME": trigger},
			map[string]string{"_ENV": "prod", "_PLAN_BUILD_ID": id})
		ws := t.TempDir()
		// The apply build's own checkout, which must not be what is applied.
		writeFile(t, filepath.Join(ws, "terraform/envs/prod/main.tf"), "# the branch head, not the planned commit\n")
		out, err := runStep(t, apply, "verify-plan", vals, ws, fake)
		if err == nil {
			var out2 string
			out2, err = runStep(t, apply, "fetch-plan", vals, ws, fake)
			out += out2
		}
		switch {
		case c.refused && err == nil:
			errs = append(errs, fmt.Errorf("apply accepts: %s", c.name))
		case !c.refused && err != nil:
			errs = append(errs, fmt.Errorf("apply refuses: %s: %v\n%s", c.name, err, out))
		case !c.refused:
			tree := filepath.Join(ws, snapshotDir, "terraform/envs/prod")
			if got := readFile(t, filepath.Join(tree, "main.tf")); got != sp.planned {
				errs = append(errs, fmt.Errorf("apply's snapshot holds main.tf %q, not the planned commit's", got))
			}
			if got := readFile(t, filepath.Join(tree, "tfplan")); got != "the plan\n" {
				errs = append(errs, fmt.Errorf("apply's tfplan is %q", got))
			}
			if got := readFile(t, filepath.Join(ws, "source.zip")); got != PlaceholderArchive {
				errs = append(errs, fmt.Errorf("apply's source archive is %q", got))
			}
		}
	}
	return errs
}

func TestApplyTakesOnlyTheApprovedPlan(t *testing.T) {
	builds, texts := pipelineBuilds(t)
	sp := makeStoredPlan(t, builds["plan"])
	for _, err := range ApplyRefusals(t, sp, builds["apply"]) {
		t.Error(err)
	}
	// Each broken copy is run on the cases it should have refused.
	broken := []struct {
		name  string
		cases []string
		edits []string
	}{
		{"no hash verification", []string{"stored snapshot replaced", "stored plan replaced"}, []string{"sha256sum --check --strict plan.sha256\n", "\n"}},
		{"no trigger check", []string{"build submitted by hand"}, []string{`[[ "$$TRIGGER" == engagement-apply ]] || fail`, `true || fail`}},
		{"no approval check", []string{"build not approved"}, []string{`== APPROVED ]] || fail`, `== APPROVED ]] || true`}},
		{"no test build check", []string{"commit without a successful test build"}, []string{`[[ -n "$$tested" ]] || fail`, `true || fail`}},
		{"no check of the plan's trigger", []string{"plan build of another trigger"}, []string{`need(b.get("buildTriggerId") == os.environ["PLAN_TRIGGER_ID"]`, `need(True`}},
		// The sums taken from the bucket, next to the files they cover.
		{"sums read from the bucket", []string{"stored snapshot and stored sums replaced"}, []string{
			`open(".pipeline/plan.sha256", "w").write(sums)`, `pass`,
			"sha256sum --check --strict plan.sha256", "gcloud storage cp gs://${_TF_STATE_BUCKET}/plans/${_ENV}/${_PLAN_BUILD_ID}/plan.sha256 . && sha256sum --check --strict plan.sha256",
		}},
	}
	for _, b := range broken {
		t.Run("broken/"+b.name, func(t *testing.T) {
			bb := withText(t, builds, texts, "apply", b.edits...)
			errs := ApplyRefusals(t, sp, bb["apply"], b.cases...)
			if len(errs) == 0 {
				t.Fatal("the broken apply build does everything the real one does")
			}
			t.Logf("caught: %v", errs[0])
		})
	}
}

// --- the pipeline's Terraform root ---------------------------------------------------

var bootstrapVars = []string{
	"-var", "project_id=check-prod",
	"-var", "environment=prod",
	"-var", "repository=projects/check-prod/locations/us-central1/connections/github/repositories/engagement",
	"-var", `extra_regions={"us-east1"="projects/check-prod/locations/us-east1/connections/github/repositories/engagement"}`,
	"-var", "api_domain=api.prod.example.test",
	"-var", `alert_emails=["oncall@example.test"]`,
	"-var", `approvers=["group:approvers@example.test"]`,
	"-var", `operators=["group:operators@example.test"]`,
}

// planBootstrap plans terraform/bootstrap of the tree at root against the
// stand-in provider.
func planBootstrap(t *testing.T, root string, extraVars ...string) *Plan {
	t.Helper()
	needToolchain(t)
	dir := filepath.Join(root, "terraform", "bootstrap")
	writeFile(t, filepath.Join(dir, "check_override.tf"), "terraform {\n  backend \"local\" {}\n}\n")
	for _, args := range [][]string{
		{"init", "-input=false", "-no-color", "-reconfigure"},
		{"validate", "-no-color"},
		append(append([]string{"plan", "-refresh=false", "-input=false", "-no-color", "-lock=false", "-out=check.tfplan"}, bootstrapVars...), extraVars...),
	} {
		if out, err := toolchain.Run(dir, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	js, err := toolchain.runStdout(dir, "show", "-json", "check.tfplan")
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{}
	if err := json.Unmarshal([]byte(js), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Roles the plan identity may hold: it reads, it writes no resource.
var planRoles = []string{"roles/logging.logWriter", "roles/viewer", "roles/iam.securityReviewer"}

// Roles through which a principal can act as (or mint tokens of) a service
// account, or change the triggers.
var actAsRoles = []string{"roles/owner", "roles/editor", "roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator", "roles/cloudbuild.builds.editor", "roles/cloudbuild.builds.builder"}

// Predefined roles that can write Spanner data, and the permissions that
// do: no pipeline identity holds one, so no build can rewrite the
// moderation audit trail (ModerationLog; Data Access audit logs record
// whoever does, terraform/modules/engagement/audit.tf).
var (
	spannerWriteRoles = []string{"roles/owner", "roles/editor", "roles/spanner.admin", "roles/spanner.databaseAdmin", "roles/spanner.databaseUser"}
	spannerWritePerms = []string{"spanner.databases.write", "spanner.databases.beginOrRollbackReadWriteTransaction", "spanner.databases.beginPartitionedDmlTransaction"}
)

// BootstrapRule checks the pipeline's identities, grants and triggers in
// the plan of terraform/bootstrap for environment env.
func BootstrapRule(p *Plan, env string) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	project := "check-" + env
	member := func(id string) string {
		return "serviceAccount:engagement-" + id + "@" + project + ".iam.gserviceaccount.com"
	}
	ids := map[string]string{"test": "", "plan": "", "apply": ""}
	for _, sa := range p.Instances("google_service_account", "pipeline") {
		id := strings.TrimPrefix(sa.Str("account_id"), "engagement-")
		if _, ok := ids[id]; !ok {
			add("unexpected pipeline identity %s", sa.Str("account_id"))
		}
		delete(ids, id)
	}
	for id := range ids {
		add("no identity engagement-%s", id)
	}

	roles := map[string][]string{}
	custom := map[string][]string{} // custom role name → its permissions
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" {
			continue
		}
		m, role := rc.Str("member"), rc.Str("role")
		switch rc.Type {
		case "google_project_iam_member":
			roles[m] = append(roles[m], role)
			if slices.Contains(actAsRoles, role) && m != member("apply") {
				add("%s: %s gets %s, which can act as the apply identity or change the triggers", rc.Address, m, role)
			}
		case "google_service_account_iam_member", "google_service_account_iam_binding", "google_service_account_iam_policy":
			add("%s: a grant on a service account; nobody is to act as the pipeline's identities but their triggers", rc.Address)
		case "google_storage_bucket_iam_member":
			switch {
			case role == "roles/storage.objectViewer" && (m == member("plan") || m == member("apply")):
			case m == member("plan") && role == "roles/storage.objectUser":
				expr := rc.Str("condition", 0, "expression")
				bucket := "projects/_/buckets/" + project + "-tfstate/objects/"
				want := `resource.name == "` + bucket + `engagement/` + env + `/default.tflock" || resource.name.startsWith("` + bucket + `plans/` + env + `/")`
				if expr != want {
					add("%s: the plan identity writes in the state bucket under condition %q, want only its lock and plans: %s", rc.Address, expr, want)
				}
			default:
				add("%s: %s gets %s on the state bucket", rc.Address, m, role)
			}
		case "google_project_iam_custom_role":
			custom["projects/"+project+"/roles/"+rc.Str("role_id")] = allStrings(rc.Get("permissions"))
			for _, perm := range allStrings(rc.Get("permissions")) {
				if perm == "cloudbuild.builds.update" || strings.HasPrefix(perm, "iam.") || strings.HasPrefix(perm, "resourcemanager.projects.setIam") {
					add("%s: the runner role holds %s", rc.Address, perm)
				}
			}
		}
	}
	for _, id := range []string{"test", "plan", "apply"} {
		if !slices.Contains(roles[member(id)], "roles/logging.logWriter") {
			add("engagement-%s cannot write its build log (roles/logging.logWriter)", id)
		}
	}
	for _, id := range []string{"test", "plan", "apply"} {
		for _, r := range roles[member(id)] {
			if slices.Contains(spannerWriteRoles, r) {
				add("engagement-%s holds %s, which can write Spanner data: a build could rewrite the audit trail", id, r)
			}
			for _, perm := range custom[r] {
				if slices.Contains(spannerWritePerms, perm) {
					add("engagement-%s holds %s through %s: a build could rewrite the audit trail", id, perm, r)
				}
			}
		}
	}
	if got := roles[member("test")]; !slices.Equal(got, []string{"roles/logging.logWriter"}) {
		add("engagement-test holds %v; it runs the tests and may only write its log", got)
	}
	for _, r := range roles[member("plan")] {
		if !slices.Contains(planRoles, r) {
			add("engagement-plan holds %s; it may only read (%v)", r, planRoles)
		}
	}

	// Each trigger runs its file as its identity; only the apply trigger's
	// builds run as the apply identity, and only after an approval.
	wantTriggers := map[string]struct{ file, id string }{
		"engagement-test":  {"cloudbuild-test.yaml", "test"},
		"engagement-plan":  {"cloudbuild.yaml", "plan"},
		"engagement-apply": {"cloudbuild-apply.yaml", "apply"},
	}
	seen := map[string]bool{}
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_cloudbuild_trigger" {
			continue
		}
		name := rc.Str("name")
		w, ok := wantTriggers[name]
		if !ok {
			add("%s: unexpected trigger %q", rc.Address, name)
			continue
		}
		seen[name] = true
		file := rc.Str("filename")
		if file == "" {
			file = rc.Str("git_file_source", 0, "path")
		}
		if file != w.file {
			add("%s runs %q, want %s", name, file, w.file)
		}
		if sa := rc.Str("service_account"); sa != "projects/"+project+"/serviceAccounts/"+strings.TrimPrefix(member(w.id), "serviceAccount:") {
			add("%s runs as %q, want engagement-%s", name, sa, w.id)
		}
		approval, _ := rc.Get("approval_config", 0, "approval_required").(bool)
		if name == "engagement-apply" && !approval {
			add("%s does not wait for an approval", name)
		}
		if name == "engagement-apply" && rc.Get("repository_event_config") != nil && len(allStrings(rc.Get("repository_event_config"))) > 0 {
			add("%s starts on repository events; it is started by hand for one plan", name)
		}
	}
	for name := range wantTriggers {
		if !seen[name] {
			add("no trigger %s", name)
		}
	}
	return errs
}

func TestBootstrap(t *testing.T) {
	p := planBootstrap(t, copyOf(t, nil))
	for _, err := range BootstrapRule(p, "prod") {
		t.Error(err)
	}
	broken := []struct{ name, file, old, new string }{
		{"apply without approval", "pipeline.tf", "approval_required = true", "approval_required = false"},
		{"plan identity as editor", "pipeline.tf", `plan = ["roles/logging.logWriter", "roles/viewer", "roles/iam.securityReviewer"]`, `plan = ["roles/logging.logWriter", "roles/editor"]`},
		{"test identity without its log", "pipeline.tf", `test = ["roles/logging.logWriter"]`, `test = []`},
		{"deployers may act as the apply identity", "pipeline.tf", "# --- triggers ---", "resource \"google_service_account_iam_member\" \"deployers\" {\n  service_account_id = google_service_account.pipeline[\"apply\"].name\n  role               = \"roles/iam.serviceAccountUser\"\n  member             = \"group:deployers@example.test\"\n}\n\n# --- triggers ---"},
		{"apply identity as Spanner admin", "pipeline.tf", `"projects/${var.project_id}/roles/${local.spanner_deployer_role}",`, `"roles/spanner.admin",`},
		{"deployer role that writes data", "pipeline.tf", `"spanner.databases.updateDdl",`, `"spanner.databases.updateDdl", "spanner.databases.write",`},
		{"operators as Cloud Build editors", "pipeline.tf", "role    = google_project_iam_custom_role.runner.id", `role    = "roles/cloudbuild.builds.editor"`},
		{"plan identity writing the whole state bucket", "pipeline.tf", `expression  = "resource.name == \"projects/_/buckets/${local.state_bucket}/objects/engagement/${var.environment}/default.tflock\" || resource.name.startsWith(\"projects/_/buckets/${local.state_bucket}/objects/plans/${var.environment}/\")"`, `expression  = "true"`},
		{"plan trigger as the apply identity", "pipeline.tf", `service_account = "projects/${var.project_id}/serviceAccounts/${local.emails[each.value.id]}"`, `service_account = "projects/${var.project_id}/serviceAccounts/${local.emails.apply}"`},
	}
	for _, b := range broken {
		t.Run("broken/"+b.name, func(t *testing.T) {
			root := copyOf(t, func(root string) {
				path := filepath.Join(root, "terraform", "bootstrap", b.file)
				s := readFile(t, path)
				if !strings.Contains(s, b.old) {
					t.Fatalf("%s does not contain %q", b.file, b.old)
				}
				writeFile(t, path, strings.Replace(s, b.old, b.new, 1))
			})
			errs := BootstrapRule(planBootstrap(t, root), "prod")
			if len(errs) == 0 {
				t.Fatal("the broken copy passes")
			}
			t.Logf("refused as expected: %v", errors.Join(errs...))
		})
	}
}

// PipelineRegionRule: each of the pipeline's triggers (test, plan, apply)
// exists in at least min regions, each on a repository connection of its
// own region (a connection is regional, and a trigger runs its builds in
// its region), so that losing a region leaves a whole pipeline that can
// plan and apply from the other (docs/operations.md, a region lost).
func PipelineRegionRule(p *Plan, min int) []error {
	var errs []error
	regions := map[string]map[string]bool{}
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_cloudbuild_trigger" {
			continue
		}
		name, loc := rc.Str("name"), rc.Str("location")
		repo := rc.Str("repository_event_config", 0, "repository")
		if repo == "" {
			repo = rc.Str("source_to_build", 0, "repository")
		}
		if !strings.Contains(repo, "/locations/"+loc+"/") {
			errs = append(errs, fmt.Errorf("pipeline region rule: %s in %s builds from repository %q of another region", rc.Address, loc, repo))
		}
		if regions[name] == nil {
			regions[name] = map[string]bool{}
		}
		regions[name][loc] = true
	}
	for _, name := range []string{"engagement-test", "engagement-plan", "engagement-apply"} {
		if got := sortedSet(regions[name]); len(got) < min {
			errs = append(errs, fmt.Errorf("pipeline region rule: trigger %s is in %v, want at least %d regions", name, got, min))
		}
	}
	return errs
}

// Prod's pipeline is whole in each of its two regions; planned with one
// region, it fails the pipeline region rule.
func TestPipelineRegions(t *testing.T) {
	p := planBootstrap(t, copyOf(t, nil))
	for _, err := range PipelineRegionRule(p, 2) {
		t.Error(err)
	}
	t.Run("broken: the triggers in one region", func(t *testing.T) {
		p := planBootstrap(t, copyOf(t, nil), "-var", "extra_regions={}")
		if errs := PipelineRegionRule(p, 2); !containsErr(errs, "pipeline region rule: trigger engagement-apply is in [us-central1], want at least 2 regions") {
			t.Fatalf("the pipeline region rule did not report it: %v", errors.Join(errs...))
		}
	})
}

// The bootstrap root commits its lock file: the google provider the
// environments use, with the real release's checksums.
func TestBootstrapLockFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "terraform", "bootstrap", ".terraform.lock.hcl"))
	if err != nil {
		t.Fatalf("no committed lock file: %v", err)
	}
	env, err := os.ReadFile(filepath.Join(repo, "terraform", "envs", "prod", ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	got := lockProvider.FindAllStringSubmatch(string(b), -1)
	var want string
	for _, m := range lockProvider.FindAllStringSubmatch(string(env), -1) {
		if m[1] == "google" {
			want = m[0]
		}
	}
	if len(got) != 1 || got[0][1] != "google" || got[0][0] != want {
		t.Errorf("terraform/bootstrap/.terraform.lock.hcl must lock exactly the google provider as terraform/envs/prod does")
	}
}

// --- the source object ---------------------------------------------------------------

// SourceObjectRule: the functions' source object is named by the archive's
// SHA-256, so the name changes exactly when the content does.
func SourceObjectRule(p *Plan) []error {
	sum := sha256.Sum256([]byte(PlaceholderArchive))
	want := "engagement-" + hex.EncodeToString(sum[:]) + ".zip"
	objs := p.Instances("google_storage_bucket_object", "source")
	if len(objs) != 1 {
		return []error{fmt.Errorf("%d source objects planned, want 1", len(objs))}
	}
	for _, o := range objs {
		if got := o.Str("name"); got != want {
			return []error{fmt.Errorf("the source object is named %q, want %q (the archive's SHA-256)", got, want)}
		}
	}
	return nil
}

func TestSourceObjectNamedByContent(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		if errs[env] != nil {
			t.Fatalf("%s: %v", env, errs[env])
		}
		for _, err := range SourceObjectRule(res[env].PlanJSON) {
			t.Errorf("%s: %v", env, err)
		}
	}
	t.Run("broken/named by commit", func(t *testing.T) {
		root := copyOf(t, func(root string) {
			path := filepath.Join(root, ModuleDir, "functions.tf")
			s := readFile(t, path)
			old := `name     = "engagement-${filesha256(var.source_archive)}.zip"`
			if !strings.Contains(s, old) {
				t.Fatalf("functions.tf does not contain %q", old)
			}
			writeFile(t, path, strings.Replace(s, old, `name     = "engagement-${var.source_version}.zip"`, 1))
		})
		r, err := toolchain.CheckEnvironment(root, "dev")
		if err != nil {
			t.Fatal(err)
		}
		if len(SourceObjectRule(r.PlanJSON)) == 0 {
			t.Fatal("a source object named by commit passes")
		}
	})
}

// --- the documentation --------------------------------------------------------------

// An apply of an environment that is not the apply trigger's: a hand
// submission of the apply build, or terraform apply of a saved plan.
var handApply = regexp.MustCompile(`builds submit[^\n]*cloudbuild-apply\.yaml|cloudbuild-apply\.yaml[^\n]*builds submit|terraform apply [^\n]*tfplan`)

// DocsRule: nothing documents applying by hand; docs/deploy.md gives the
// apply trigger as the way to apply.
func DocsRule(files map[string]string) []error {
	var errs []error
	for name, text := range files {
		if m := handApply.FindString(text); m != "" {
			errs = append(errs, fmt.Errorf("%s documents an apply by hand: %q", name, m))
		}
	}
	if !strings.Contains(files["docs/deploy.md"], "gcloud builds triggers run engagement-apply") {
		errs = append(errs, fmt.Errorf("docs/deploy.md does not give the apply trigger (gcloud builds triggers run engagement-apply)"))
	}
	return errs
}

func docFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	paths, _ := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	paths = append(paths, filepath.Join(repo, "README.md"))
	for _, f := range pipelineFiles {
		paths = append(paths, filepath.Join(repo, f))
	}
	for _, p := range paths {
		rel, _ := filepath.Rel(repo, p)
		files[rel] = readFile(t, p)
	}
	return files
}

func TestNoApplyByHand(t *testing.T) {
	files := docFiles(t)
	for _, err := range DocsRule(files) {
		t.Error(err)
	}
	for _, line := range []string{
		"By hand: `gcloud builds submit --config cloudbuild-apply.yaml --substitutions=_ENV=prod`",
		"   terraform apply -input=false tfplan",
	} {
		t.Run("broken/"+line, func(t *testing.T) {
			broken := maps2(files, map[string]string{"docs/deploy.md": files["docs/deploy.md"] + "\n" + line + "\n"})
			if len(DocsRule(broken)) == 0 {
				t.Fatal("a documented hand apply passes")
			}
		})
	}
}
