package main

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/shlex"
	"github.com/twmb/franz-go/pkg/kfake"

	"aggregator/internal/config"
)

// TestDocs runs every command that README.md and docs/*.md show, as
// shown: the aggregator's own commands through run (a console block's
// output must be what it prints, byte for byte), `go test` commands are
// checked for packages, tests, benchmarks and flags that exist, and kcat
// commands for the flags without which they hang or go nowhere. Programs
// that need a cluster or a registry (docker, kubectl, helm) are only
// allowed, not run. The local loop (broker, run, kcat) is run end to end
// by TestLocalLoop.
func TestDocs(t *testing.T) {
	t.Chdir("../..") // the commands are shown from the repository root
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	var n int
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range docCommands(string(text)) {
			n++
			t.Run(file+":"+c.line, func(t *testing.T) { checkDocCommand(t, c) })
		}
	}
	if n < 10 {
		t.Errorf("found %d commands in README.md and docs/, want the set-up, replay and local-loop commands at least", n)
	}
}

// A docCommand is one command line of the docs; output is what a console
// block shows it printing (checked only when checkOutput).
type docCommand struct {
	line        string
	checkOutput bool
	output      string
}

var (
	fenceRE      = regexp.MustCompile("(?ms)^```(sh|console)\n(.*?)^```")
	inlineTestRE = regexp.MustCompile("`(go test [^`]+)`")
)

// docCommands finds the commands of a Markdown text: the lines of ```sh
// blocks (comments and blank lines left out), the "$ " lines of ```console
// blocks with the lines after them as their output, and inline `go test`
// spans (the benchmark tables' commands).
func docCommands(text string) []docCommand {
	var cmds []docCommand
	for _, m := range fenceRE.FindAllStringSubmatch(text, -1) {
		if m[1] == "sh" {
			for line := range strings.Lines(m[2]) {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					cmds = append(cmds, docCommand{line: line})
				}
			}
			continue
		}
		for chunk := range strings.SplitSeq("\n"+m[2], "\n$ ") {
			if line, out, _ := strings.Cut(chunk, "\n"); line != "" {
				cmds = append(cmds, docCommand{line: line, checkOutput: true, output: out})
			}
		}
	}
	for _, m := range inlineTestRE.FindAllStringSubmatch(text, -1) {
		// In a Markdown table a | in code is written \|.
		cmds = append(cmds, docCommand{line: strings.ReplaceAll(m[1], `\|`, "|")})
	}
	return cmds
}

func checkDocCommand(t *testing.T, c docCommand) {
	words, err := shlex.Split(c.line)
	if err != nil {
		t.Fatalf("%q does not split into words: %v", c.line, err)
	}
	var env []string
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	if len(words) >= 3 && words[0] == "cd" && words[2] == "&&" {
		t.Chdir(words[1])
		words = words[3:]
	}
	switch {
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/aggregator":
		checkAggregator(t, c, words[3:], env)
	case len(words) >= 1 && words[0] == "aggregator":
		checkAggregator(t, c, words[1:], env)
	case len(words) >= 2 && words[0] == "go" && words[1] == "test":
		checkGoTest(t, words[2:])
	case len(words) >= 2 && words[0] == "go" && (words[1] == "install" || words[1] == "build"):
		checkGoBuild(t, words[1:])
	case len(words) >= 1 && words[0] == "kcat":
		checkKcat(t, words[1:])
	case len(words) >= 1 && slices.Contains([]string{"docker", "kubectl", "helm"}, words[0]):
		// Needs a cluster, a registry or a container runtime; .ci/deploy-checks
		// and the chart's tests cover what they use.
	default:
		t.Fatalf("%q: no check for this command; add one to TestDocs", c.line)
	}
}

// checkGoBuild checks a `go install` or `go build [-o NAME]` of the
// aggregator: it builds the package named into a temporary directory (an
// install would write to GOPATH/bin) and runs the binary's --version.
func checkGoBuild(t *testing.T, words []string) {
	args := words[1:]
	if words[0] == "build" && len(args) >= 2 && args[0] == "-o" {
		args = args[2:]
	}
	if len(args) != 1 || args[0] != "./cmd/aggregator" {
		t.Fatalf("go %q: want the package ./cmd/aggregator and nothing else", words)
	}
	bin := filepath.Join(t.TempDir(), "aggregator")
	if out, err := exec.Command("go", "build", "-o", bin, args[0]).CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s %s: %v\n%s", bin, args[0], err, out)
	}
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "aggregator ") {
		t.Fatalf("%s --version = %q, %v", bin, out, err)
	}
}

// checkAggregator runs an aggregator command through run. The commands
// that run until Ctrl-C (demo, broker) get a duration or are stopped once
// they are up; run, which needs the broker of the local loop, loads and
// checks its config.
func checkAggregator(t *testing.T, c docCommand, args, env []string) {
	if len(args) == 0 {
		t.Fatal("no subcommand")
	}
	var stdout, stderr lockedBuffer
	ctx := t.Context()
	switch args[0] {
	case "demo":
		args = append(args, "--duration", "2s", "--listen", "127.0.0.1:0")
	case "broker":
		args = append(args, "--port", "0")
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer cancel()
			waitFor(t, ctx, &stdout, regexp.MustCompile(`(Ctrl-C to stop)`))
		}()
	case "verify":
		// Against a kfake cluster with the config's topics, empty: the
		// summary of nothing, exit 0 (the tests of verify_test.go run it
		// on data).
		kc := docsCluster(t)
		env = append(env, "AGGREGATOR_SOURCE_BROKERS="+strings.Join(kc.ListenAddrs(), ","))
		if err := run(ctx, args, env, strings.NewReader(""), &stdout, &stderr); err != nil {
			t.Fatalf("run(%q) = %v\nstderr:\n%s", args, err, stderr.String())
		}
		if !strings.HasPrefix(stdout.String(), `{"summary":`) {
			t.Errorf("%s printed no summary:\n%s", c.line, stdout.String())
		}
		return
	case "run":
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		path := fs.String("config", "", "")
		if err := fs.Parse(args[1:]); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(fs, *path, env)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.ValidateKafka(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := run(ctx, args, env, strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Fatalf("run(%q) = %v\nstderr:\n%s", args, err, stderr.String())
	}
	if c.checkOutput && stdout.String() != c.output {
		t.Errorf("%s prints\n%s\nthe docs show\n%s", c.line, stdout.String(), c.output)
	}
	if args[0] == "demo" && !strings.Contains(stdout.String(), "produced=") {
		t.Errorf("demo printed no summary line:\n%s", stdout.String())
	}
}

// docsCluster is a kfake cluster with the topics of the examples' configs.
func docsCluster(t *testing.T) *kfake.Cluster {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "calls", "calls-windows", "calls-late", "calls-dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// checkGoTest checks that a go test command names packages that exist,
// -run and -bench patterns that match a test or benchmark of each, and
// flags the package's tests define.
func checkGoTest(t *testing.T, args []string) {
	var pkgs []string
	var runPat, benchPat, fuzzPat string
	var custom []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, a)
		case a == "-run" || a == "-bench" || a == "-fuzz":
			if i+1 >= len(args) {
				t.Fatalf("%s without a pattern", a)
			}
			switch a {
			case "-run":
				runPat = args[i+1]
			case "-bench":
				benchPat = args[i+1]
			default:
				fuzzPat = args[i+1]
			}
			i++
		case slices.Contains([]string{"-race", "-short", "-v", "-update"}, a):
		case slices.Contains([]string{"-benchtime", "-count", "-timeout", "-fuzztime", "-tags"}, a):
			i++
		case strings.HasPrefix(a, "-") && strings.Contains(a, "."):
			custom = append(custom, strings.TrimPrefix(a, "-"))
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
		default:
			t.Fatalf("unknown go test argument %q", a)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("no package")
	}
	for _, pkg := range pkgs {
		if pkg == "./..." {
			continue
		}
		src := testSources(t, pkg)
		if fuzzPat != "" {
			checkPattern(t, pkg, src, "Fuzz", fuzzPat)
		} else if benchPat != "" {
			checkPattern(t, pkg, src, "Benchmark", benchPat)
		} else if runPat != "" {
			checkPattern(t, pkg, src, "Test", runPat)
		}
		for _, name := range custom {
			if !strings.Contains(src, `"`+name+`"`) {
				t.Errorf("%s: no test flag %q", pkg, name)
			}
		}
	}
}

// testSources returns the text of a package's _test.go files.
func testSources(t *testing.T, pkg string) string {
	files, err := filepath.Glob(filepath.Join(pkg, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no test files (%v)", pkg, err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	return src.String()
}

// checkPattern checks that a -run or -bench pattern's top level matches a
// function of the package named kind+Name.
func checkPattern(t *testing.T, pkg, src, kind, pattern string) {
	top := strings.Split(pattern, "/")[0]
	re, err := regexp.Compile(top)
	if err != nil {
		t.Fatalf("%s pattern %q: %v", kind, pattern, err)
	}
	for _, m := range regexp.MustCompile(`(?m)^func (`+kind+`\w+)\(`).FindAllStringSubmatch(src, -1) {
		if re.MatchString(m[1]) {
			return
		}
	}
	t.Errorf("%s: no %s function matches %q", pkg, kind, pattern)
}

// checkKcat checks a kcat command has a broker list and, to consume, -e
// (exit at the end of the topic): without them it fails or never returns.
func checkKcat(t *testing.T, args []string) {
	if !slices.Contains(args, "-b") {
		t.Error("kcat without -b BROKERS")
	}
	if !slices.Contains(args, "-t") {
		t.Error("kcat without -t TOPIC")
	}
	if slices.Contains(args, "-C") && !slices.Contains(args, "-e") {
		t.Error("kcat -C without -e: it waits for more records forever")
	}
	if !slices.Contains(args, "-C") && !slices.Contains(args, "-P") {
		t.Error("kcat without -C or -P")
	}
}

// TestDocsLinks: every relative link of README.md and docs/*.md names a
// file of the repository and, with #anchor, a heading of that file.
func TestDocsLinks(t *testing.T) {
	t.Chdir("../..")
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, file := range append([]string{"README.md"}, files...) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(text), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") {
				continue
			}
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
			}
			body, err := os.ReadFile(path)
			if err != nil {
				if _, serr := os.Stat(path); serr == nil { // a directory
					continue
				}
				t.Errorf("%s: link %s: %v", file, m[1], err)
				continue
			}
			if anchor != "" && !slices.Contains(headingAnchors(string(body)), anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", file, m[1], path, anchor)
			}
		}
	}
}

// TestRepoCitesItself: the repository stands on its own. No file of it
// (third_party aside, and binary files) cites a document a reader of the
// repository does not have: an upper-case specification word or a
// section sign. Comments, messages and pages cite the manual instead, as
// docs/<page>.md#<heading>, and every such citation names a page of
// docs/ and, with #<heading>, a heading of that page, as TestDocsLinks
// checks the pages' own links.
func TestRepoCitesItself(t *testing.T) {
	t.Chdir("../..")
	outside := regexp.MustCompile(`\bS[P]EC\b|\x{A7}`)
	cite := regexp.MustCompile(`(?:^|[^\w./-])docs/([\w-]+\.md)(?:#([\w-]+))?`)
	anchors := map[string][]string{}
	var files int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == ".git" || path == "third_party" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(body, 0) >= 0 {
			return nil // binary
		}
		files++
		for i, line := range strings.Split(string(body), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d: %q cites a document outside the repository; cite the manual (docs/) instead: %s", path, i+1, m, line)
			}
			for _, m := range cite.FindAllStringSubmatch(line, -1) {
				page, heading := filepath.Join("docs", m[1]), m[2]
				have, ok := anchors[page]
				if !ok {
					md, err := os.ReadFile(page)
					if err != nil {
						t.Errorf("%s:%d: cites %s: %v", path, i+1, page, err)
						anchors[page] = nil
						continue
					}
					have = headingAnchors(string(md))
					anchors[page] = have
				}
				if heading != "" && have != nil && !slices.Contains(have, heading) {
					t.Errorf("%s:%d: cites %s#%s: %s has no such heading", path, i+1, page, heading, page)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("read %d files, want the repository's", files)
	}
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings:
// lower case, spaces to hyphens, punctuation other than - and _ dropped.
func headingAnchors(md string) []string {
	var anchors []string
	inFence := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		title, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "#")
		if inFence || !ok {
			continue
		}
		title = strings.TrimSpace(strings.TrimLeft(title, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchors = append(anchors, b.String())
	}
	return anchors
}

// TestDocsConfigs loads every YAML block marked "docs-test: config" in
// README.md and docs/*.md as `run` would: parsed, defaulted and checked,
// the Kafka keys included; a block whose marker says file=PATH must be
// that file, byte for byte.
func TestDocsConfigs(t *testing.T) {
	t.Chdir("../..")
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	blockRE := regexp.MustCompile("(?ms)^<!-- docs-test: config([^\n]*)-->\n```yaml\n(.*?)^```")
	fileRE := regexp.MustCompile(`\bfile=(\S+)`)
	n := 0
	for _, file := range append([]string{"README.md"}, files...) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range blockRE.FindAllStringSubmatch(string(text), -1) {
			n++
			if f := fileRE.FindStringSubmatch(m[1]); f != nil { // the block is that file, byte for byte
				if want, err := os.ReadFile(f[1]); err != nil || string(want) != m[2] {
					t.Errorf("%s: config block %d is not %s (%v):\n%s", file, n, f[1], err, m[2])
				}
			}
			cfg, err := config.Parse([]byte(m[2]), nil)
			if err == nil {
				err = cfg.ValidateKafka()
			}
			if err != nil {
				t.Errorf("%s: config block %d: %v", file, n, err)
			}
		}
	}
	if n == 0 {
		t.Error("no config block marked docs-test: config in README.md or docs/")
	}
}
