package errs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// TestReasonsListsEveryConstant: every Reason constant of this package is in
// Reasons once, and nothing else is, so that the tests that hold Reasons
// equal to docs/openapi.yaml and to httpx's statuses see every constant.
func TestReasonsListsEveryConstant(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, f := range pkgs["errs"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Reason" {
					continue
				}
				for _, val := range v.Values {
					lit, ok := val.(*ast.BasicLit)
					if !ok {
						t.Fatalf("a Reason constant whose value is not a string literal: %#v", val)
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					consts = append(consts, s)
				}
			}
		}
	}
	var listed []string
	for _, r := range Reasons {
		listed = append(listed, string(r))
	}
	slices.Sort(consts)
	slices.Sort(listed)
	if len(consts) == 0 || !slices.Equal(consts, listed) {
		t.Errorf("Reason constants %v, Reasons %v: want the same values, each once", consts, listed)
	}
}
