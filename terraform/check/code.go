package check

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/videngage/engagement/shared/topology"
)

const (
	frameworkImport = "github.com/GoogleCloudPlatform/functions-framework-go/functions"
	hostImport      = "github.com/videngage/engagement/functions/host"
	modulePath      = "github.com/videngage/engagement"
)

// Registration is one function registered with functions-framework-go.
type Registration struct {
	Name    string
	Kind    string          // "HTTP", "Push" (an event function) or "CloudEvent"
	Package string          // import path of the registering package
	Needs   map[string]bool // host.Need* names (Spanner, Bigtable, ...); nil if registered directly
	Pos     string
	// Topics the package publishes to: the defaults of the shared/config
	// PubSub fields it reads (cfg.PubSub.CounterTopic -> counter-events).
	Topics map[string]bool
}

// Code is what the Go code says about the deployment.
type Code struct {
	Topology *topology.Topology
	DDL      []string
	EnvVars  map[string]string // env var name -> default ("" if none), from shared/config
	// TopicFields maps the fields of config.PubSub naming a topic to their env var.
	TopicFields map[string]string
	Registered  map[string]Registration
	RootImport  map[string]bool // packages imported by the module root package
}

// LoadCode reads the topology (as package shared/topology embeds it), the
// environment variables of shared/config/config.go and the registrations
// under functions/ of the repository at repo.
func LoadCode(repo string) (*Code, error) {
	top, err := topology.Load()
	if err != nil {
		return nil, err
	}
	ddl, err := topology.DDL()
	if err != nil {
		return nil, err
	}
	c := &Code{Topology: top, DDL: ddl, Registered: map[string]Registration{}, RootImport: map[string]bool{}}
	if c.EnvVars, c.TopicFields, err = configEnvVars(filepath.Join(repo, "shared", "config", "config.go")); err != nil {
		return nil, err
	}
	if err := c.scanRegistrations(repo); err != nil {
		return nil, err
	}
	if err := c.scanRoot(repo); err != nil {
		return nil, err
	}
	return c, nil
}

// configEnvVars returns every `env:"NAME, default=..."` tag of the file, and
// the fields of struct PubSub whose variable ends in _TOPIC.
func configEnvVars(path string) (map[string]string, map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, nil, err
	}
	vars := map[string]string{}
	topicFields := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "PubSub" {
			if st, ok := ts.Type.(*ast.StructType); ok {
				for _, fld := range st.Fields.List {
					if fld.Tag == nil || len(fld.Names) != 1 {
						continue
					}
					tag, _ := strconv.Unquote(fld.Tag.Value)
					env, _ := reflect.StructTag(tag).Lookup("env")
					name := strings.TrimSpace(strings.Split(env, ",")[0])
					if strings.HasSuffix(name, "_TOPIC") {
						topicFields[fld.Names[0].Name] = name
					}
				}
			}
		}
		field, ok := n.(*ast.Field)
		if !ok || field.Tag == nil {
			return true
		}
		tag, err := strconv.Unquote(field.Tag.Value)
		if err != nil {
			return true
		}
		env, ok := reflect.StructTag(tag).Lookup("env")
		if !ok {
			return true
		}
		parts := strings.Split(env, ",")
		name := strings.TrimSpace(parts[0])
		def := ""
		for _, p := range parts[1:] {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "default="); ok {
				def = v
			}
		}
		vars[name] = def
		return true
	})
	if len(vars) == 0 {
		return nil, nil, fmt.Errorf("%s declares no env tags", path)
	}
	return vars, topicFields, nil
}

func goFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// scanRegistrations finds functions.HTTP/CloudEvent and
// host.RegisterHTTP/RegisterPush calls under functions/, the host itself
// aside.
func (c *Code) scanRegistrations(repo string) error {
	dir := filepath.Join(repo, "functions")
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	files, err := goFiles(dir)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	pkgTopics := map[string]map[string]bool{}
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel0, _ := filepath.Rel(repo, filepath.Dir(path))
		pkg0 := modulePath + "/" + filepath.ToSlash(rel0)
		if pkg0 == hostImport {
			// The host registers with the framework on the functions'
			// behalf; its own calls name no function.
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			inner, ok := sel.X.(*ast.SelectorExpr)
			if !ok || inner.Sel.Name != "PubSub" {
				return true
			}
			if env, ok := c.TopicFields[sel.Sel.Name]; ok {
				if pkgTopics[pkg0] == nil {
					pkgTopics[pkg0] = map[string]bool{}
				}
				pkgTopics[pkg0][c.EnvVars[env]] = true
			}
			return true
		})
		imports := map[string]string{} // local name -> path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = p
		}
		rel, _ := filepath.Rel(repo, filepath.Dir(path))
		pkg := modulePath + "/" + filepath.ToSlash(rel)
		var scanErr error
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			var kind string
			switch imports[x.Name] + "." + sel.Sel.Name {
			case frameworkImport + ".HTTP", hostImport + ".RegisterHTTP":
				kind = "HTTP"
			case hostImport + ".RegisterPush":
				kind = "Push"
			case frameworkImport + ".CloudEvent":
				kind = "CloudEvent"
			default:
				return true
			}
			pos := fset.Position(call.Pos()).String()
			if len(call.Args) == 0 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				scanErr = fmt.Errorf("%s: function name is not a string literal", pos)
				return false
			}
			name, _ := strconv.Unquote(lit.Value)
			r := Registration{Name: name, Kind: kind, Package: pkg, Pos: pos}
			if imports[x.Name] == hostImport {
				if len(call.Args) < 2 {
					scanErr = fmt.Errorf("%s: registration without needs", pos)
					return false
				}
				needs, err := needsOf(call.Args[1], x.Name)
				if err != nil {
					scanErr = fmt.Errorf("%s: %w", pos, err)
					return false
				}
				r.Needs = needs
			}
			if prev, dup := c.Registered[name]; dup {
				scanErr = fmt.Errorf("%s: %s registered again (first at %s)", pos, name, prev.Pos)
				return false
			}
			c.Registered[name] = r
			return true
		})
		if scanErr != nil {
			return scanErr
		}
	}
	for name, r := range c.Registered {
		r.Topics = pkgTopics[r.Package]
		if r.Topics == nil {
			r.Topics = map[string]bool{}
		}
		c.Registered[name] = r
	}
	return nil
}

// needsOf reads an expression like host.NeedSpanner|host.NeedPubSub.
func needsOf(e ast.Expr, hostName string) (map[string]bool, error) {
	needs := map[string]bool{}
	var walk func(ast.Expr) error
	walk = func(e ast.Expr) error {
		switch e := e.(type) {
		case *ast.ParenExpr:
			return walk(e.X)
		case *ast.BinaryExpr:
			if e.Op != token.OR {
				return fmt.Errorf("needs combine with | only")
			}
			if err := walk(e.X); err != nil {
				return err
			}
			return walk(e.Y)
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == hostName && strings.HasPrefix(e.Sel.Name, "Need") {
				needs[strings.TrimPrefix(e.Sel.Name, "Need")] = true
				return nil
			}
		case *ast.BasicLit:
			if e.Value == "0" {
				return nil
			}
		}
		return fmt.Errorf("needs must be host.Need* constants joined with |")
	}
	return needs, walk(e)
}

// scanRoot collects the imports of the module root package, the package that
// Cloud Functions builds.
func (c *Code) scanRoot(repo string) error {
	entries, err := os.ReadDir(repo)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(repo, n), nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			c.RootImport[p] = true
		}
	}
	return nil
}
