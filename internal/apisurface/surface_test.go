package apisurface

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sharedos/sharedos"

// publicPackages lists the module's packages that code outside the module
// can import (no internal/ element, not a command), with the export data
// of every package they depend on.
func publicPackages(t *testing.T) (public []string, export map[string]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Name}}\t{{.Export}}\t{{with .Module}}{{.Path}}{{end}}", module+"/...")
	cmd.Dir = "../.."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	export = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 4 {
			t.Fatalf("go list line %q", sc.Text())
		}
		path, name, file, mod := f[0], f[1], f[2], f[3]
		export[path] = file
		if mod == module && name != "main" && !isInternal(path) {
			public = append(public, path)
		}
	}
	return public, export
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/") || strings.HasPrefix(path, "internal/")
}

// surfaceNames reports, for every exported declaration of pkg, the
// internal packages' types its declaration names, as "Decl: type".
func surfaceNames(pkg *types.Package) []string {
	var found []string
	for _, name := range pkg.Scope().Names() {
		obj := pkg.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		w := walker{seen: map[types.Type]bool{}, report: func(what string) { found = append(found, name+": "+what) }}
		switch obj := obj.(type) {
		case *types.TypeName:
			if alias, ok := obj.Type().(*types.Alias); ok {
				w.typ(alias)
				continue
			}
			named, ok := obj.Type().(*types.Named)
			if !ok {
				w.typ(obj.Type())
				continue
			}
			w.typ(named.Underlying())
			for m := range named.Methods() {
				if m.Exported() {
					w.prefix = "method " + m.Name() + ": "
					w.typ(m.Type())
				}
			}
		default:
			w.typ(obj.Type())
		}
	}
	return found
}

// walker visits a type's exported parts; an unexported field or method
// of a struct or interface is not part of the surface.
type walker struct {
	seen   map[types.Type]bool
	prefix string
	report func(string)
}

func (w *walker) typ(t types.Type) {
	if t == nil || w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		if w.named(t.Obj()) {
			return
		}
		for ta := range t.TypeArgs().Types() {
			w.typ(ta)
		}
		w.typ(types.Unalias(t))
	case *types.Named:
		w.named(t.Obj())
		for ta := range t.TypeArgs().Types() {
			w.typ(ta)
		}
	case *types.Pointer:
		w.typ(t.Elem())
	case *types.Slice:
		w.typ(t.Elem())
	case *types.Array:
		w.typ(t.Elem())
	case *types.Chan:
		w.typ(t.Elem())
	case *types.Map:
		w.typ(t.Key())
		w.typ(t.Elem())
	case *types.Signature:
		for v := range t.Params().Variables() {
			w.typ(v.Type())
		}
		for v := range t.Results().Variables() {
			w.typ(v.Type())
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() || f.Embedded() {
				w.typ(f.Type())
			}
		}
	case *types.Interface:
		for m := range t.ExplicitMethods() {
			if m.Exported() {
				w.typ(m.Type())
			}
		}
		for e := range t.EmbeddedTypes() {
			w.typ(e)
		}
	case *types.Union:
		for term := range t.Terms() {
			w.typ(term.Type())
		}
	case *types.TypeParam:
		w.typ(t.Constraint())
	}
}

// named reports (and returns true) when obj is declared in an internal
// package.
func (w *walker) named(obj *types.TypeName) bool {
	if obj.Pkg() == nil || !isInternal(obj.Pkg().Path()) {
		return false
	}
	w.report(w.prefix + obj.Pkg().Path() + "." + obj.Name())
	return true
}

func TestPublicAPINamesNoInternalType(t *testing.T) {
	public, export := publicPackages(t)
	if !slices.Contains(public, module+"/turn") || slices.Contains(public, module+"/internal/node") {
		t.Fatalf("public packages %v: want turn and not internal/node", public)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := export[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		for _, f := range surfaceNames(pkg) {
			t.Errorf("%s.%s", pkg.Name(), f)
		}
	}
}
