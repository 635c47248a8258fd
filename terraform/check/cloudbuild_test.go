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
	Substitutions map[string]string `yaml:"substitutions"`
	Options       struct {
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
	WaitFor    []string `yaml:"waitFor"`
}

func (s buildStep) command() string { return s.Entrypoint + " " + strings.Join(s.Args, " ") }

// Substitution references: $NAME or ${NAME}, not the escaped $$.
var substRef = regexp.MustCompile(`(?:^|[^$])\$\{?([A-Z_][A-Z0-9_]*)\}?`)

// Built-in substitutions Cloud Build provides.
var builtins = []string{"PROJECT_ID", "PROJECT_NUMBER", "BUILD_ID", "LOCATION", "SHORT_SHA", "COMMIT_SHA", "REVISION_ID", "BRANCH_NAME", "TAG_NAME", "REPO_NAME", "TRIGGER_NAME", "SERVICE_ACCOUNT_EMAIL"}

// The YAML is decoded with unknown fields rejected, so a misspelt key fails.
func TestCloudBuild(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "cloudbuild.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cb cloudBuild
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cb); err != nil {
		t.Fatalf("cloudbuild.yaml: %v", err)
	}

	// Every substitution used is declared (or built in), every declared one is used.
	used := map[string]bool{}
	refs := func(s string) {
		for _, m := range substRef.FindAllStringSubmatch(s, -1) {
			used[m[1]] = true
		}
	}
	for _, v := range cb.Substitutions {
		refs(v)
	}
	for _, s := range cb.Steps {
		refs(s.Name)
		refs(s.Dir)
		for _, a := range s.Args {
			refs(a)
		}
	}
	for name := range used {
		if _, ok := cb.Substitutions[name]; !ok && !slices.Contains(builtins, name) {
			t.Errorf("substitution %s is used but not declared", name)
		}
	}
	for name := range cb.Substitutions {
		if !strings.HasPrefix(name, "_") {
			t.Errorf("user substitution %s must start with _", name)
		}
		if !used[name] {
			t.Errorf("substitution %s is declared but not used", name)
		}
	}
	for _, name := range []string{"_ENV", "_API_DOMAIN", "_SOURCE_VERSION", "_TF_STATE_BUCKET"} {
		if _, ok := cb.Substitutions[name]; !ok {
			t.Errorf("substitution %s is missing", name)
		}
	}
	if env := cb.Substitutions["_ENV"]; !slices.Contains(Environments, env) {
		t.Errorf("_ENV defaults to %q, not an environment", env)
	}
	if !cb.Options.DynamicSubstitutions {
		t.Error("defaults such as ${PROJECT_ID}-tfstate need dynamicSubstitutions")
	}

	// The steps, in order, each waiting for the one before.
	wantIDs := []string{"vet", "test", "archive", "terraform-init", "terraform-plan", "terraform-apply"}
	var ids []string
	steps := map[string]buildStep{}
	for _, s := range cb.Steps {
		ids = append(ids, s.ID)
		steps[s.ID] = s
	}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("steps %v, want %v", ids, wantIDs)
	}
	for i, id := range wantIDs[1:] {
		if w := steps[id].WaitFor; !slices.Equal(w, []string{wantIDs[i]}) {
			t.Errorf("step %s waits for %v, want [%s]", id, w, wantIDs[i])
		}
	}

	if c := steps["vet"].command(); !strings.Contains(c, "go vet ./...") {
		t.Errorf("vet step runs %q", c)
	}
	test := steps["test"]
	if test.Name != "${_EMULATORS_IMAGE}" || !strings.Contains(cb.Substitutions["_EMULATORS_IMAGE"], "google-cloud-cli:emulators") {
		t.Errorf("test step runs in %q (%q), want the Google Cloud CLI emulators image", test.Name, cb.Substitutions["_EMULATORS_IMAGE"])
	}
	for _, want := range []string{"${_GO_VERSION}", "go test", "go list ./..."} {
		if !strings.Contains(test.command(), want) {
			t.Errorf("test step does not mention %q: %s", want, test.command())
		}
	}
	// The archive's file list is tools/gcfbuild's, which make test builds as
	// Cloud Functions would.
	if a := steps["archive"]; a.Entrypoint != "go" || !slices.Equal(a.Args, []string{"run", "./tools/gcfbuild", "-zip", "/workspace/source.zip"}) {
		t.Errorf("archive step runs %q, want go run ./tools/gcfbuild -zip /workspace/source.zip", a.command())
	}

	for _, id := range []string{"terraform-init", "terraform-plan", "terraform-apply"} {
		s := steps[id]
		if s.Dir != "terraform/envs/${_ENV}" {
			t.Errorf("step %s runs in %q, want terraform/envs/${_ENV}", id, s.Dir)
		}
		if s.Name != "${_TERRAFORM_IMAGE}" {
			t.Errorf("step %s runs in %q", id, s.Name)
		}
	}
	for _, env := range Environments {
		if _, err := os.Stat(filepath.Join(repo, "terraform", "envs", env, "main.tf")); err != nil {
			t.Errorf("_ENV=%s has no root: %v", env, err)
		}
	}
	if c := steps["terraform-init"].command(); !strings.Contains(c, "init") || !strings.Contains(c, "-backend-config=bucket=${_TF_STATE_BUCKET}") {
		t.Errorf("terraform-init runs %q", c)
	}
	plan := steps["terraform-plan"].command()
	for _, want := range []string{"plan", "-out=tfplan", "-var=project_id=${PROJECT_ID}", "-var=api_domain=${_API_DOMAIN}", "-var=source_archive=/workspace/source.zip", "-var=source_version=${_SOURCE_VERSION}"} {
		if !strings.Contains(plan, want) {
			t.Errorf("terraform-plan does not pass %q: %s", want, plan)
		}
	}
	// Every variable an environment requires is passed by the plan step.
	for _, env := range Environments {
		for _, v := range requiredVariables(t, filepath.Join(repo, "terraform", "envs", env)) {
			if !strings.Contains(plan, "-var="+v+"=") {
				t.Errorf("%s requires variable %s, which terraform-plan does not pass", env, v)
			}
		}
	}
	if a := steps["terraform-apply"].Args; !slices.Equal(a, []string{"apply", "-input=false", "tfplan"}) {
		t.Errorf("terraform-apply runs %v, want the saved plan", a)
	}
}
