package producer_test

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The producer knows the core only through package ready (docs/design.md):
// it imports neither the window operators, the changelog's codec nor the
// repartition stage, and reaches the codec and the stages through no
// package it imports. ready's aliases of the window types a result
// carries are the one path to windowing.
func TestProducerImportsNoCore(t *testing.T) {
	direct := imports(t, "producer")
	for _, pkg := range []string{"windowing", "state", "repartition", "pipeline", "consumer"} {
		if slices.Contains(direct, pkg) {
			t.Errorf("package producer imports %s; it knows the core through package ready only", pkg)
		}
	}
	// Every package reached from producer, with the path that reaches it.
	via := map[string]string{"producer": "producer"}
	for queue := []string{"producer"}; len(queue) > 0; queue = queue[1:] {
		for _, dep := range imports(t, queue[0]) {
			if _, ok := via[dep]; !ok {
				via[dep] = via[queue[0]] + " → " + dep
				queue = append(queue, dep)
			}
		}
	}
	for _, pkg := range []string{"state", "repartition", "pipeline", "consumer"} {
		if path, ok := via[pkg]; ok {
			t.Errorf("package producer reaches %s: %s", pkg, path)
		}
	}
}

// imports are the module's internal packages that the non-test files of
// internal/<pkg> import, by their last element, under this build's tags.
func imports(t *testing.T, pkg string) []string {
	t.Helper()
	p, err := build.Default.ImportDir(filepath.Join("..", pkg), 0)
	if err != nil {
		t.Fatalf("ImportDir(internal/%s): %v", pkg, err)
	}
	var out []string
	for _, imp := range p.Imports {
		if rest, ok := strings.CutPrefix(imp, "aggregator/internal/"); ok {
			out = append(out, rest)
		}
	}
	if len(p.Imports) == 0 {
		t.Fatalf("ImportDir(internal/%s) found no imports: not the package's directory?", pkg)
	}
	return out
}
