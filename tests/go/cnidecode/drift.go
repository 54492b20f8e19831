package main

// `cnidecode -drift DIR`: the structs of plugins.go against the plugins' own source in DIR (the
// plugins module as the module cache holds it). Each plugin's config struct is parsed with
// go/ast and turned into a shape: its JSON names in field order, each with its Go type's kind
// ("string", "*int", "[]struct", "map[string]string", "named:IP" for a type of another package)
// and, for a struct, the shape of its fields; embedded structs keep their place, as
// encoding/json promotes their fields. The declared struct's shape comes from reflect. Any
// difference (a name, a kind, the order) is reported: the decoder would read the plugin's
// config differently from the plugin.

import (
	"encoding"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
)

// field is one entry of a shape.
type field struct {
	Name     string  `json:"name"`
	Kind     string  `json:"kind"`
	Children []field `json:"children,omitempty"`
}

// driftTarget names a plugin's config struct in the plugins module and the struct that mirrors it.
type driftTarget struct {
	plugin   string
	dir      string // the package, relative to the module root
	typeName string
	declared reflect.Type
}

var driftTargets = []driftTarget{
	{"bridge", "plugins/main/bridge", "NetConf", reflect.TypeFor[bridgeConf]()},
	{"macvlan", "plugins/main/macvlan", "NetConf", reflect.TypeFor[macvlanConf]()},
	{"ipvlan", "plugins/main/ipvlan", "NetConf", reflect.TypeFor[ipvlanConf]()},
	{"ptp", "plugins/main/ptp", "NetConf", reflect.TypeFor[ptpConf]()},
	{"vlan", "plugins/main/vlan", "NetConf", reflect.TypeFor[vlanConf]()},
	{"host-device", "plugins/main/host-device", "NetConf", reflect.TypeFor[hostDeviceConf]()},
	{"tuning", "plugins/meta/tuning", "TuningConf", reflect.TypeFor[tuningConf]()},
	{"portmap", "plugins/meta/portmap", "PortMapConf", reflect.TypeFor[portmapConf]()},
	{"bandwidth", "plugins/meta/bandwidth", "PluginConf", reflect.TypeFor[bandwidthConf]()},
	{"sbr", "plugins/meta/sbr", "PluginConf", reflect.TypeFor[sbrConf]()},
	{"vrf", "plugins/meta/vrf", "VRFNetConf", reflect.TypeFor[vrfConf]()},
	{"firewall", "plugins/meta/firewall", "FirewallNetConf", reflect.TypeFor[firewallConf]()},
	{"static", "plugins/ipam/static", "Net", reflect.TypeFor[staticNet]()},
	{"dhcp", "plugins/ipam/dhcp", "NetConf", reflect.TypeFor[dhcpConf]()},
	// Imported, so equal by construction: it proves the comparison itself on a real package.
	{"host-local", "plugins/ipam/host-local/backend/allocator", "Net", reflect.TypeFor[allocator.Net]()},
}

// Types of other packages whose source name differs from reflect's: cni v1 made types.NetConf
// an alias of types.PluginConf.
var aliasNames = map[string]string{"NetConf": "PluginConf"}

var builtins = map[string]bool{
	"bool": true, "string": true, "int": true, "int8": true, "int16": true, "int32": true,
	"int64": true, "uint": true, "uint8": true, "uint16": true, "uint32": true, "uint64": true,
	"float32": true, "float64": true, "byte": true, "rune": true,
}

// driftReport compares every target and returns one line per difference.
func driftReport(moduleDir string) ([]string, error) {
	var problems []string
	for _, target := range driftTargets {
		pkg, err := parsePackage(filepath.Join(moduleDir, target.dir))
		if err != nil {
			return nil, err
		}
		spec, ok := pkg.types[target.typeName]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s/%s not found", target.plugin, target.dir, target.typeName))
			continue
		}
		structType, ok := spec.Type.(*ast.StructType)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: %s is not a struct", target.plugin, target.typeName))
			continue
		}
		want := pkg.structShape(structType)
		got := reflectShape(target.declared, target.declared.PkgPath())
		problems = append(problems, compareShapes(target.plugin, "", want, got)...)
	}
	return problems, nil
}

// sourcePackage is one package's type declarations and the types with JSON methods.
type sourcePackage struct {
	types      map[string]*ast.TypeSpec
	unmarshals map[string]bool
}

func parsePackage(dir string) (*sourcePackage, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	pkg := &sourcePackage{types: map[string]*ast.TypeSpec{}, unmarshals: map[string]bool{}}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range parsed.Decls {
			switch decl := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						pkg.types[ts.Name.Name] = ts
					}
				}
			case *ast.FuncDecl:
				name := decl.Name.Name
				if decl.Recv != nil && (name == "UnmarshalJSON" || name == "UnmarshalText") {
					pkg.unmarshals[receiverName(decl.Recv.List[0].Type)] = true
				}
			}
		}
	}
	if len(pkg.types) == 0 {
		return nil, fmt.Errorf("no Go source in %s", dir)
	}
	return pkg, nil
}

func receiverName(expr ast.Expr) string {
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	if ident, ok := expr.(*ast.Ident); ok {
		return ident.Name
	}
	return ""
}

func (pkg *sourcePackage) structShape(st *ast.StructType) []field {
	var shape []field
	for _, f := range st.Fields.List {
		name, skip := jsonName(f.Tag)
		if skip {
			continue
		}
		if len(f.Names) == 0 && name == "" {
			shape = append(shape, pkg.embedded(f.Type))
			continue
		}
		for _, ident := range f.Names {
			if !ident.IsExported() {
				continue
			}
			key := name
			if key == "" {
				key = ident.Name
			}
			kind, children := pkg.kind(f.Type)
			shape = append(shape, field{Name: key, Kind: kind, Children: children})
		}
	}
	return shape
}

func (pkg *sourcePackage) embedded(expr ast.Expr) field {
	prefix := ""
	if star, ok := expr.(*ast.StarExpr); ok {
		prefix, expr = "*", star.X
	}
	switch expr := expr.(type) {
	case *ast.SelectorExpr:
		return field{Name: "<embedded>", Kind: prefix + "embedded:" + externalName(expr.Sel.Name)}
	case *ast.Ident:
		if spec, ok := pkg.types[expr.Name]; ok {
			if st, ok := spec.Type.(*ast.StructType); ok {
				return field{Name: "<embedded>", Kind: prefix + "embedded", Children: pkg.structShape(st)}
			}
		}
	}
	return field{Name: "<embedded>", Kind: prefix + "embedded:?"}
}

func (pkg *sourcePackage) kind(expr ast.Expr) (string, []field) {
	switch expr := expr.(type) {
	case *ast.Ident:
		if builtins[expr.Name] {
			return builtinKind(expr.Name), nil
		}
		if expr.Name == "any" {
			return "any", nil
		}
		spec, ok := pkg.types[expr.Name]
		if !ok {
			return "unknown:" + expr.Name, nil
		}
		if pkg.unmarshals[expr.Name] {
			return "custom", nil
		}
		return pkg.kind(spec.Type)
	case *ast.StarExpr:
		kind, children := pkg.kind(expr.X)
		return "*" + kind, children
	case *ast.ArrayType:
		kind, children := pkg.kind(expr.Elt)
		if expr.Len != nil {
			return "[n]" + kind, children
		}
		return "[]" + kind, children
	case *ast.MapType:
		key, _ := pkg.kind(expr.Key)
		kind, children := pkg.kind(expr.Value)
		return "map[" + key + "]" + kind, children
	case *ast.InterfaceType:
		return "any", nil
	case *ast.SelectorExpr:
		return "named:" + externalName(expr.Sel.Name), nil
	case *ast.StructType:
		return "struct", pkg.structShape(expr)
	}
	return fmt.Sprintf("unknown:%T", expr), nil
}

func builtinKind(name string) string {
	switch name {
	case "byte":
		return "uint8"
	case "rune":
		return "int32"
	}
	return name
}

func externalName(name string) string {
	if alias, ok := aliasNames[name]; ok {
		return alias
	}
	return name
}

// jsonName is the name a `json` tag gives (empty for none) and whether the tag hides the field.
func jsonName(tag *ast.BasicLit) (string, bool) {
	if tag == nil {
		return "", false
	}
	text, err := strconv.Unquote(tag.Value)
	if err != nil {
		return "", false
	}
	value := reflect.StructTag(text).Get("json")
	if value == "-" {
		return "", true
	}
	name, _, _ := strings.Cut(value, ",")
	return name, false
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func reflectShape(t reflect.Type, local string) []field {
	var shape []field
	for i := range t.NumField() {
		f := t.Field(i)
		value := f.Tag.Get("json")
		if value == "-" {
			continue
		}
		name, _, _ := strings.Cut(value, ",")
		if f.Anonymous && name == "" {
			shape = append(shape, reflectEmbedded(f.Type, local))
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		kind, children := reflectKind(f.Type, local)
		shape = append(shape, field{Name: name, Kind: kind, Children: children})
	}
	return shape
}

func reflectEmbedded(t reflect.Type, local string) field {
	prefix := ""
	if t.Kind() == reflect.Pointer {
		prefix, t = "*", t.Elem()
	}
	if t.PkgPath() != local {
		return field{Name: "<embedded>", Kind: prefix + "embedded:" + t.Name()}
	}
	return field{Name: "<embedded>", Kind: prefix + "embedded", Children: reflectShape(t, local)}
}

func reflectKind(t reflect.Type, local string) (string, []field) {
	if t.Name() != "" && t.PkgPath() != "" && t.PkgPath() != local {
		return "named:" + t.Name(), nil
	}
	if t.Name() != "" && t.PkgPath() == local && t.Kind() != reflect.Pointer {
		pointer := reflect.PointerTo(t)
		if pointer.Implements(jsonUnmarshaler) || pointer.Implements(textUnmarshaler) {
			return "custom", nil
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		kind, children := reflectKind(t.Elem(), local)
		return "*" + kind, children
	case reflect.Slice:
		kind, children := reflectKind(t.Elem(), local)
		return "[]" + kind, children
	case reflect.Array:
		kind, children := reflectKind(t.Elem(), local)
		return "[n]" + kind, children
	case reflect.Map:
		key, _ := reflectKind(t.Key(), local)
		kind, children := reflectKind(t.Elem(), local)
		return "map[" + key + "]" + kind, children
	case reflect.Interface:
		return "any", nil
	case reflect.Struct:
		return "struct", reflectShape(t, local)
	}
	return t.Kind().String(), nil
}

// compareShapes lists the differences between the plugin's shape (want) and the declared one.
func compareShapes(plugin, path string, want, got []field) []string {
	var problems []string
	where := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(got):
			problems = append(problems, fmt.Sprintf("%s: %s (%s) is in the plugin's struct, not in the declared one",
				plugin, where(want[i].Name), want[i].Kind))
		case i >= len(want):
			problems = append(problems, fmt.Sprintf("%s: %s (%s) is declared, not in the plugin's struct",
				plugin, where(got[i].Name), got[i].Kind))
		case want[i].Name != got[i].Name || want[i].Kind != got[i].Kind:
			problems = append(problems, fmt.Sprintf("%s: field %d is %s (%s) in the plugin's struct, %s (%s) declared",
				plugin, i, where(want[i].Name), want[i].Kind, where(got[i].Name), got[i].Kind))
		default:
			problems = append(problems, compareShapes(plugin, where(want[i].Name), want[i].Children, got[i].Children)...)
		}
	}
	return problems
}

// runDrift is the -drift mode: 0 when every struct matches, 1 (with the differences) otherwise.
func runDrift(moduleDir string) int {
	problems, err := driftReport(moduleDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnidecode: drift:", err)
		return 2
	}
	for _, problem := range problems {
		fmt.Println(problem)
	}
	if len(problems) > 0 {
		return 1
	}
	fmt.Printf("%d plugin config structs match %s\n", len(driftTargets), moduleDir)
	return 0
}
