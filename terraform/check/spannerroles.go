package check

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"
)

// Spanner table privileges of a database role, as GRANT names them.
const (
	privSelect = "SELECT"
	privInsert = "INSERT"
	privUpdate = "UPDATE"
	privDelete = "DELETE"
)

// writePrivileges are what a table the code writes needs: mutations insert,
// update or delete rows, and every write transaction reads them first.
var writePrivileges = []string{privSelect, privInsert, privUpdate, privDelete}

// Schema is what the DDL says about tables and database roles, statement by
// statement in order.
type Schema struct {
	Tables map[string]bool
	// Cascade maps a table to the tables interleaved in it ON DELETE
	// CASCADE: deleting a parent row deletes theirs, which needs DELETE on
	// them too.
	Cascade map[string][]string
	Roles   map[string]bool
	// Grants maps a role to its tables and their privileges.
	Grants map[string]map[string]map[string]bool
}

var (
	createTableRE = regexp.MustCompile(`(?is)^\s*CREATE\s+TABLE\s+(\w+)\s*\(`)
	interleaveRE  = regexp.MustCompile(`(?is)INTERLEAVE\s+IN\s+PARENT\s+(\w+)\s+ON\s+DELETE\s+CASCADE`)
	dropTableRE   = regexp.MustCompile(`(?is)^\s*DROP\s+TABLE\s+(\w+)\s*$`)
	createRoleRE  = regexp.MustCompile(`(?is)^\s*CREATE\s+ROLE\s+(\w+)\s*$`)
	dropRoleRE    = regexp.MustCompile(`(?is)^\s*DROP\s+ROLE\s+(\w+)\s*$`)
	grantRE       = regexp.MustCompile(`(?is)^\s*(GRANT|REVOKE)\s+(.+?)\s+ON\s+TABLE\s+(.+?)\s+(?:TO|FROM)\s+ROLE\s+(.+?)\s*$`)
	otherGrantRE  = regexp.MustCompile(`(?is)^\s*(GRANT|REVOKE)\b`)
)

// ParseSchema replays the DDL: tables created and dropped, roles created and
// dropped, and the table privileges granted and revoked. A GRANT or REVOKE of
// another shape (on columns, views, change streams, roles to roles) is an
// error: the privilege rule could not account for it.
func ParseSchema(ddl []string) (*Schema, error) {
	s := &Schema{Tables: map[string]bool{}, Cascade: map[string][]string{}, Roles: map[string]bool{}, Grants: map[string]map[string]map[string]bool{}}
	for _, stmt := range ddl {
		if m := createTableRE.FindStringSubmatch(stmt); m != nil {
			s.Tables[m[1]] = true
			if p := interleaveRE.FindStringSubmatch(stmt); p != nil {
				s.Cascade[p[1]] = append(s.Cascade[p[1]], m[1])
			}
			continue
		}
		if m := dropTableRE.FindStringSubmatch(stmt); m != nil {
			delete(s.Tables, m[1])
			continue
		}
		if m := createRoleRE.FindStringSubmatch(stmt); m != nil {
			s.Roles[m[1]] = true
			continue
		}
		if m := dropRoleRE.FindStringSubmatch(stmt); m != nil {
			delete(s.Roles, m[1])
			delete(s.Grants, m[1])
			continue
		}
		m := grantRE.FindStringSubmatch(stmt)
		if m == nil {
			if otherGrantRE.MatchString(stmt) {
				return nil, fmt.Errorf("DDL statement %q: only GRANT/REVOKE <privileges> ON TABLE <tables> TO/FROM ROLE <roles> is understood", stmt)
			}
			continue
		}
		grant := strings.EqualFold(m[1], "GRANT")
		privs, tables, roles := splitList(m[2]), splitList(m[3]), splitList(m[4])
		for _, p := range privs {
			switch p = strings.ToUpper(p); p {
			case privSelect, privInsert, privUpdate, privDelete:
			default:
				return nil, fmt.Errorf("DDL statement %q: privilege %q on a whole table is not one of SELECT, INSERT, UPDATE, DELETE", stmt, p)
			}
		}
		for _, r := range roles {
			if !s.Roles[r] {
				return nil, fmt.Errorf("DDL statement %q: role %s is not created before", stmt, r)
			}
			for _, t := range tables {
				if !s.Tables[t] {
					return nil, fmt.Errorf("DDL statement %q: table %s does not exist", stmt, t)
				}
				if s.Grants[r] == nil {
					s.Grants[r] = map[string]map[string]bool{}
				}
				if s.Grants[r][t] == nil {
					s.Grants[r][t] = map[string]bool{}
				}
				for _, p := range privs {
					if grant {
						s.Grants[r][t][strings.ToUpper(p)] = true
					} else {
						delete(s.Grants[r][t], strings.ToUpper(p))
					}
				}
				if len(s.Grants[r][t]) == 0 {
					delete(s.Grants[r], t)
				}
			}
		}
	}
	return s, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Table access as the code does it.
const (
	accessRead  = "read"
	accessWrite = "write"
)

// mutationFuncs are the spanner package's mutation constructors: their first
// argument is the table written.
var mutationFuncs = map[string]bool{}

func init() {
	for _, op := range []string{"Insert", "InsertOrUpdate", "Update", "Replace", "Delete"} {
		for _, suffix := range []string{"", "Map", "Struct"} {
			if op == "Delete" && suffix != "" {
				continue
			}
			mutationFuncs[op+suffix] = true
		}
	}
}

// readMethods are the row reads of the spanner package's transactions:
// their second argument is the table read.
var readMethods = map[string]bool{
	"Read": true, "ReadRow": true, "ReadUsingIndex": true, "ReadRowUsingIndex": true,
	"ReadWithOptions": true, "ReadRowWithOptions": true,
}

var (
	sqlWriteRE = regexp.MustCompile(`(?i)\b(?:INSERT\s+(?:OR\s+UPDATE\s+|OR\s+IGNORE\s+)?(?:INTO\s+)?|UPDATE\s+|DELETE\s+(?:FROM\s+)?)(\w+)`)
	sqlReadRE  = regexp.MustCompile(`(?i)\b(?:FROM|JOIN)\s+(\w+)`)
	// hintedTableRE is a table with a hint, spliced after FROM.
	hintedTableRE = regexp.MustCompile(`^(\w+)@\{`)
)

// SpannerTablesOf maps each function registered under functions/ to the
// Spanner tables its code can touch, each "write" or "read". What the code
// can reach is found on the call graph of the module's declarations, with
// types: a call or reference reaches the function or method it names, and a
// method of an interface reaches that method of every module type that
// implements the interface. The walk starts from every declaration of the
// function's package and every init and package-level variable of the
// module packages it links. In a declaration, a table (a string constant
// naming it) is written when it is the table of a mutation (spanner.Insert,
// InsertOrUpdate, Update, Replace, Delete and their Map and Struct forms) or
// of DML in a literal, or when it is handed to another function or stored
// (as the rate limiter's table is: it reads and writes what it is given); it
// is read when it is the table of a row read (Read, ReadRow, ...), named
// after FROM or JOIN in a query, or spliced into one. A table written is
// written with its ON DELETE CASCADE children.
func SpannerTablesOf(repo string, c *Code, schema *Schema) (map[string]map[string]string, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports | packages.NeedDeps,
		Dir:  repo,
	}
	pkgs, err := packages.Load(cfg, "./shared/...", "./functions/...")
	if err != nil {
		return nil, fmt.Errorf("load the module's packages: %w", err)
	}
	type decl struct {
		pkg  *packages.Package
		node ast.Node
	}
	var decls []*decl
	byFunc := map[*types.Func]*decl{}
	pkgRoots := map[string][]*decl{}
	pkgDecls := map[string][]*decl{}
	deps := map[string]map[string]bool{}
	var loadErr error
	module := map[string]*packages.Package{}
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if p.PkgPath != modulePath && !strings.HasPrefix(p.PkgPath, modulePath+"/") {
			return
		}
		module[p.PkgPath] = p
	})
	for path, p := range module {
		if len(p.Errors) > 0 && loadErr == nil {
			loadErr = fmt.Errorf("load %s: %v", path, p.Errors[0])
		}
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					dc := &decl{pkg: p, node: d}
					if fn, ok := p.TypesInfo.Defs[d.Name].(*types.Func); ok {
						byFunc[fn] = dc
					}
					if d.Recv == nil && d.Name.Name == "init" {
						pkgRoots[path] = append(pkgRoots[path], dc)
					}
					decls = append(decls, dc)
					pkgDecls[path] = append(pkgDecls[path], dc)
				case *ast.GenDecl:
					if d.Tok == token.VAR {
						dc := &decl{pkg: p, node: d}
						decls = append(decls, dc)
						pkgRoots[path] = append(pkgRoots[path], dc)
						pkgDecls[path] = append(pkgDecls[path], dc)
					}
				}
			}
		}
	}
	if loadErr != nil {
		return nil, loadErr
	}
	for path, p := range module {
		seen := map[string]bool{}
		var walk func(*packages.Package)
		walk = func(q *packages.Package) {
			if seen[q.PkgPath] {
				return
			}
			seen[q.PkgPath] = true
			for _, im := range q.Imports {
				walk(im)
			}
		}
		walk(p)
		deps[path] = seen
	}

	// implementations of an interface method: the method each of the
	// module's named types that implements the interface has by that name,
	// its own or one promoted from a type it embeds.
	var named []*types.Named
	for _, p := range module {
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			if t, ok := tn.Type().(*types.Named); ok && !types.IsInterface(t) {
				named = append(named, t)
			}
		}
	}
	implementations := func(m *types.Func) []*types.Func {
		recv := m.Type().(*types.Signature).Recv().Type()
		iface, ok := recv.Underlying().(*types.Interface)
		if !ok {
			return nil
		}
		var out []*types.Func
		for _, t := range named {
			var impl types.Type
			switch {
			case types.Implements(t, iface):
				impl = t
			case types.Implements(types.NewPointer(t), iface):
				impl = types.NewPointer(t)
			default:
				continue
			}
			if sel := types.NewMethodSet(impl).Lookup(m.Pkg(), m.Name()); sel != nil {
				if fn, ok := sel.Obj().(*types.Func); ok {
					out = append(out, fn.Origin())
				}
			}
		}
		return out
	}

	// A table key is a table's name, or "#i" for parameter i of the
	// declaration: what the declaration does with a table it is given.
	type forward struct {
		key     string
		callees []*decl
		param   int
	}
	access := map[*decl]map[string]string{}
	forwards := map[*decl][]forward{}
	calls := map[*decl][]*decl{}
	// callees are the module declarations a call's function may be.
	callees := func(info *types.Info, fun ast.Expr) ([]*decl, *types.Signature) {
		var id *ast.Ident
		switch f := fun.(type) {
		case *ast.Ident:
			id = f
		case *ast.SelectorExpr:
			id = f.Sel
		default:
			return nil, nil
		}
		fn, ok := info.Uses[id].(*types.Func)
		if !ok {
			return nil, nil
		}
		fn = fn.Origin()
		var out []*decl
		if d := byFunc[fn]; d != nil {
			out = append(out, d)
		}
		sig := fn.Type().(*types.Signature)
		if sig.Recv() != nil {
			for _, impl := range implementations(fn) {
				if d := byFunc[impl]; d != nil {
					out = append(out, d)
				}
			}
		}
		return out, sig
	}
	for _, dc := range decls {
		info := dc.pkg.TypesInfo
		params := map[types.Object]int{}
		if fd, ok := dc.node.(*ast.FuncDecl); ok {
			i := 0
			for _, f := range fd.Type.Params.List {
				if len(f.Names) == 0 {
					i++
				}
				for _, n := range f.Names {
					params[info.Defs[n]] = i
					i++
				}
			}
		}
		got := map[string]string{}
		note := func(table, a string) {
			if got[table] != accessWrite {
				got[table] = a
			}
		}
		// table resolves an expression to the table a constant names, or
		// to a parameter of the declaration ("#i").
		table := func(e ast.Expr) (string, bool) {
			var id *ast.Ident
			switch e := e.(type) {
			case *ast.Ident:
				id = e
				if i, ok := params[info.Uses[id]]; ok {
					if b, ok := info.Uses[id].Type().Underlying().(*types.Basic); ok && b.Kind() == types.String {
						return "#" + strconv.Itoa(i), true
					}
				}
			case *ast.SelectorExpr:
				id = e.Sel
			default:
				return "", false
			}
			k, ok := info.Uses[id].(*types.Const)
			if !ok || k.Val().Kind() != constant.String {
				return "", false
			}
			t := constant.StringVal(k.Val())
			return t, schema.Tables[t]
		}
		isSpanner := func(e ast.Expr, names map[string]bool) bool {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok || !names[sel.Sel.Name] {
				return false
			}
			fn, ok := info.Uses[sel.Sel].(*types.Func)
			return ok && fn.Pkg() != nil && fn.Pkg().Path() == "cloud.google.com/go/spanner"
		}
		// isReadMethod: a row read of a transaction, the spanner package's
		// or an interface's with its signature.
		isReadMethod := func(e ast.Expr) bool {
			sel, ok := e.(*ast.SelectorExpr)
			return ok && readMethods[sel.Sel.Name]
		}
		// sqlText notes the tables of a query or DML, and of a table
		// with a hint (Comments@{FORCE_INDEX=...}) spliced into a query.
		sqlText := func(s string) {
			for _, m := range sqlWriteRE.FindAllStringSubmatch(s, -1) {
				if schema.Tables[m[1]] {
					note(m[1], accessWrite)
				}
			}
			for _, m := range sqlReadRE.FindAllStringSubmatch(s, -1) {
				if schema.Tables[m[1]] {
					note(m[1], accessRead)
				}
			}
			if m := hintedTableRE.FindStringSubmatch(s); m != nil && schema.Tables[m[1]] {
				note(m[1], accessRead)
			}
		}
		seen := map[ast.Expr]bool{} // table expressions already classified
		ast.Inspect(dc.node, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				switch {
				case isSpanner(n.Fun, mutationFuncs) && len(n.Args) > 0:
					if t, ok := table(n.Args[0]); ok {
						note(t, accessWrite)
						seen[n.Args[0]] = true
					}
				case isReadMethod(n.Fun) && len(n.Args) > 1:
					if t, ok := table(n.Args[1]); ok {
						note(t, accessRead)
						seen[n.Args[1]] = true
					}
				default:
					if ds, sig := callees(info, n.Fun); len(ds) > 0 {
						for i, a := range n.Args {
							if t, ok := table(a); ok {
								j := i
								if sig.Variadic() && j >= sig.Params().Len()-1 {
									j = sig.Params().Len() - 1
								}
								forwards[dc] = append(forwards[dc], forward{t, ds, j})
								seen[a] = true
							}
						}
					}
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
						if fn, ok := info.Uses[sel.Sel].(*types.Func); ok && fn.Pkg() != nil && fn.Pkg().Path() == "fmt" {
							for _, a := range n.Args {
								if t, ok := table(a); ok {
									note(t, accessRead) // spliced into a query
									seen[a] = true
								}
							}
						}
					}
				}
			case *ast.BinaryExpr:
				for _, e := range []ast.Expr{n.X, n.Y} {
					if t, ok := table(e); ok && !seen[e] {
						note(t, accessRead) // spliced into a query
						seen[e] = true
					}
				}
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					s, _ := strconv.Unquote(n.Value)
					sqlText(s)
				}
			case *ast.SelectorExpr:
				if t, ok := table(n); ok {
					if !seen[n] {
						note(t, accessWrite) // handed on or stored: assume the worst
					}
					return false // its Sel is the same constant
				}
			case *ast.Ident:
				if t, ok := table(n); ok && !seen[n] {
					note(t, accessWrite) // handed on or stored: assume the worst
				} else if k, ok := info.Uses[n].(*types.Const); ok && k.Val().Kind() == constant.String {
					sqlText(constant.StringVal(k.Val())) // a query, or a table with a hint
				}
				ds, _ := callees(info, n)
				calls[dc] = append(calls[dc], ds...)
			}
			return true
		})
		access[dc] = got
	}

	// paramAccess is what d does with the table given as parameter i,
	// through the functions it hands it to.
	type paramRef struct {
		d *decl
		i int
	}
	memo := map[paramRef]string{}
	var paramAccess func(d *decl, i int) string
	paramAccess = func(d *decl, i int) string {
		ref := paramRef{d, i}
		if a, ok := memo[ref]; ok {
			return a
		}
		memo[ref] = "" // a cycle adds nothing
		key := "#" + strconv.Itoa(i)
		a := access[d][key]
		for _, f := range forwards[d] {
			if f.key != key {
				continue
			}
			for _, c := range f.callees {
				if c != nil && a != accessWrite {
					if got := paramAccess(c, f.param); got != "" {
						a = got
					}
				}
			}
		}
		memo[ref] = a
		return a
	}

	byFunction := map[string]map[string]string{}
	for name, r := range c.Registered {
		linked := deps[r.Package]
		var work []*decl
		for p := range linked {
			work = append(work, pkgRoots[p]...)
		}
		work = append(work, pkgDecls[r.Package]...)
		reached := map[*decl]bool{}
		got := map[string]string{}
		for len(work) > 0 {
			dc := work[len(work)-1]
			work = work[:len(work)-1]
			if dc == nil || reached[dc] || !linked[dc.pkg.PkgPath] {
				continue
			}
			reached[dc] = true
			for t, a := range access[dc] {
				if !strings.HasPrefix(t, "#") && got[t] != accessWrite {
					got[t] = a
				}
			}
			for _, f := range forwards[dc] {
				if strings.HasPrefix(f.key, "#") {
					continue
				}
				for _, c := range f.callees {
					if c == nil {
						continue
					}
					if a := paramAccess(c, f.param); a != "" && got[f.key] != accessWrite {
						got[f.key] = a
					}
				}
			}
			work = append(work, calls[dc]...)
		}
		// Deleting a parent row deletes its cascade children.
		for changed := true; changed; {
			changed = false
			for t, a := range got {
				if a != accessWrite {
					continue
				}
				for _, child := range schema.Cascade[t] {
					if got[child] != accessWrite {
						got[child] = accessWrite
						changed = true
					}
				}
			}
		}
		byFunction[name] = got
	}
	return byFunction, nil
}

// privilegesFor is what access needs: every write privilege for a table
// written, SELECT for one read.
func privilegesFor(access string) map[string]bool {
	if access == accessWrite {
		out := map[string]bool{}
		for _, p := range writePrivileges {
			out[p] = true
		}
		return out
	}
	return map[string]bool{privSelect: true}
}

// SpannerRoleRule holds each function identity's Spanner access against
// what its code touches. The identity holds roles/spanner.fineGrainedAccessUser
// on the database and roles/spanner.databaseRoleUser conditioned on its own
// database role, named by its SPANNER_DATABASE_ROLE, and no other Spanner
// role anywhere (schema changes are the deploy identity's alone). The role
// is created in the DDL and granted exactly the privileges of touches: every
// write privilege on a table written, SELECT on one only read, nothing else.
func SpannerRoleRule(p *Plan, c *Code, schema *Schema, touches map[string]map[string]string) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	users := p.Instances("google_spanner_database_iam_member", "fn")
	roleUsers := p.Instances("google_spanner_database_iam_member", "fn_role")
	envRole := map[string]map[string]bool{} // function -> SPANNER_DATABASE_ROLE of its deployments
	for _, rc := range p.Instances("google_cloudfunctions2_function", "fn") {
		fn := rc.Str("build_config", 0, "entry_point")
		if envRole[fn] == nil {
			envRole[fn] = map[string]bool{}
		}
		envRole[fn][rc.Str("service_config", 0, "environment_variables", "SPANNER_DATABASE_ROLE")] = true
	}
	used := map[string]bool{}
	for _, fn := range sortedKeys(c.Registered) {
		reg := c.Registered[fn]
		if !reg.Needs["Spanner"] {
			if rc, ok := users[fn]; ok {
				add("spanner role rule: function %s does not use Spanner but holds %s", fn, rc.Str("role"))
			}
			continue
		}
		if len(envRole[fn]) != 1 {
			add("spanner role rule: function %s's deployments set SPANNER_DATABASE_ROLE to %v, want one role", fn, sortedSet(envRole[fn]))
			continue
		}
		role := sortedSet(envRole[fn])[0]
		used[role] = true
		if rc, ok := users[fn]; !ok || rc.Str("role") != "roles/spanner.fineGrainedAccessUser" || rc.Get("condition", 0) != nil {
			add("spanner role rule: function %s does not hold roles/spanner.fineGrainedAccessUser on the database, unconditioned (it holds %q)", fn, rc.Str("role"))
		}
		want := `resource.type == "spanner.googleapis.com/DatabaseRole" && resource.name.endsWith("/databaseRoles/` + role + `")`
		if rc, ok := roleUsers[fn]; !ok || rc.Str("role") != "roles/spanner.databaseRoleUser" {
			add("spanner role rule: function %s may not assume its database role %s (roles/spanner.databaseRoleUser)", fn, role)
		} else if got := rc.Str("condition", 0, "expression"); got != want {
			add("spanner role rule: function %s holds roles/spanner.databaseRoleUser on %q, want only its own role (%s)", fn, got, want)
		}
		if !schema.Roles[role] {
			add("spanner role rule: function %s connects as database role %s, which the DDL does not create", fn, role)
			continue
		}
		granted := schema.Grants[role]
		need := touches[fn]
		for _, t := range sortedKeys(granted) {
			wantPrivs := map[string]bool{}
			if a, ok := need[t]; ok {
				wantPrivs = privilegesFor(a)
			}
			for _, priv := range sortedSet(granted[t]) {
				if !wantPrivs[priv] {
					add("spanner role rule: function %s's database role %s is granted %s on table %s, which its code (%s and what it links) does not need", fn, role, priv, t, reg.Package)
				}
			}
		}
		for _, t := range sortedKeys(need) {
			for _, priv := range sortedSet(privilegesFor(need[t])) {
				if !granted[t][priv] {
					add("spanner role rule: function %s %ss table %s but its database role %s is not granted %s on it", fn, need[t], t, role, priv)
				}
			}
		}
	}
	for _, r := range sortedSet(schema.Roles) {
		if !used[r] {
			add("spanner role rule: the DDL creates database role %s, which no function connects as", r)
		}
	}
	// Nobody else in this module holds a Spanner role: the functions hold
	// the two above, the deploy identity (terraform/bootstrap) the rest.
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || !strings.HasSuffix(rc.Type, "_iam_member") || !strings.HasPrefix(rc.Str("role"), "roles/spanner.") {
			continue
		}
		if rc.Type == "google_spanner_database_iam_member" &&
			(rc.Name == "fn" && rc.Str("role") == "roles/spanner.fineGrainedAccessUser" ||
				rc.Name == "fn_role" && rc.Str("role") == "roles/spanner.databaseRoleUser") {
			continue
		}
		add("spanner role rule: %s grants %s; function identities act through their database roles only", rc.Address, rc.Str("role"))
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
