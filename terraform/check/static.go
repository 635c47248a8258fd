package check

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// ModuleDir is the shared module under terraform/.
const ModuleDir = "terraform/modules/engagement"

// StaticCheck reads terraform/ with hcl/v2 and checks what a plan cannot
// show: that the module reads the same topology.json as the Go code, that no
// resource name of topology.json is written out again by hand, and that the
// function names the module lists itself (access table, history profile
// users, load balancer fallback) are functions of topology.json.
func StaticCheck(repo string, c *Code) []error {
	var errs []error
	add := func(e ...error) { errs = append(errs, e...) }
	parser := hclparse.NewParser()
	bodies := map[string]*hclsyntax.Body{}
	err := filepath.WalkDir(filepath.Join(repo, "terraform"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".terraform" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".tf") {
			return nil
		}
		f, diags := parser.ParseHCLFile(p)
		if diags.HasErrors() {
			add(diags.Errs()...)
			return nil
		}
		bodies[p] = f.Body.(*hclsyntax.Body)
		return nil
	})
	if err != nil {
		return append(errs, err)
	}

	moduleDir := filepath.Join(repo, ModuleDir)
	locals := map[string]hclsyntax.Expression{}
	for path, body := range bodies {
		if filepath.Dir(path) != moduleDir {
			continue
		}
		for _, b := range body.Blocks {
			if b.Type == "locals" {
				for name, a := range b.Body.Attributes {
					locals[name] = a.Expr
				}
			}
		}
	}

	// The module reads topology.json through local.topology_dir.
	if dirExpr, ok := locals["topology_dir"]; !ok {
		add(fmt.Errorf("%s: no local topology_dir", ModuleDir))
	} else {
		ctx := &hcl.EvalContext{Variables: map[string]cty.Value{
			"path": cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal(moduleDir)}),
		}}
		v, diags := dirExpr.Value(ctx)
		if diags.HasErrors() || !v.Type().Equals(cty.String) {
			add(fmt.Errorf("%s: local.topology_dir is not a path of path.module: %v", ModuleDir, diags))
		} else if !sameFile(filepath.Join(v.AsString(), "topology.json"), filepath.Join(repo, "shared", "topology", "topology.json")) {
			add(fmt.Errorf("%s: local.topology_dir %s is not shared/topology", ModuleDir, v.AsString()))
		}
	}
	if e, ok := locals["topology"]; !ok || !strings.Contains(exprText(e), "jsondecode(file(") {
		add(fmt.Errorf("%s: local.topology must be jsondecode(file(...topology.json))", ModuleDir))
	}

	// Names of topology.json must not be repeated as literals (index keys such
	// as google_pubsub_topic.topic["history-events"] are lookups, which fail
	// on a name that does not exist, and are allowed).
	top := c.Topology
	names := map[string]string{}
	for _, t := range top.PubSub.Topics {
		names[t.Name] = "topic"
		names[t.DeadLetterTopic] = "dead-letter topic"
		names[top.PubSub.DeadLetterSubscription(t.DeadLetterTopic)] = "dead-letter subscription"
		for _, s := range t.Subscriptions {
			names[s.Name] = "subscription"
		}
	}
	for _, t := range top.Bigtable.Tables {
		names[t.Name] = "Bigtable table"
	}
	for _, j := range top.Scheduler {
		names[j.Name] = "scheduler job"
	}
	for path, body := range bodies {
		var keys []hcl.Range
		hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
			if ix, ok := n.(*hclsyntax.IndexExpr); ok {
				keys = append(keys, ix.Key.Range())
			}
			return nil
		})
		hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
			lit, ok := n.(*hclsyntax.LiteralValueExpr)
			if !ok || !lit.Val.Type().Equals(cty.String) || !lit.Val.IsKnown() || lit.Val.IsNull() {
				return nil
			}
			what, ok := names[lit.Val.AsString()]
			if !ok {
				return nil
			}
			for _, k := range keys {
				if k.Overlaps(lit.SrcRange) || (k.Start.Byte <= lit.SrcRange.Start.Byte && lit.SrcRange.End.Byte <= k.End.Byte) {
					return nil
				}
			}
			rel, _ := filepath.Rel(repo, path)
			add(fmt.Errorf("%s:%d: %s name %q written out by hand; take it from local.topology", rel, lit.SrcRange.Start.Line, what, lit.Val.AsString()))
			return nil
		})
	}

	// Function names the module lists itself.
	fnNames := map[string]bool{}
	for _, f := range top.Functions {
		fnNames[f.Name] = true
	}
	if e, ok := locals["function_access"]; !ok {
		add(fmt.Errorf("%s: no local function_access", ModuleDir))
	} else if obj, ok := e.(*hclsyntax.ObjectConsExpr); ok {
		listed := map[string]bool{}
		for _, item := range obj.Items {
			k, diags := item.KeyExpr.Value(nil)
			if diags.HasErrors() || !k.Type().Equals(cty.String) {
				add(fmt.Errorf("%s: local.function_access has a key that is not a literal", ModuleDir))
				continue
			}
			listed[k.AsString()] = true
		}
		add(diffSets("function", "local.function_access", listed, "topology.json", fnNames)...)
	}
	for _, name := range []string{"history_functions", "api_fallback"} {
		e, ok := locals[name]
		if !ok {
			add(fmt.Errorf("%s: no local %s", ModuleDir, name))
			continue
		}
		v, diags := e.Value(nil)
		if diags.HasErrors() {
			add(fmt.Errorf("%s: local.%s is not a literal: %v", ModuleDir, name, diags))
			continue
		}
		var listed []string
		if v.Type().Equals(cty.String) {
			listed = []string{v.AsString()}
		} else if v.CanIterateElements() {
			for it := v.ElementIterator(); it.Next(); {
				_, ev := it.Element()
				if ev.Type().Equals(cty.String) {
					listed = append(listed, ev.AsString())
				}
			}
		}
		sort.Strings(listed)
		for _, fn := range listed {
			if !fnNames[fn] {
				add(fmt.Errorf("%s: local.%s names %q, which is not a function of topology.json", ModuleDir, name, fn))
			}
		}
	}
	return errs
}

func exprText(e hclsyntax.Expression) string {
	r := e.Range()
	b, err := os.ReadFile(r.Filename)
	if err != nil || r.End.Byte > len(b) {
		return ""
	}
	return strings.Join(strings.Fields(string(b[r.Start.Byte:r.End.Byte])), "")
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
