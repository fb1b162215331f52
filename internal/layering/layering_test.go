package layering

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ctxd/ctxd"

// innerRank orders the daemon's inner packages: each imports only those
// of a lower rank.
var innerRank = map[string]int{
	"sidecar/internal/tiers":    1,
	"sidecar/internal/snapshot": 2,
	"sidecar/internal/layout":   3,
	"sidecar/internal/resume":   4,
}

// leafInternal are helpers any layer may use: they import nothing of ours.
var leafInternal = []string{"internal/privdir", "internal/gguf"}

// graph maps each package of the module (path relative to the module) to
// the module packages its non-test files import.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := build.Default
	ctx.CgoEnabled = true
	g := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
			return filepath.SkipDir
		}
		pkg, err := ctx.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		var ours []string
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				ours = append(ours, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		g[rel] = ours
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g["sidecar"]; !ok {
		t.Fatalf("no package sidecar under %s: the walk is broken", root)
	}
	return g
}

func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

func TestImportRules(t *testing.T) {
	g := graph(t)
	allowedOnly := func(pkg string, allowed ...string) {
		for _, imp := range g[pkg] {
			ok := slices.ContainsFunc(allowed, func(a string) bool { return under(imp, a) }) || slices.Contains(leafInternal, imp)
			if !ok {
				t.Errorf("%s imports %s; it may import only %v and %v", pkg, imp, allowed, leafInternal)
			}
		}
	}
	never := func(pkg string, banned ...string) {
		for _, imp := range g[pkg] {
			for _, b := range banned {
				if under(imp, b) && !under(pkg, b) {
					t.Errorf("%s imports %s: it must never import %s", pkg, imp, b)
				}
			}
		}
	}
	for pkg := range g {
		switch {
		case under(pkg, "policy"):
			for _, imp := range g[pkg] {
				if !under(imp, "policy") {
					t.Errorf("policy must import nothing of ours but itself: %s imports %s", pkg, imp)
				}
			}
		case under(pkg, "engine"):
			allowedOnly(pkg, "policy", "engine")
		case under(pkg, "shm"), under(pkg, "coldstore"):
			allowedOnly(pkg)
		case under(pkg, "sidecar/internal"):
			never(pkg, "httpapi", "client", "cmd", "tools")
			for _, imp := range g[pkg] {
				if imp == "sidecar" {
					t.Errorf("%s imports the shell (package sidecar): inner packages never reach up", pkg)
				}
				if under(imp, "sidecar/internal") {
					r, ok := innerRank[pkg]
					ri, oki := innerRank[imp]
					if !ok || !oki || ri >= r {
						t.Errorf("%s (rank %d) imports %s (rank %d): inner packages import only lower ranks (innerRank)", pkg, r, imp, ri)
					}
				}
			}
		case pkg == "sidecar":
			never(pkg, "httpapi", "client", "cmd", "tools")
		}
		if !under(pkg, "cmd") {
			never(pkg, "cmd")
		}
		// The daemon is linked by the commands and the HTTP door only.
		if !under(pkg, "cmd") && !under(pkg, "httpapi") && !under(pkg, "sidecar") && slices.Contains(g[pkg], "sidecar") {
			t.Errorf("%s imports sidecar: only the commands and httpapi link the daemon", pkg)
		}
		if under(pkg, "protocol") {
			allowedOnly(pkg, "policy", "protocol")
		}
	}
	for pkg := range g {
		if under(pkg, "sidecar/internal") {
			if _, ok := innerRank[pkg]; !ok {
				t.Errorf("%s has no rank in innerRank: give it one", pkg)
			}
		}
	}
}

func TestNoImportCycles(t *testing.T) {
	g := graph(t)
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(string)
	visit = func(p string) {
		switch state[p] {
		case open:
			i := slices.Index(stack, p)
			t.Fatalf("import cycle: %s", strings.Join(append(stack[i:], p), " -> "))
		case done:
			return
		}
		state[p] = open
		stack = append(stack, p)
		for _, imp := range g[p] {
			visit(imp)
		}
		stack = stack[:len(stack)-1]
		state[p] = done
	}
	pkgs := make([]string, 0, len(g))
	for p := range g {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		visit(p)
	}
}

// TestRulesSeeTheTree guards the walk itself: the graph must hold the
// daemon's real edges.
func TestRulesSeeTheTree(t *testing.T) {
	g := graph(t)
	if !slices.Contains(g["sidecar"], "policy") || !slices.Contains(g["engine/llama"], "engine") {
		t.Fatalf("the import graph misses known edges: sidecar -> %v, engine/llama -> %v", g["sidecar"], g["engine/llama"])
	}
	if _, err := os.Stat(filepath.Join("..", "..", "go.mod")); err != nil {
		t.Fatalf("the module root is not two folders up: %v", err)
	}
}
