package check

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type cloudBuild struct {
	ServiceAccount string            `yaml:"serviceAccount"`
	Substitutions  map[string]string `yaml:"substitutions"`
	Options        struct {
		DynamicSubstitutions bool     `yaml:"dynamicSubstitutions"`
		SubstitutionOption   string   `yaml:"substitutionOption"`
		Env                  []string `yaml:"env"`
		Logging              string   `yaml:"logging"`
		MachineType          string   `yaml:"machineType"`
	} `yaml:"options"`
	Timeout string      `yaml:"timeout"`
	Steps   []buildStep `yaml:"steps"`
}

type buildStep struct {
	ID         string   `yaml:"id"`
	Name       string   `yaml:"name"`
	Entrypoint string   `yaml:"entrypoint"`
	Args       []string `yaml:"args"`
	Dir        string   `yaml:"dir"`
	Env        []string `yaml:"env"`
	WaitFor    []string `yaml:"waitFor"`
}

func (s buildStep) command() string { return s.Entrypoint + " " + strings.Join(s.Args, " ") }

// Substitution references: $NAME or ${NAME}, not the escaped $$.
var substRef = regexp.MustCompile(`(?:^|[^$])\$\{?([A-Z_][A-Z0-9_]*)\}?`)

// Built-in substitutions Cloud Build provides.
var builtins = []string{"PROJECT_ID", "PROJECT_NUMBER", "BUILD_ID", "LOCATION", "SHORT_SHA", "COMMIT_SHA", "REVISION_ID", "BRANCH_NAME", "TAG_NAME", "REPO_NAME", "TRIGGER_NAME", "SERVICE_ACCOUNT_EMAIL"}

// decodeBuild decodes a Cloud Build file with unknown fields rejected.
func decodeBuild(b []byte) (cloudBuild, error) {
	var cb cloudBuild
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	err := dec.Decode(&cb)
	return cb, err
}

// readBuild reads the repository's Cloud Build file and decodes it, with
// unknown fields rejected; it returns the text too.
func readBuild(t *testing.T, file string) (cloudBuild, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, file))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := decodeBuild(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return cb, string(b)
}

// loadBuild decodes a Cloud Build file with unknown fields rejected, so a
// misspelt key fails, and checks its substitutions: every one used is
// declared (or built in), every declared one is used.
func loadBuild(t *testing.T, file string) (cloudBuild, map[string]buildStep, []string) {
	t.Helper()
	cb, _ := readBuild(t, file)
	used := map[string]bool{}
	refs := func(s string) {
		for _, m := range substRef.FindAllStringSubmatch(s, -1) {
			used[m[1]] = true
		}
	}
	for _, v := range cb.Substitutions {
		refs(v)
	}
	refs(cb.ServiceAccount)
	for _, s := range cb.Steps {
		refs(s.Name)
		refs(s.Dir)
		for _, a := range s.Args {
			refs(a)
		}
		for _, e := range s.Env {
			refs(e)
		}
	}
	for name := range used {
		if _, ok := cb.Substitutions[name]; !ok && !slices.Contains(builtins, name) {
			t.Errorf("%s: substitution %s is used but not declared", file, name)
		}
	}
	for name := range cb.Substitutions {
		if !strings.HasPrefix(name, "_") {
			t.Errorf("%s: user substitution %s must start with _", file, name)
		}
		if !used[name] {
			t.Errorf("%s: substitution %s is declared but not used", file, name)
		}
	}
	if env, ok := cb.Substitutions["_ENV"]; ok && !slices.Contains(Environments, env) {
		t.Errorf("%s: _ENV defaults to %q, not an environment", file, env)
	}
	if !cb.Options.DynamicSubstitutions {
		t.Errorf("%s: defaults such as ${PROJECT_ID}-tfstate need dynamicSubstitutions", file)
	}
	var ids []string
	steps := map[string]buildStep{}
	for _, s := range cb.Steps {
		ids = append(ids, s.ID)
		steps[s.ID] = s
	}
	return cb, steps, ids
}

// inOrder checks the steps run in order, each waiting for the one before.
func inOrder(t *testing.T, file string, ids, want []string, steps map[string]buildStep) {
	t.Helper()
	if !slices.Equal(ids, want) {
		t.Fatalf("%s: steps %v, want %v", file, ids, want)
	}
	for i, id := range want[1:] {
		if w := steps[id].WaitFor; !slices.Equal(w, []string{want[i]}) {
			t.Errorf("%s: step %s waits for %v, want [%s]", file, id, w, want[i])
		}
	}
}

// cloudbuild-test.yaml runs make test and nothing that deploys.
func TestCloudBuildTest(t *testing.T) {
	const file = "cloudbuild-test.yaml"
	cb, steps, ids := loadBuild(t, file)
	inOrder(t, file, ids, []string{"vet", "test"}, steps)
	if c := steps["vet"].command(); !strings.Contains(c, "go vet ./...") {
		t.Errorf("vet step runs %q", c)
	}
	test := steps["test"]
	if test.Name != "${_EMULATORS_IMAGE}" || !strings.Contains(cb.Substitutions["_EMULATORS_IMAGE"], "google-cloud-cli:emulators") {
		t.Errorf("test step runs in %q (%q), want the Google Cloud CLI emulators image", test.Name, cb.Substitutions["_EMULATORS_IMAGE"])
	}
	// The test step runs make test through .ci/run, with what it needs.
	for _, want := range []string{"${_GO_VERSION}", "${_TERRAFORM_VERSION}", "gcc", "make", ".ci/run"} {
		if !strings.Contains(test.command(), want) {
			t.Errorf("test step does not mention %q: %s", want, test.command())
		}
	}
}

// cloudbuild.yaml validates its substitutions, snapshots the commit, builds
// the archive and plans from the snapshot; it never tests and never applies.
func TestCloudBuild(t *testing.T) {
	const file = "cloudbuild.yaml"
	cb, steps, ids := loadBuild(t, file)
	for _, name := range []string{"_ENV", "_API_DOMAIN", "_SOURCE_VERSION", "_TF_STATE_BUCKET", "_ALERT_EMAILS", "_TERRAFORM_VERSION"} {
		if _, ok := cb.Substitutions[name]; !ok {
			t.Errorf("substitution %s is missing", name)
		}
	}
	inOrder(t, file, ids, []string{"validate", "snapshot", "archive", "terraform-init", "terraform-plan", "store-plan"}, steps)

	// The archive's file list is tools/gcfbuild's, which make test builds as
	// Cloud Functions would, from the snapshot.
	if a := steps["archive"]; a.Entrypoint != "go" || a.Dir != snapshotDir || !slices.Equal(a.Args, []string{"run", "./tools/gcfbuild", "-zip", "/workspace/source.zip"}) {
		t.Errorf("archive step runs %q in %q, want go run ./tools/gcfbuild -zip /workspace/source.zip in %s", a.command(), a.Dir, snapshotDir)
	}
	for _, env := range Environments {
		if _, err := os.Stat(filepath.Join(repo, "terraform", "envs", env, "main.tf")); err != nil {
			t.Errorf("_ENV=%s has no root: %v", env, err)
		}
	}
	checkInit(t, file, steps["terraform-init"])
	plan := steps["terraform-plan"].command()
	for _, want := range []string{"plan", "-out=tfplan", "-var=project_id=${PROJECT_ID}", "-var=api_domain=${_API_DOMAIN}", "-var=source_archive=/workspace/source.zip", "-var=source_version=${_SOURCE_VERSION}"} {
		if !strings.Contains(plan, want) {
			t.Errorf("terraform-plan does not pass %q: %s", want, plan)
		}
	}
	if strings.Contains(plan, "-lock=false") {
		t.Errorf("terraform-plan must hold the state lock: %s", plan)
	}
	// Every variable an environment requires is passed by the plan step
	// (source_archive is passed too: its SHA-256 names the source object).
	for _, env := range Environments {
		for _, v := range requiredVariables(t, filepath.Join(repo, "terraform", "envs", env)) {
			if !strings.Contains(plan, "-var="+v+"=") {
				t.Errorf("%s requires variable %s, which terraform-plan does not pass", env, v)
			}
		}
	}
	store := steps["store-plan"].command()
	for _, want := range []string{"tfplan", "tree.tgz", "source.zip", "sha256sum", "$$BUILDER_OUTPUT/output", "gs://${_TF_STATE_BUCKET}/plans/${_ENV}/${BUILD_ID}/"} {
		if !strings.Contains(store, want) {
			t.Errorf("store-plan does not mention %q: %s", want, store)
		}
	}
	for _, s := range cb.Steps {
		if slices.Contains(s.Args, "apply") || strings.Contains(s.command(), "terraform apply") {
			t.Errorf("step %s applies: the plan build must only plan (cloudbuild-apply.yaml applies)", s.ID)
		}
	}
}

// cloudbuild-apply.yaml applies the stored plan of one plan build, nothing else.
func TestCloudBuildApply(t *testing.T) {
	const file = "cloudbuild-apply.yaml"
	cb, steps, ids := loadBuild(t, file)
	plan, _, _ := loadBuild(t, "cloudbuild.yaml")
	for _, name := range []string{"_ENV", "_PLAN_BUILD_ID", "_TF_STATE_BUCKET", "_TERRAFORM_VERSION"} {
		if _, ok := cb.Substitutions[name]; !ok {
			t.Errorf("%s: substitution %s is missing", file, name)
		}
	}
	for _, name := range []string{"_TF_STATE_BUCKET", "_TERRAFORM_VERSION", "_GCLOUD_IMAGE"} {
		if cb.Substitutions[name] != plan.Substitutions[name] {
			t.Errorf("%s: %s=%q, but the plan build uses %q", file, name, cb.Substitutions[name], plan.Substitutions[name])
		}
	}
	inOrder(t, file, ids, []string{"verify-plan", "fetch-plan", "terraform-init", "terraform-apply"}, steps)
	fetch := steps["fetch-plan"].command()
	for _, want := range []string{"gs://${_TF_STATE_BUCKET}/plans/${_ENV}/${_PLAN_BUILD_ID}/tfplan", "tree.tgz", "source.zip", "/workspace/source.zip"} {
		if !strings.Contains(fetch, want) {
			t.Errorf("fetch-plan does not fetch %q: %s", want, fetch)
		}
	}
	checkInit(t, file, steps["terraform-init"])
	apply := steps["terraform-apply"]
	if apply.Dir != snapshotDir+"/terraform/envs/${_ENV}" || apply.Name != terraformImage {
		t.Errorf("terraform-apply runs in %q with %q", apply.Dir, apply.Name)
	}
	if !slices.Equal(apply.Args, []string{"apply", "-input=false", "tfplan"}) {
		t.Errorf("terraform-apply runs %v, want the stored plan", apply.Args)
	}
}

// checkInit: the GCS backend, and the committed lock file as it is.
func checkInit(t *testing.T, file string, s buildStep) {
	t.Helper()
	c := s.command()
	for _, want := range []string{"init", "-backend-config=bucket=${_TF_STATE_BUCKET}", "-lockfile=readonly"} {
		if !strings.Contains(c, want) {
			t.Errorf("%s: terraform-init does not pass %q: %s", file, want, c)
		}
	}
	if s.Dir != snapshotDir+"/terraform/envs/${_ENV}" {
		t.Errorf("%s: terraform-init runs in %q", file, s.Dir)
	}
}
