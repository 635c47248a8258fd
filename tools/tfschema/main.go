// Command tfschema writes the Terraform provider schema of exactly the
// resource and data source types that terraform/ uses, in the format of
// `terraform providers schema -json`, for the stand-in provider in
// tools/tfprovider.
//
// The registry is not reachable where the checks run, so the schema is taken
// from the npm packages @cdktf/provider-google and @cdktf/provider-random:
// they are generated from the real providers' schemas (google 6.50.0,
// random 3.7.2, time 0.13.1; MPL-2.0) and keep, in the TypeScript source embedded in each
// file's source map, every attribute with its computed/optional/required
// flags and every block with its nesting. See generate.sh for the whole
// procedure.
package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	if err := realMain(); err != nil {
		fmt.Fprintln(os.Stderr, "tfschema:", err)
		os.Exit(1)
	}
}

// packages maps a provider's local name to its registry address.
var providers = map[string]string{
	"google":      "registry.terraform.io/hashicorp/google",
	"google-beta": "registry.terraform.io/hashicorp/google-beta",
	"random":      "registry.terraform.io/hashicorp/random",
	"time":        "registry.terraform.io/hashicorp/time",
}

func realMain() error {
	tfDir := flag.String("terraform", "terraform", "directory whose *.tf files name the types to keep")
	google := flag.String("google", "", "unpacked @cdktf/provider-google package directory")
	googleBeta := flag.String("google-beta", "", "unpacked @cdktf/provider-google-beta package directory")
	random := flag.String("random", "", "unpacked @cdktf/provider-random package directory")
	timeDir := flag.String("time", "", "unpacked @cdktf/provider-time package directory")
	out := flag.String("out", "tools/tfprovider/schema.json", "output file")
	flag.Parse()
	pkgDirs := map[string]string{"google": *google, "google-beta": *googleBeta, "random": *random, "time": *timeDir}

	resources, dataSources, ephemerals, err := usedTypes(*tfDir)
	if err != nil {
		return err
	}
	beta, err := betaTypes(*tfDir)
	if err != nil {
		return err
	}
	doc := schemaDoc{FormatVersion: "1.0", ProviderSchemas: map[string]*providerSchema{}}
	for local, addr := range providers {
		dir := pkgDirs[local]
		if dir == "" {
			return fmt.Errorf("-%s is required", local)
		}
		version, err := packageProviderVersion(dir)
		if err != nil {
			return err
		}
		ps := &providerSchema{
			ProviderVersion: version,
			ResourceSchemas: map[string]*schema{},
			DataSchemas:     map[string]*schema{},
		}
		if ps.Provider, err = loadSchema(filepath.Join(dir, "lib", "provider", "index.js"), ""); err != nil {
			return fmt.Errorf("%s provider: %w", local, err)
		}
		for _, t := range resources {
			if !servedBy(local, t, beta) {
				continue
			}
			s, err := loadSchema(filepath.Join(dir, "lib", libDir(local, t, false), "index.js"), t)
			if err != nil {
				return fmt.Errorf("resource %s: %w", t, err)
			}
			ps.ResourceSchemas[t] = s
		}
		for _, t := range dataSources {
			if !servedBy(local, t, beta) {
				continue
			}
			s, err := loadSchema(filepath.Join(dir, "lib", libDir(local, t, true), "index.js"), t)
			if err != nil {
				return fmt.Errorf("data source %s: %w", t, err)
			}
			ps.DataSchemas[t] = s
		}
		for _, t := range ephemerals {
			if !servedBy(local, t, beta) {
				continue
			}
			s, err := ephemeralSchema(dir, local, t)
			if err != nil {
				return fmt.Errorf("ephemeral resource %s: %w", t, err)
			}
			if ps.EphemeralSchemas == nil {
				ps.EphemeralSchemas = map[string]*schema{}
			}
			ps.EphemeralSchemas[t] = s
		}
		if local == "google" {
			markWriteOnly(ps)
		}
		doc.ProviderSchemas[addr] = ps
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}

// schemaDoc is the `terraform providers schema -json` format, plus the
// provider version the schema belongs to.
type schemaDoc struct {
	FormatVersion   string                     `json:"format_version"`
	ProviderSchemas map[string]*providerSchema `json:"provider_schemas"`
}

type providerSchema struct {
	ProviderVersion string             `json:"provider_version"`
	Provider        *schema            `json:"provider"`
	ResourceSchemas map[string]*schema `json:"resource_schemas"`
	DataSchemas     map[string]*schema `json:"data_source_schemas"`
	// Ephemeral resources (Terraform 1.10+): opened during plan and apply,
	// never stored in state.
	EphemeralSchemas map[string]*schema `json:"ephemeral_resource_schemas,omitempty"`
}

type schema struct {
	Version int    `json:"version"`
	Block   *block `json:"block"`
}

type block struct {
	Attributes map[string]*attribute   `json:"attributes,omitempty"`
	BlockTypes map[string]*nestedBlock `json:"block_types,omitempty"`
}

type attribute struct {
	Type     any  `json:"type"`
	Required bool `json:"required,omitempty"`
	Optional bool `json:"optional,omitempty"`
	Computed bool `json:"computed,omitempty"`
	// WriteOnly: the value is sent to the provider but never kept in the
	// plan or the state (Terraform 1.11+).
	WriteOnly bool `json:"write_only,omitempty"`
}

type nestedBlock struct {
	NestingMode string `json:"nesting_mode"`
	Block       *block `json:"block"`
	MinItems    int    `json:"min_items,omitempty"`
	MaxItems    int    `json:"max_items,omitempty"`
}

var typeDecl = regexp.MustCompile(`(?m)^\s*(resource|data|ephemeral)\s+"([a-z0-9_]+)"`)

// usedTypes lists the resource, data source and ephemeral resource types
// declared in dir.
func usedTypes(dir string) (resources, dataSources, ephemerals []string, err error) {
	seen := map[string]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != dir {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".tf") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range typeDecl.FindAllStringSubmatch(string(b), -1) {
			key := m[1] + " " + m[2]
			if seen[key] {
				continue
			}
			seen[key] = true
			switch m[1] {
			case "resource":
				resources = append(resources, m[2])
			case "data":
				dataSources = append(dataSources, m[2])
			default:
				ephemerals = append(ephemerals, m[2])
			}
		}
		return nil
	})
	sort.Strings(resources)
	sort.Strings(dataSources)
	sort.Strings(ephemerals)
	return resources, dataSources, ephemerals, err
}

// markWriteOnly flags the google provider's write-only arguments, which the
// cdktf packages do not record: the provider names every one of them with
// the suffix "_wo" (secret_data_wo, password_wo, ...), next to an ordinary
// "<name>_wo_version" that triggers sending it again.
func markWriteOnly(ps *providerSchema) {
	var walk func(b *block)
	walk = func(b *block) {
		for name, a := range b.Attributes {
			if strings.HasSuffix(name, "_wo") && !a.Computed {
				a.WriteOnly = true
			}
		}
		for _, nb := range b.BlockTypes {
			walk(nb.Block)
		}
	}
	for _, s := range ps.ResourceSchemas {
		walk(s.Block)
	}
}

// ephemeralSchema is the schema of an ephemeral resource. The cdktf packages
// have none, so it is derived from the resource of the same name where the
// provider documents the two as the same arguments: random 3.7's ephemeral
// random_password takes random_password's arguments but keepers (there is
// no state to keep), and answers result and bcrypt_hash.
func ephemeralSchema(dir, local, t string) (*schema, error) {
	if local != "random" || t != "random_password" {
		return nil, fmt.Errorf("no known way to derive the schema of ephemeral %s", t)
	}
	s, err := loadSchema(filepath.Join(dir, "lib", libDir(local, t, false), "index.js"), t)
	if err != nil {
		return nil, err
	}
	for _, drop := range []string{"keepers", "id", "number"} {
		delete(s.Block.Attributes, drop)
	}
	return s, nil
}

// servedBy says whether provider local serves type t: random_* by random,
// time_* by time,
// google_* by google-beta when a block of that type names provider =
// google-beta (beta), by google otherwise.
func servedBy(local, t string, beta map[string]bool) bool {
	switch local {
	case "google":
		return strings.HasPrefix(t, "google_") && !beta[t]
	case "google-beta":
		return beta[t]
	}
	return strings.HasPrefix(t, local+"_")
}

var (
	blockStart   = regexp.MustCompile(`^(resource|data|ephemeral)\s+"([a-z0-9_]+)"`)
	betaProvider = regexp.MustCompile(`^\s*provider\s*=\s*google-beta\s*$`)
)

// betaTypes lists the types of the blocks in dir that name provider =
// google-beta (blocks start at column 0 and end with "}" at column 0, as
// terraform fmt writes them).
func betaTypes(dir string) (map[string]bool, error) {
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != dir {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".tf") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		typ := ""
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case blockStart.MatchString(line):
				typ = blockStart.FindStringSubmatch(line)[2]
			case line == "}":
				typ = ""
			case typ != "" && betaProvider.MatchString(line):
				out[typ] = true
			}
		}
		return nil
	})
	return out, err
}

// libDir is the package folder of a type: google_pubsub_topic is
// lib/pubsub-topic, data google_project is lib/data-google-project; the
// google-beta package keeps the prefix (lib/google-project-service-identity).
func libDir(local, t string, data bool) string {
	if data {
		return "data-" + strings.ReplaceAll(t, "_", "-")
	}
	if local == "google-beta" {
		return strings.ReplaceAll(t, "_", "-")
	}
	d := strings.ReplaceAll(strings.TrimPrefix(t, local+"_"), "_", "-")
	// time_sleep is lib/sleep, as random_password is lib/password.
	if local == "random" && d == "string" {
		d = "string-resource"
	}
	return d
}

func packageProviderVersion(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", err
	}
	var p struct {
		Cdktf struct {
			Provider struct {
				Version string `json:"version"`
			} `json:"provider"`
		} `json:"cdktf"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return "", err
	}
	if p.Cdktf.Provider.Version == "" {
		return "", fmt.Errorf("%s/package.json names no provider version", dir)
	}
	return p.Cdktf.Provider.Version, nil
}

// source is one type's generated TypeScript.
type source struct {
	classes map[string]string // class name -> body
	synth   map[string]string // struct name -> body of its ToHclTerraform
	root    string            // name of the resource/data/provider class
}

var (
	sourceMap  = regexp.MustCompile(`(?m)^//# sourceMappingURL=data:application/json;base64,(\S+)$`)
	classDecl  = regexp.MustCompile(`(?m)^export class (\w+) extends cdktf\.(\w+) \{`)
	synthDecl  = regexp.MustCompile(`(?m)^export function (\w+)ToHclTerraform\(`)
	nextExport = regexp.MustCompile(`(?m)^export `)
)

func readSource(path string) (*source, error) {
	js, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := sourceMap.FindSubmatch(js)
	if m == nil {
		return nil, fmt.Errorf("%s: no embedded source map", path)
	}
	raw, err := base64.StdEncoding.DecodeString(string(m[1]))
	if err != nil {
		return nil, fmt.Errorf("%s: source map: %w", path, err)
	}
	var sm struct {
		SourcesContent []string `json:"sourcesContent"`
	}
	if err := json.Unmarshal(raw, &sm); err != nil || len(sm.SourcesContent) != 1 {
		return nil, fmt.Errorf("%s: source map holds no single source (%v)", path, err)
	}
	ts := sm.SourcesContent[0]
	s := &source{classes: map[string]string{}, synth: map[string]string{}}
	body := func(start int) string {
		rest := ts[start:]
		if loc := nextExport.FindStringIndex(rest[1:]); loc != nil {
			return rest[:loc[0]+1]
		}
		return rest
	}
	for _, loc := range classDecl.FindAllStringSubmatchIndex(ts, -1) {
		name, base := ts[loc[2]:loc[3]], ts[loc[4]:loc[5]]
		s.classes[name] = body(loc[0])
		switch base {
		case "TerraformResource", "TerraformDataSource", "TerraformProvider":
			s.root = name
		}
	}
	for _, loc := range synthDecl.FindAllStringSubmatchIndex(ts, -1) {
		fn := ts[loc[2]:loc[3]]
		s.synth[strings.ToUpper(fn[:1])+fn[1:]] = body(loc[0])
	}
	if s.root == "" {
		return nil, fmt.Errorf("%s: no resource, data source or provider class", path)
	}
	return s, nil
}

var resourceTypeDecl = regexp.MustCompile(`tfResourceType = "([a-z0-9_]+)"`)

func loadSchema(path, tfType string) (*schema, error) {
	src, err := readSource(path)
	if err != nil {
		return nil, err
	}
	rootBody := src.classes[src.root]
	if tfType != "" {
		m := resourceTypeDecl.FindStringSubmatch(rootBody)
		if m == nil || m[1] != tfType {
			return nil, fmt.Errorf("%s does not declare %s", path, tfType)
		}
	}
	i := strings.Index(rootBody, "synthesizeHclAttributes()")
	if i < 0 {
		return nil, fmt.Errorf("%s: no synthesizeHclAttributes", path)
	}
	b, err := src.block(rootBody, rootBody[i:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &schema{Block: b}, nil
}

// field is one attribute or block as the generated class and the
// ToHclTerraform function describe it.
type field struct {
	name                         string
	computed, optional, required bool
	flagged                      bool   // the class comment gave the flags
	getter                       string // class text of the field
	synth                        *synthEntry
}

type synthEntry struct {
	isBlock          bool
	kind             string // simple, list, set, map, struct
	storageClassType string
}

var (
	flagComment  = regexp.MustCompile(`(?m)^  // (\w+) - computed: (true|false), optional: (true|false), required: (true|false)$`)
	synthEntryRe = regexp.MustCompile(`(?m)^\s*(\w+): \{\n\s*value: .*\n\s*isBlock: (true|false),\n\s*type: "(\w+)",\n\s*storageClassType: "(\w+)",`)
	newObject    = regexp.MustCompile(`private _\w+ = new (?:cdktf\.)?(\w+)\(this, "\w+"(?:, (true|false))?\)`)
	getterCall   = regexp.MustCompile(`return (cdktf\.Fn\.tolist\()?this\.get(\w+)Attribute\('\w+'\)`)
)

// fields merges the class comments (flags, computed-only fields) with the
// ToHclTerraform entries (configurable fields and how they nest).
func fields(classBody, synthBody string) ([]*field, error) {
	var out []*field
	byName := map[string]*field{}
	locs := flagComment.FindAllStringSubmatchIndex(classBody, -1)
	for i, loc := range locs {
		end := len(classBody)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		f := &field{
			name:     classBody[loc[2]:loc[3]],
			computed: classBody[loc[4]:loc[5]] == "true",
			optional: classBody[loc[6]:loc[7]] == "true",
			required: classBody[loc[8]:loc[9]] == "true",
			flagged:  true,
			getter:   classBody[loc[1]:end],
		}
		out = append(out, f)
		byName[f.name] = f
	}
	for _, m := range synthEntryRe.FindAllStringSubmatch(synthBody, -1) {
		e := &synthEntry{isBlock: m[2] == "true", kind: m[3], storageClassType: m[4]}
		f, ok := byName[m[1]]
		if !ok {
			f = &field{name: m[1], optional: true}
			out = append(out, f)
			byName[f.name] = f
		}
		f.synth = e
	}
	if len(out) == 0 && strings.TrimSpace(synthBody) != "" && strings.Contains(synthBody, "isBlock") {
		return nil, errors.New("no field recognised")
	}
	return out, nil
}

func (s *source) block(classBody, synthBody string) (*block, error) {
	fs, err := fields(classBody, synthBody)
	if err != nil {
		return nil, err
	}
	b := &block{Attributes: map[string]*attribute{}, BlockTypes: map[string]*nestedBlock{}}
	for _, f := range fs {
		if f.synth != nil && f.synth.isBlock {
			nb, err := s.nested(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
			b.BlockTypes[f.name] = nb
			continue
		}
		a := &attribute{Required: f.required, Optional: f.optional, Computed: f.computed}
		if f.synth != nil {
			a.Type, err = simpleType(f.synth)
		} else {
			if !f.computed || f.optional || f.required {
				return nil, fmt.Errorf("%s: configurable but not synthesised", f.name)
			}
			a.Type, err = s.computedType(f.getter)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		b.Attributes[f.name] = a
	}
	return b, nil
}

func (s *source) nested(f *field) (*nestedBlock, error) {
	structName := f.synth.storageClassType
	nb := &nestedBlock{}
	switch f.synth.kind {
	case "struct":
		nb.NestingMode = "single"
	case "list", "set":
		nb.NestingMode = f.synth.kind
		structName = strings.TrimSuffix(structName, "List")
	default:
		return nil, fmt.Errorf("block of kind %q", f.synth.kind)
	}
	if f.required {
		nb.MinItems = 1
	}
	if m := newObject.FindStringSubmatch(f.getter); m != nil && m[1] == structName+"OutputReference" && nb.NestingMode != "single" {
		nb.MaxItems = 1
	}
	synthBody, ok := s.synth[structName]
	if !ok {
		return nil, fmt.Errorf("no %sToHclTerraform", structName)
	}
	inner, err := s.block(s.classes[structName+"OutputReference"], synthBody)
	if err != nil {
		return nil, err
	}
	nb.Block = inner
	return nb, nil
}

func simpleType(e *synthEntry) (any, error) {
	prim := map[string]string{"string": "string", "number": "number", "boolean": "bool"}
	switch e.kind {
	case "simple":
		if p, ok := prim[e.storageClassType]; ok {
			return p, nil
		}
	case "list", "set", "map":
		for k, p := range prim {
			want := k + "List"
			if e.kind == "map" {
				want = k + "Map"
			}
			if e.storageClassType == want {
				return []any{e.kind, p}, nil
			}
		}
	}
	return nil, fmt.Errorf("unsupported attribute %s/%s", e.kind, e.storageClassType)
}

// computedType is the type of a computed-only attribute, from its getter.
func (s *source) computedType(getter string) (any, error) {
	if m := newObject.FindStringSubmatch(getter); m != nil {
		switch cls := m[1]; {
		case cls == "StringMap":
			return []any{"map", "string"}, nil
		case cls == "NumberMap":
			return []any{"map", "number"}, nil
		case cls == "BooleanMap":
			return []any{"map", "bool"}, nil
		case strings.HasSuffix(cls, "List"):
			obj, err := s.objectType(strings.TrimSuffix(cls, "List") + "OutputReference")
			if err != nil {
				return nil, err
			}
			if m[2] == "true" {
				return []any{"set", obj}, nil
			}
			return []any{"list", obj}, nil
		case strings.HasSuffix(cls, "OutputReference"):
			obj, err := s.objectType(cls)
			if err != nil {
				return nil, err
			}
			return []any{"list", obj}, nil
		}
		return nil, fmt.Errorf("unsupported computed class %s", m[1])
	}
	m := getterCall.FindStringSubmatch(getter)
	if m == nil {
		return nil, errors.New("unrecognised getter")
	}
	set := m[1] != ""
	switch m[2] {
	case "String":
		return "string", nil
	case "Number":
		return "number", nil
	case "Boolean":
		return "bool", nil
	case "List":
		if set {
			return []any{"set", "string"}, nil
		}
		return []any{"list", "string"}, nil
	case "NumberList":
		return []any{"list", "number"}, nil
	case "StringMap":
		return []any{"map", "string"}, nil
	case "NumberMap":
		return []any{"map", "number"}, nil
	case "BooleanMap":
		return []any{"map", "bool"}, nil
	}
	return nil, fmt.Errorf("unsupported getter get%sAttribute", m[2])
}

func (s *source) objectType(class string) (any, error) {
	body, ok := s.classes[class]
	if !ok {
		return nil, fmt.Errorf("no class %s", class)
	}
	fs, err := fields(body, "")
	if err != nil {
		return nil, err
	}
	attrs := map[string]any{}
	for _, f := range fs {
		t, err := s.computedType(f.getter)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", class, f.name, err)
		}
		attrs[f.name] = t
	}
	return []any{"object", attrs}, nil
}
