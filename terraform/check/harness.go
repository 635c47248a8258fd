// Package check verifies terraform/ offline: terraform fmt, validate and plan
// for every environment against the stand-in provider of tools/tfprovider
// (the real Google provider schema, no API calls), and a cross-check of the
// planned resources against the Go code: topology.json as package
// shared/topology reads it, the environment variables of shared/config and the
// functions registered in functions/.
//
// A plan made here is a schema check, not a real plan: computed values are
// unknown and nothing is read from Google Cloud.
package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Banner is printed before the checks so that nobody mistakes their output for
// a real plan.
const Banner = "SCHEMA CHECK against a stand-in provider serving the real google 6.50.0 / google-beta 6.50.0 / random 3.7.2 / time 0.13.1 schemas: " +
	"validate and plan -refresh=false, NOT a real plan (computed values unknown, nothing read from Google Cloud)"

// Environments are the roots under terraform/envs.
var Environments = []string{"dev", "prod"}

// Provider versions the stand-in is installed as; they must satisfy the
// version constraints of terraform/.
var standIns = []struct{ name, version string }{
	{"google", "6.50.0"},
	{"google-beta", "6.50.0"},
	{"random", "3.7.2"},
	{"time", "0.13.1"},
}

// RepoRoot finds the module root (the directory holding go.mod) from dir.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Toolchain is a built stand-in provider installed in a filesystem mirror,
// with the Terraform CLI configuration that uses it.
type Toolchain struct {
	Terraform string // terraform binary
	CLIConfig string // TF_CLI_CONFIG_FILE
}

// NewToolchain builds tools/tfprovider into a filesystem mirror under dir and
// writes a CLI configuration that installs hashicorp/google, google-beta,
// random and time from it only, so nothing is downloaded.
func NewToolchain(repo, dir string) (*Toolchain, error) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		return nil, fmt.Errorf("terraform is not on the PATH: %w", err)
	}
	bin := filepath.Join(dir, "tfprovider")
	build := exec.Command("go", "build", "-o", bin, "./tools/tfprovider")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./tools/tfprovider: %v\n%s", err, out)
	}
	mirror := filepath.Join(dir, "mirror")
	for _, p := range standIns {
		d := filepath.Join(mirror, "registry.terraform.io", "hashicorp", p.name, p.version, "linux_amd64")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		exe := filepath.Join(d, fmt.Sprintf("terraform-provider-%s_v%s", p.name, p.version))
		if err := os.WriteFile(exe, b, 0o755); err != nil {
			return nil, err
		}
	}
	cfg := filepath.Join(dir, "terraform.tfrc")
	rc := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/hashicorp/google", "registry.terraform.io/hashicorp/google-beta", "registry.terraform.io/hashicorp/random", "registry.terraform.io/hashicorp/time"]
  }
}
`, mirror)
	if err := os.WriteFile(cfg, []byte(rc), 0o644); err != nil {
		return nil, err
	}
	return &Toolchain{Terraform: tf, CLIConfig: cfg}, nil
}

// Run runs terraform in dir and returns its combined output.
func (tc *Toolchain) Run(dir string, args ...string) (string, error) {
	return tc.run(dir, true, args...)
}

func (tc *Toolchain) runStdout(dir string, args ...string) (string, error) {
	return tc.run(dir, false, args...)
}

func (tc *Toolchain) run(dir string, combined bool, args ...string) (string, error) {
	cmd := exec.Command(tc.Terraform, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"TF_CLI_CONFIG_FILE="+tc.CLIConfig,
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"CHECKPOINT_DISABLE=1",
		"TF_PLUGIN_CACHE_DIR=",
	)
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if combined {
		cmd.Stderr = &out
	}
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("terraform %s in %s: %w\n%s%s", strings.Join(args, " "), dir, err, out.String(), errOut.String())
	}
	return out.String(), err
}

// CopyTree copies what terraform/ reads (terraform/ itself and
// shared/topology/) from repo into dst, keeping their relative layout and
// leaving out local Terraform state and the committed provider lock files:
// those pin the real providers' checksums, which the stand-in cannot match,
// so the copy is initialised against the stand-in mirror without them
// (TestLockFiles checks the committed ones on their own).
func CopyTree(repo, dst string) error {
	for _, sub := range []string{"terraform", filepath.Join("shared", "topology")} {
		src := filepath.Join(repo, sub)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repo, p)
			target := filepath.Join(dst, rel)
			if d.IsDir() {
				if d.Name() == ".terraform" {
					return filepath.SkipDir
				}
				return os.MkdirAll(target, 0o755)
			}
			if strings.HasSuffix(d.Name(), ".tfstate") || d.Name() == ".terraform.lock.hcl" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, 0o644)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// PlaceholderArchive is the content of the source archive the checks plan
// with.
const PlaceholderArchive = "placeholder source archive\n"

// PlanVars are the values a pipeline passes on the command line; they are
// placeholders here, which the stand-in provider never sends anywhere.
func PlanVars(env string) []string {
	return []string{
		"-var", "project_id=check-" + env,
		"-var", "api_domain=api." + env + ".example.test",
		"-var", "source_version=0000000",
		"-var", `alert_emails=["oncall@example.test"]`,
	}
}

// Result is what checking one environment produced.
type Result struct {
	Validate string // terraform validate output
	Plan     string // terraform plan output
	PlanJSON *Plan  // terraform show -json of the plan
	Graph    *Graph // terraform graph: dependencies between blocks
}

// CheckEnvironment runs init (local backend, stand-in providers), validate and
// plan -refresh=false for terraform/envs/<env> of the tree at root (a copy made
// by CopyTree), and decodes the plan.
//
// extraVars (-var name=value pairs) come after PlanVars, so they override them.
func (tc *Toolchain) CheckEnvironment(root, env string, extraVars ...string) (*Result, error) {
	dir := filepath.Join(root, "terraform", "envs", env)
	// The GCS backend needs credentials; the check keeps state locally.
	override := "terraform {\n  backend \"local\" {}\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "check_override.tf"), []byte(override), 0o644); err != nil {
		return nil, err
	}
	if _, err := tc.Run(dir, "init", "-input=false", "-no-color", "-reconfigure"); err != nil {
		return nil, err
	}
	res := &Result{}
	var err error
	if res.Validate, err = tc.Run(dir, "validate", "-no-color"); err != nil {
		return res, err
	}
	// The source object is named by the archive's SHA-256, so the plan
	// reads the archive: a placeholder of known content.
	archive := filepath.Join(root, "source.zip")
	if err := os.WriteFile(archive, []byte(PlaceholderArchive), 0o644); err != nil {
		return nil, err
	}
	args := append([]string{"plan", "-refresh=false", "-input=false", "-no-color", "-lock=false", "-out=check.tfplan", "-var", "source_archive=" + archive}, PlanVars(env)...)
	args = append(args, extraVars...)
	if res.Plan, err = tc.Run(dir, args...); err != nil {
		return res, err
	}
	js, err := tc.runStdout(dir, "show", "-json", "check.tfplan")
	if err != nil {
		return res, err
	}
	res.PlanJSON = &Plan{}
	if err := json.Unmarshal([]byte(js), res.PlanJSON); err != nil {
		return res, fmt.Errorf("decoding the plan of %s: %w", env, err)
	}
	dot, err := tc.runStdout(dir, "graph")
	if err != nil {
		return res, err
	}
	res.Graph = ParseGraph(dot)
	if len(res.Graph.Edges) == 0 {
		return res, fmt.Errorf("terraform graph of %s has no resources", env)
	}
	return res, nil
}
