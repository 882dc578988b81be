package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestHelp: every subcommand's --help starts with its synopsis, a one-line
// description and an example that TestDocs-style use would accept (the
// command exists), then the flags; the top-level usage and
// docs/commands.md name every flag of broker.
func TestHelp(t *testing.T) {
	for name, h := range commandHelp {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), []string{name, "--help"}, nil, nil, &stdout, &stderr); err != nil {
				t.Fatalf("%s --help = %v", name, err)
			}
			got := stderr.String()
			for _, want := range []string{"Usage: " + h.synopsis + "\n\n" + h.summary + "\n\nExample:\n  " + h.example + "\n\nFlags:\n", "docs/"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s --help:\n%s\nwant it to contain %q", name, got, want)
				}
			}
			if !strings.HasPrefix(h.example, "aggregator "+name) || strings.Contains(h.summary, "\n") {
				t.Errorf("%s: example %q must run %s; summary %q must be one line", name, h.example, name, h.summary)
			}
		})
	}
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"--help"}, nil, nil, &stdout, &stdout); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"broker [--port 9092] [--topics calls] [--partitions 1] [--data-dir DIR]", "demo", "run", "replay", "verify", "validate"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("aggregator --help:\n%s\nwant %q", stdout.String(), want)
		}
	}
	// Every flag of broker, as broker --help lists them, in the top-level
	// usage and in docs/commands.md.
	var brokerHelp bytes.Buffer
	if err := run(t.Context(), []string{"broker", "--help"}, nil, nil, &brokerHelp, &brokerHelp); err != nil {
		t.Fatal(err)
	}
	commands, err := os.ReadFile("../../docs/commands.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(brokerHelp.String(), -1)
	if len(flags) < 6 {
		t.Fatalf("broker --help lists %d flags, want 6 or more:\n%s", len(flags), brokerHelp.String())
	}
	for _, f := range flags {
		if !strings.Contains(stdout.String(), "[--"+f[1]) {
			t.Errorf("aggregator --help does not name broker's --%s:\n%s", f[1], stdout.String())
		}
		if !strings.Contains(string(commands), "--"+f[1]) {
			t.Errorf("docs/commands.md does not name broker's --%s", f[1])
		}
	}
}
