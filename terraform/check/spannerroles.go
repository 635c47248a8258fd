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

// Privileges is a set of Spanner table privileges of a database role, as
// GRANT names them.
type Privileges uint8

const (
	PrivSelect Privileges = 1 << iota
	PrivInsert
	PrivUpdate
	PrivDelete
)

// privAll is every table privilege: what a table stored needs, since what
// is done with it is not seen.
const privAll = PrivSelect | PrivInsert | PrivUpdate | PrivDelete

// privWrite is the privileges that change rows.
const privWrite = PrivInsert | PrivUpdate | PrivDelete

var privNames = []struct {
	p    Privileges
	name string
}{{PrivSelect, "SELECT"}, {PrivInsert, "INSERT"}, {PrivUpdate, "UPDATE"}, {PrivDelete, "DELETE"}}

// privilegeNamed is the privilege GRANT names name (any case), or 0.
func privilegeNamed(name string) Privileges {
	for _, n := range privNames {
		if strings.EqualFold(n.name, name) {
			return n.p
		}
	}
	return 0
}

// Names lists the privileges in the order GRANT statements list them.
func (p Privileges) Names() []string {
	var out []string
	for _, n := range privNames {
		if p&n.p != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

func (p Privileges) String() string {
	if p == 0 {
		return "none"
	}
	return strings.Join(p.Names(), ",")
}

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
	Grants map[string]map[string]Privileges
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
	s := &Schema{Tables: map[string]bool{}, Cascade: map[string][]string{}, Roles: map[string]bool{}, Grants: map[string]map[string]Privileges{}}
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
		var set Privileges
		for _, p := range privs {
			q := privilegeNamed(p)
			if q == 0 {
				return nil, fmt.Errorf("DDL statement %q: privilege %q on a whole table is not one of SELECT, INSERT, UPDATE, DELETE", stmt, p)
			}
			set |= q
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
					s.Grants[r] = map[string]Privileges{}
				}
				if grant {
					s.Grants[r][t] |= set
				} else {
					s.Grants[r][t] &^= set
				}
				if s.Grants[r][t] == 0 {
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

// mutationFuncs are the spanner package's mutation constructors, each with
// the privileges it needs on the table of its first argument. A replace
// deletes the row it replaces.
var mutationFuncs = map[string]Privileges{}

func init() {
	for op, p := range map[string]Privileges{
		"Insert":         PrivInsert,
		"InsertOrUpdate": PrivInsert | PrivUpdate,
		"Update":         PrivUpdate,
		"Replace":        PrivInsert | PrivUpdate | PrivDelete,
	} {
		for _, suffix := range []string{"", "Map", "Struct"} {
			mutationFuncs[op+suffix] = p
		}
	}
	mutationFuncs["Delete"] = PrivDelete
}

// readMethods are the row reads of the spanner package's transactions:
// their second argument is the table read.
var readMethods = map[string]bool{
	"Read": true, "ReadRow": true, "ReadUsingIndex": true, "ReadRowUsingIndex": true,
	"ReadWithOptions": true, "ReadRowWithOptions": true,
}

var (
	// sqlWriteRE is DML: its verb (INSERT, INSERT OR UPDATE, INSERT OR
	// IGNORE, UPDATE, DELETE) and its table.
	sqlWriteRE = regexp.MustCompile(`(?i)\b(INSERT\s+(?:OR\s+UPDATE\s+|OR\s+IGNORE\s+)?(?:INTO\s+)?|UPDATE\s+|DELETE\s+(?:FROM\s+)?)(\w+)`)
	sqlReadRE  = regexp.MustCompile(`(?i)\b(?:FROM|JOIN)\s+(\w+)`)
	// hintedTableRE is a table with a hint, spliced after FROM.
	hintedTableRE = regexp.MustCompile(`^(\w+)@\{`)
)

// dmlPrivileges is what a DML statement's verb needs on its table: an
// UPDATE or DELETE also reads the rows its WHERE selects.
func dmlPrivileges(verb string) Privileges {
	f := strings.Fields(strings.ToUpper(verb))
	switch {
	case f[0] == "UPDATE":
		return PrivUpdate | PrivSelect
	case f[0] == "DELETE":
		return PrivDelete | PrivSelect
	case len(f) > 2 && f[1] == "OR" && f[2] == "UPDATE":
		return PrivInsert | PrivUpdate
	default:
		return PrivInsert
	}
}

// SpannerTablesOf maps each function registered under functions/ to the
// Spanner tables its code can touch, each with the privileges the code
// uses on it. What the code
// can reach is found on the call graph of the module's declarations, with
// types: a call or reference reaches the function or method it names, and a
// method of an interface reaches that method of every module type that
// implements the interface. The walk starts from every declaration of the
// function's package and every init and package-level variable of the
// module packages it links. In a declaration, a table (a string constant
// naming it, or a local variable given only that table's name, bare or with
// a hint) is inserted into, updated or deleted from as the mutation whose
// table it is says (spanner.Insert: INSERT; InsertOrUpdate: INSERT and
// UPDATE; Update: UPDATE; Replace: all three; Delete: DELETE; and their Map
// and Struct forms), or as the verb of DML in a literal; it is read (SELECT)
// when it is the table of a row read (Read, ReadRow, ...), named after FROM
// or JOIN in a query, or spliced into one; handed to another function, it
// needs what that function does with it; stored anywhere else (a field, a
// package variable, a result), it is assumed to need every privilege. A
// table deleted from is deleted from with its ON DELETE CASCADE children.
func SpannerTablesOf(repo string, c *Code, schema *Schema) (map[string]map[string]Privileges, error) {
	return spannerTablesOf(repo, c, schema, nil)
}

// spannerTablesOf is SpannerTablesOf on the code with the files of overlay
// (absolute path -> content) in place of those on disk.
func spannerTablesOf(repo string, c *Code, schema *Schema, overlay map[string][]byte) (map[string]map[string]Privileges, error) {
	cfg := &packages.Config{
		Mode:    packages.NeedName | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedImports | packages.NeedDeps,
		Dir:     repo,
		Overlay: overlay,
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
	access := map[*decl]map[string]Privileges{}
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
		got := map[string]Privileges{}
		note := func(table string, p Privileges) { got[table] |= p }
		// constTable is the table a string constant names.
		constTable := func(e ast.Expr) (string, bool) {
			var id *ast.Ident
			switch e := e.(type) {
			case *ast.Ident:
				id = e
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
		aliases, aliasing := localTables(dc.node, info, constTable)
		// table resolves an expression to the table a constant names or a
		// local variable holds, or to a parameter of the declaration ("#i").
		table := func(e ast.Expr) (string, bool) {
			if id, ok := e.(*ast.Ident); ok {
				if t, ok := aliases[info.Uses[id]]; ok {
					return t, true
				}
				if i, ok := params[info.Uses[id]]; ok {
					if b, ok := info.Uses[id].Type().Underlying().(*types.Basic); ok && b.Kind() == types.String {
						return "#" + strconv.Itoa(i), true
					}
				}
			}
			return constTable(e)
		}
		// isMutation is what the spanner package's mutation constructor
		// called needs on its table (0: not one).
		isMutation := func(e ast.Expr) Privileges {
			sel, ok := e.(*ast.SelectorExpr)
			if !ok || mutationFuncs[sel.Sel.Name] == 0 {
				return 0
			}
			fn, ok := info.Uses[sel.Sel].(*types.Func)
			if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "cloud.google.com/go/spanner" {
				return 0
			}
			return mutationFuncs[sel.Sel.Name]
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
				if schema.Tables[m[2]] {
					note(m[2], dmlPrivileges(m[1]))
				}
			}
			for _, m := range sqlReadRE.FindAllStringSubmatch(s, -1) {
				if schema.Tables[m[1]] {
					note(m[1], PrivSelect)
				}
			}
			if m := hintedTableRE.FindStringSubmatch(s); m != nil && schema.Tables[m[1]] {
				note(m[1], PrivSelect)
			}
		}
		// seen: table expressions already classified; a local variable's
		// assignments of a table are no access of their own.
		seen := aliasing
		ast.Inspect(dc.node, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				switch {
				case isMutation(n.Fun) != 0 && len(n.Args) > 0:
					if t, ok := table(n.Args[0]); ok {
						note(t, isMutation(n.Fun))
						seen[n.Args[0]] = true
					}
				case isReadMethod(n.Fun) && len(n.Args) > 1:
					if t, ok := table(n.Args[1]); ok {
						note(t, PrivSelect)
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
									note(t, PrivSelect) // spliced into a query
									seen[a] = true
								}
							}
						}
					}
				}
			case *ast.BinaryExpr:
				for _, e := range []ast.Expr{n.X, n.Y} {
					if t, ok := table(e); ok && !seen[e] {
						note(t, PrivSelect) // spliced into a query
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
						note(t, privAll) // stored: assume the worst
					}
					return false // its Sel is the same constant
				}
			case *ast.Ident:
				if t, ok := table(n); ok && !seen[n] {
					note(t, privAll) // stored: assume the worst
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
	memo := map[paramRef]Privileges{}
	var paramAccess func(d *decl, i int) Privileges
	paramAccess = func(d *decl, i int) Privileges {
		ref := paramRef{d, i}
		if a, ok := memo[ref]; ok {
			return a
		}
		memo[ref] = 0 // a cycle adds nothing
		key := "#" + strconv.Itoa(i)
		a := access[d][key]
		for _, f := range forwards[d] {
			if f.key != key {
				continue
			}
			for _, c := range f.callees {
				if c != nil {
					a |= paramAccess(c, f.param)
				}
			}
		}
		memo[ref] = a
		return a
	}

	byFunction := map[string]map[string]Privileges{}
	for name, r := range c.Registered {
		linked := deps[r.Package]
		var work []*decl
		for p := range linked {
			work = append(work, pkgRoots[p]...)
		}
		work = append(work, pkgDecls[r.Package]...)
		reached := map[*decl]bool{}
		got := map[string]Privileges{}
		for len(work) > 0 {
			dc := work[len(work)-1]
			work = work[:len(work)-1]
			if dc == nil || reached[dc] || !linked[dc.pkg.PkgPath] {
				continue
			}
			reached[dc] = true
			for t, a := range access[dc] {
				if !strings.HasPrefix(t, "#") {
					got[t] |= a
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
					got[f.key] |= paramAccess(c, f.param)
				}
			}
			work = append(work, calls[dc]...)
		}
		// Deleting a parent row deletes its cascade children.
		for changed := true; changed; {
			changed = false
			for t, a := range got {
				if a&PrivDelete == 0 {
					continue
				}
				for _, child := range schema.Cascade[t] {
					if got[child]&PrivDelete == 0 {
						got[child] |= PrivDelete
						changed = true
					}
				}
			}
		}
		for t, a := range got {
			if a == 0 {
				delete(got, t)
			}
		}
		byFunction[name] = got
	}
	return byFunction, nil
}

// localTables finds the local variables of a declaration that hold a
// table's name, bare or with a hint spliced after it (T + "@{...}"): every
// value assigned to one that starts with a table names the same table. It
// returns each with its table, and the expressions of those assignments (the
// variable assigned, a bare constant assigned), which are no access of their
// own: what the code does with the variable is.
func localTables(node ast.Node, info *types.Info, constTable func(ast.Expr) (string, bool)) (map[types.Object]string, map[ast.Expr]bool) {
	var held func(e ast.Expr) (string, bool)
	held = func(e ast.Expr) (string, bool) {
		if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
			return held(b.X)
		}
		return constTable(e)
	}
	type assigned struct {
		tables map[string]bool
		exprs  []ast.Expr
	}
	vars := map[types.Object]*assigned{}
	assign := func(lhs, rhs ast.Expr) {
		id, ok := lhs.(*ast.Ident)
		if !ok {
			return
		}
		obj := info.ObjectOf(id)
		v, ok := obj.(*types.Var)
		if !ok || v.IsField() || v.Parent() == nil || v.Pkg() == nil || v.Parent() == v.Pkg().Scope() {
			return
		}
		t, ok := held(rhs)
		if !ok {
			return
		}
		a := vars[obj]
		if a == nil {
			a = &assigned{tables: map[string]bool{}}
			vars[obj] = a
		}
		a.tables[t] = true
		a.exprs = append(a.exprs, lhs)
		if _, bare := constTable(rhs); bare {
			a.exprs = append(a.exprs, rhs)
		}
	}
	ast.Inspect(node, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if (n.Tok == token.ASSIGN || n.Tok == token.DEFINE) && len(n.Lhs) == len(n.Rhs) {
				for i := range n.Lhs {
					assign(n.Lhs[i], n.Rhs[i])
				}
			}
		case *ast.ValueSpec:
			if len(n.Names) == len(n.Values) {
				for i := range n.Names {
					assign(n.Names[i], n.Values[i])
				}
			}
		}
		return true
	})
	tables, exprs := map[types.Object]string{}, map[ast.Expr]bool{}
	for obj, a := range vars {
		if len(a.tables) != 1 {
			continue // two tables in one variable: each assignment stores one
		}
		for t := range a.tables {
			tables[obj] = t
		}
		for _, e := range a.exprs {
			exprs[e] = true
		}
	}
	return tables, exprs
}

// appendOnlyTables are the tables whose rows the service only ever inserts
// and reads: the moderation audit trail (docs/moderation.md). No role may
// update or delete their rows, and each role holds on them exactly the
// privileges its code uses, so that a role that only reads the trail
// cannot add to it either.
var appendOnlyTables = map[string]bool{"ModerationLog": true}

// wantPrivileges is what a role must hold on table for code that uses the
// privileges p on it (0: does not touch it). On an append-only table, p
// itself. On any other, SELECT where the code only reads it and all four
// where it writes it: mutations insert, update or delete rows, and every
// write transaction reads them first.
func wantPrivileges(table string, p Privileges) Privileges {
	switch {
	case appendOnlyTables[table]:
		return p
	case p&privWrite != 0:
		return privAll
	default:
		return p
	}
}

// SpannerRoleRule holds each function identity's Spanner access against
// what its code touches. The identity holds roles/spanner.fineGrainedAccessUser
// on the database and roles/spanner.databaseRoleUser conditioned on its own
// database role, named by its SPANNER_DATABASE_ROLE, and no other Spanner
// role anywhere (schema changes are the deploy identity's alone). The role
// is created in the DDL and granted exactly what wantPrivileges says of
// touches, nothing else; code that may update or delete rows of an
// append-only table fails, whatever the grants.
func SpannerRoleRule(p *Plan, c *Code, schema *Schema, touches map[string]map[string]Privileges) []error {
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
			for _, priv := range (granted[t] &^ wantPrivileges(t, need[t])).Names() {
				add("spanner role rule: function %s's database role %s is granted %s on table %s, which its code (%s and what it links) does not need", fn, role, priv, t, reg.Package)
			}
		}
		for _, t := range sortedKeys(need) {
			if appendOnlyTables[t] {
				for _, priv := range (need[t] & (PrivUpdate | PrivDelete)).Names() {
					add("spanner role rule: function %s's code (%s and what it links) needs %s on table %s, whose rows the service only ever inserts and reads (append-only: docs/moderation.md)", fn, reg.Package, priv, t)
				}
			}
			what := "reads"
			if need[t]&privWrite != 0 {
				what = "writes"
			}
			for _, priv := range (wantPrivileges(t, need[t]) &^ granted[t]).Names() {
				add("spanner role rule: function %s %s table %s but its database role %s is not granted %s on it", fn, what, t, role, priv)
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
