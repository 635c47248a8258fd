package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov5"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func mustSchema(t *testing.T, address string) *providerSchema {
	t.Helper()
	ps, err := loadProviderSchema(address)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Every resource and data source type in terraform/ is in schema.json, so
// the stand-in never rejects a type the real provider has.
func TestSchemaCoversTerraform(t *testing.T) {
	google := mustSchema(t, "registry.terraform.io/hashicorp/google")
	random := mustSchema(t, "registry.terraform.io/hashicorp/random")
	beta := mustSchema(t, "registry.terraform.io/hashicorp/google-beta")
	timeP := mustSchema(t, "registry.terraform.io/hashicorp/time")
	decl := regexp.MustCompile(`(?m)^\s*(resource|data|ephemeral)\s+"([a-z0-9_]+)"`)
	files, err := filepath.Glob("../../terraform/modules/*/*.tf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Terraform files found (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			ps := google
			if strings.HasPrefix(m[2], "random_") {
				ps = random
			} else if strings.HasPrefix(m[2], "time_") {
				ps = timeP
			} else if _, ok := google.resources[m[2]]; !ok && m[1] == "resource" {
				ps = beta // a google-beta-only resource
			}
			schemas := ps.resources
			switch m[1] {
			case "data":
				schemas = ps.dataSources
			case "ephemeral":
				schemas = ps.ephemerals
			}
			if _, ok := schemas[m[2]]; !ok {
				t.Errorf("%s: %s %s is not in schema.json; regenerate it with tools/tfschema/generate.sh", f, m[1], m[2])
			}
		}
	}
	if google.version != "6.50.0" || random.version != "3.7.2" || timeP.version != "0.13.1" {
		t.Errorf("schema versions google %s, random %s, time %s", google.version, random.version, timeP.version)
	}
}

func dynamic(t *testing.T, typ tftypes.Type, v tftypes.Value) *tfprotov5.DynamicValue {
	t.Helper()
	dv, err := tfprotov5.NewDynamicValue(typ, v)
	if err != nil {
		t.Fatal(err)
	}
	return &dv
}

// objectWith is a value of typ with the given attributes set and every other
// attribute and block null.
func objectWith(typ tftypes.Type, set map[string]tftypes.Value) tftypes.Value {
	obj := typ.(tftypes.Object)
	vals := map[string]tftypes.Value{}
	for name, at := range obj.AttributeTypes {
		if v, ok := set[name]; ok {
			vals[name] = v
		} else {
			vals[name] = tftypes.NewValue(at, nil)
		}
	}
	return tftypes.NewValue(typ, vals)
}

func TestPlanLeavesComputedUnknown(t *testing.T) {
	s := &server{schema: mustSchema(t, "registry.terraform.io/hashicorp/google")}
	typ := s.schema.resources["google_pubsub_topic"].ValueType()
	proposed := objectWith(typ, map[string]tftypes.Value{"name": tftypes.NewValue(tftypes.String, "t")})
	resp, err := s.PlanResourceChange(context.Background(), &tfprotov5.PlanResourceChangeRequest{
		TypeName:         "google_pubsub_topic",
		PriorState:       dynamic(t, typ, tftypes.NewValue(typ, nil)),
		ProposedNewState: dynamic(t, typ, proposed),
		Config:           dynamic(t, typ, proposed),
	})
	if err != nil || len(resp.Diagnostics) > 0 {
		t.Fatalf("plan: %v %v", err, resp.Diagnostics)
	}
	planned, err := resp.PlannedState.Unmarshal(typ)
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]tftypes.Value
	if err := planned.As(&attrs); err != nil {
		t.Fatal(err)
	}
	if attrs["id"].IsKnown() {
		t.Error("id (computed) is known in the plan")
	}
	if attrs["effective_labels"].IsKnown() {
		t.Error("effective_labels (computed) is known in the plan")
	}
	var name string
	if err := attrs["name"].As(&name); err != nil || name != "t" {
		t.Errorf("name planned as %q (%v), want the configured t", name, err)
	}
	if !attrs["kms_key_name"].IsNull() {
		t.Error("kms_key_name (optional, not computed, unset) is not null")
	}
}

func TestApplyAndImportRefuse(t *testing.T) {
	s := &server{schema: mustSchema(t, "registry.terraform.io/hashicorp/google")}
	apply, _ := s.ApplyResourceChange(context.Background(), &tfprotov5.ApplyResourceChangeRequest{TypeName: "google_pubsub_topic"})
	if len(apply.Diagnostics) == 0 || apply.Diagnostics[0].Severity != tfprotov5.DiagnosticSeverityError {
		t.Error("apply did not fail")
	}
	imp, _ := s.ImportResourceState(context.Background(), &tfprotov5.ImportResourceStateRequest{TypeName: "google_pubsub_topic", ID: "x"})
	if len(imp.Diagnostics) == 0 {
		t.Error("import did not fail")
	}
	plan, _ := s.PlanResourceChange(context.Background(), &tfprotov5.PlanResourceChangeRequest{TypeName: "google_no_such_thing"})
	if len(plan.Diagnostics) == 0 {
		t.Error("planning an unknown type did not fail")
	}
}

// An ephemeral resource (like a data source) answers wholly known values:
// Terraform requires it.
func TestOpenEphemeralIsWhollyKnown(t *testing.T) {
	s := &server{schema: mustSchema(t, "registry.terraform.io/hashicorp/random")}
	sch, ok := s.schema.ephemerals["random_password"]
	if !ok {
		t.Fatal("schema.json has no ephemeral random_password")
	}
	typ := sch.ValueType()
	cfg := objectWith(typ, map[string]tftypes.Value{"length": tftypes.NewValue(tftypes.Number, 64)})
	resp, err := s.OpenEphemeralResource(context.Background(), &tfprotov5.OpenEphemeralResourceRequest{TypeName: "random_password", Config: dynamic(t, typ, cfg)})
	if err != nil || len(resp.Diagnostics) > 0 {
		t.Fatalf("open: %v %v", err, resp.Diagnostics)
	}
	result, err := resp.Result.Unmarshal(typ)
	if err != nil {
		t.Fatal(err)
	}
	if !result.IsFullyKnown() {
		t.Error("ephemeral result has unknown values")
	}
	var attrs map[string]tftypes.Value
	_ = result.As(&attrs)
	if attrs["result"].IsNull() {
		t.Error("computed result is null")
	}
	if _, ok := attrs["keepers"]; ok {
		t.Error("the ephemeral random_password has keepers, which only the resource has")
	}
}

// A write-only argument reaches the provider but is null in the planned
// state, as Terraform requires of a provider.
func TestPlanNullsWriteOnly(t *testing.T) {
	ps := mustSchema(t, "registry.terraform.io/hashicorp/google")
	const typeName = "google_secret_manager_secret_version"
	sch := ps.resources[typeName]
	var wo *tfprotov5.SchemaAttribute
	for _, a := range sch.Block.Attributes {
		if a.Name == "secret_data_wo" {
			wo = a
		}
	}
	if wo == nil || !wo.WriteOnly {
		t.Fatalf("secret_data_wo is not write-only in schema.json: %+v", wo)
	}
	typ := sch.ValueType()
	cfg := objectWith(typ, map[string]tftypes.Value{
		"secret":         tftypes.NewValue(tftypes.String, "projects/p/secrets/s"),
		"secret_data_wo": tftypes.NewValue(tftypes.String, "do not keep"),
	})
	s := &server{schema: ps}
	resp, err := s.PlanResourceChange(context.Background(), &tfprotov5.PlanResourceChangeRequest{
		TypeName:         typeName,
		ProposedNewState: dynamic(t, typ, cfg),
		PriorState:       dynamic(t, typ, tftypes.NewValue(typ, nil)),
		Config:           dynamic(t, typ, cfg),
	})
	if err != nil || len(resp.Diagnostics) > 0 {
		t.Fatalf("plan: %v %v", err, resp.Diagnostics)
	}
	planned, err := resp.PlannedState.Unmarshal(typ)
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]tftypes.Value
	if err := planned.As(&attrs); err != nil {
		t.Fatal(err)
	}
	if !attrs["secret_data_wo"].IsNull() {
		t.Errorf("secret_data_wo is %v in the planned state, want null", attrs["secret_data_wo"])
	}
	if attrs["secret"].Equal(tftypes.NewValue(tftypes.String, nil)) {
		t.Error("secret was dropped from the planned state")
	}
}
