package client_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"sort"
	"strings"
	"testing"
)

// forbiddenInAPI are the packages whose types an agent linking client must
// never need: the daemon's policy and the wire's protobuf messages. The
// client uses them inside; its exported API speaks its own types.
var forbiddenInAPI = []string{
	"github.com/ctxd/ctxd/policy",
	"github.com/ctxd/ctxd/protocol/ctxdpb",
}

// TestExportedAPIHasNoPolicyOrProtobufTypes type-checks package client from
// source and walks every exported identifier — functions, methods of
// exported types, exported struct fields, variables, constants, and the
// fields of types it reaches in other packages of this module — failing
// with the name of each one whose type mentions a forbidden package.
func TestExportedAPIHasNoPolicyOrProtobufTypes(t *testing.T) {
	pkg, err := importer.ForCompiler(token.NewFileSet(), "source", nil).Import("github.com/ctxd/ctxd/client")
	if err != nil {
		t.Fatalf("type-checking client: %v", err)
	}
	w := apiWalker{seen: map[types.Type]bool{}, bad: map[string]string{}}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.TypeName:
			w.walk(name, o.Type())
			if n, ok := types.Unalias(o.Type()).(*types.Named); ok {
				w.methods(name, n)
			}
		default:
			w.walk(name, o.Type())
		}
	}
	if len(w.bad) == 0 {
		return
	}
	var names []string
	for n := range w.bad {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("client's exported %s uses %s", n, w.bad[n])
	}
}

type apiWalker struct {
	seen map[types.Type]bool
	bad  map[string]string // exported path -> offending type
}

func forbidden(p *types.Package) bool {
	if p == nil {
		return false
	}
	for _, f := range forbiddenInAPI {
		if p.Path() == f {
			return true
		}
	}
	return false
}

// methods walks the exported methods of T and *T.
func (w *apiWalker) methods(at string, n *types.Named) {
	ms := types.NewMethodSet(types.NewPointer(n))
	for i := 0; i < ms.Len(); i++ {
		m := ms.At(i).Obj()
		if m.Exported() {
			w.walk(at+"."+m.Name(), m.Type())
		}
	}
}

// walk records at as an offender when t mentions a forbidden package.
func (w *apiWalker) walk(at string, t types.Type) {
	switch t := types.Unalias(t).(type) {
	case *types.Named:
		obj := t.Obj()
		if forbidden(obj.Pkg()) {
			w.bad[at] = t.String()
			return
		}
		for i := 0; i < t.TypeArgs().Len(); i++ {
			w.walk(at, t.TypeArgs().At(i))
		}
		if w.seen[t] {
			return
		}
		w.seen[t] = true
		// Types of this module reached from the API (client's own, or a
		// re-exported one such as protocol's) are walked field by field;
		// the standard library's are not.
		if p := obj.Pkg(); p != nil && strings.HasPrefix(p.Path(), "github.com/ctxd/ctxd/") {
			if _, isStruct := t.Underlying().(*types.Struct); isStruct {
				w.walk(at, t.Underlying())
			}
		}
	case *types.Pointer:
		w.walk(at, t.Elem())
	case *types.Slice:
		w.walk(at, t.Elem())
	case *types.Array:
		w.walk(at, t.Elem())
	case *types.Map:
		w.walk(at, t.Key())
		w.walk(at, t.Elem())
	case *types.Chan:
		w.walk(at, t.Elem())
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := 0; i < tup.Len(); i++ {
				w.walk(at, tup.At(i).Type())
			}
		}
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() {
				w.walk(at+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumMethods(); i++ {
			if m := t.Method(i); m.Exported() {
				w.walk(at+"."+m.Name(), m.Type())
			}
		}
	}
}
