// Command aggregator computes Flink-exact event-time window aggregates over
// Kafka topics. See README.md and docs/; `aggregator --help` lists the
// subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	_ "time/tzdata" // time zones work in a scratch image too

	"github.com/rs/zerolog"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errUsage is returned for bad command-line usage; main exits 2 on it.
var errUsage = errors.New("usage")

func main() {
	err := run(context.Background(), os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aggregator: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// exitCode maps an error to the exit status of docs/commands.md: 2 for bad usage or
// config, 1 for a runtime failure.
func exitCode(err error) int {
	switch {
	case errors.Is(err, config.ErrInvalid), errors.Is(err, errUsage),
		errors.Is(err, cluster.ErrTopicsNotPermitted), errors.Is(err, cluster.ErrTopicsMissing),
		errors.Is(err, cluster.ErrChangelogMismatch):
		return 2
	}
	return 1
}

const usage = `aggregator computes event-time window aggregates over Kafka topics.

Usage:
  aggregator demo [flags]                       embedded Kafka, synthetic events, live view
  aggregator run --config FILE                  the service
  aggregator replay --config FILE [--input FILE] [--kcat] [--no-flush]
                                                the engine on recorded records, JSON lines out
  aggregator verify --config FILE [--from TIME] [--to TIME] [--max-diffs N]
                                                recompute the input, compare with the outputs
  aggregator validate --config FILE [--for run|replay]
                                                print the effective config, exit 2 if invalid
  aggregator plan --config FILE [--timeout 2m]  what the config would do to the state in the changelog,
                                                changing nothing; exit 2 if refused
  aggregator broker [--port 9092] [--topics calls] [--partitions 1] [--data-dir DIR] [--auto-create=false]
                  [--schema-registry-port -1]   a local Kafka (kfake) for trying run, and a Schema Registry
  aggregator --version

Run "aggregator COMMAND --help" for a command's flags and an example.
The manual is in docs/ (docs/README.md lists its pages).
`

// commandHelp is the head of each subcommand's --help: what it does, in one
// line, and an example; the flags follow.
var commandHelp = map[string]struct{ synopsis, summary, example string }{
	"demo": {"aggregator demo [flags]",
		"Runs the pipeline against an in-process Kafka with synthetic calls and shows the results live.",
		"aggregator demo --window session --rate 100"},
	"run": {"aggregator run --config FILE",
		"The service: consumes the input topics, computes the windows and produces results, late events and dead letters until SIGTERM.",
		"aggregator run --config examples/local.yaml"},
	"replay": {"aggregator replay --config FILE [--input FILE] [--kcat] [--no-flush]",
		"Runs the same engine on recorded records, without Kafka, and prints results, late events and dead letters as JSON lines.",
		"aggregator replay --config examples/calls.yaml --input examples/calls.csv"},
	"verify": {"aggregator verify --config FILE [--from TIME] [--to TIME] [--max-diffs N]",
		"Reads the input topics and the results, late and dead-letter topics (read_committed, no group, no writes), recomputes the windows as replay --kcat does and compares; prints a summary and the unexplained differences as JSON lines; exits 0 when there is none, 1 when there is (docs/verify.md).",
		"aggregator verify --config examples/local.yaml --from -24h"},
	"validate": {"aggregator validate --config FILE [--for run|replay]",
		"Prints the effective config with every default; exits 2 naming every error, each with its key, if it is invalid.",
		"aggregator validate --config examples/calls.yaml"},
	"plan": {"aggregator plan --config FILE [--timeout 2m]",
		"Reads every state partition's changelog (read_committed, without joining the group) and prints what the config would do there: nothing, run settings, a new generation and its cut-over, or the refusal (exit 2). Changes nothing.",
		"aggregator plan --config examples/local.yaml"},
	"broker": {"aggregator broker [flags]",
		"A one-broker Kafka (kfake, with transactions) on 127.0.0.1 for trying run locally; creates topics on first use. Not for production.",
		"aggregator broker --partitions 3 --data-dir /tmp/kafka"},
}

// run is main without the process: tests call it directly. env holds the
// environment as os.Environ returns it ("NAME=value"): the AGGREGATOR_*
// overrides, and the names that must all be known.
func run(ctx context.Context, args []string, env []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "-version", "--version", "version":
		fmt.Fprintf(stdout, "aggregator %s\n", version)
		return nil
	case "validate":
		return validateCmd(rest, env, stdout, stderr)
	case "replay":
		return replayCmd(ctx, rest, env, stdin, stdout, stderr)
	case "verify":
		return verifyCmd(ctx, rest, env, stdout, stderr)
	case "run":
		return runCmd(ctx, rest, env, stdout, stderr)
	case "plan":
		return planCmd(ctx, rest, env, stdout, stderr)
	case "demo":
		return demo(ctx, rest, stdin, stdout, stderr)
	case "broker":
		return brokerCmd(ctx, rest, stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

// parseFlags parses a subcommand's flags; --help prints them and returns
// flag.ErrHelp, which the caller turns into a clean exit.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if h, ok := commandHelp[fs.Name()]; ok {
		fs.Usage = func() {
			fmt.Fprintf(stderr, "Usage: %s\n\n%s\n\nExample:\n  %s\n\nFlags:\n", h.synopsis, h.summary, h.example)
			fs.PrintDefaults()
			fmt.Fprintln(stderr, "\nThe manual: docs/README.md; the config keys: docs/configuration.md.")
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, fs.Name(), fs.Arg(0))
	}
	return nil
}

// loadConfig loads --config, which every command but demo needs, with the
// AGGREGATOR_* overrides of env; an AGGREGATOR_* variable that overrides
// no key is an error.
func loadConfig(fs *flag.FlagSet, path string, env []string) (config.Config, error) {
	if path == "" {
		return config.Config{}, fmt.Errorf("%w: %s: --config FILE is required", errUsage, fs.Name())
	}
	if err := config.CheckEnv(env); err != nil {
		return config.Config{}, err
	}
	return config.Load(path, lookupEnv(env))
}

// lookupEnv is getenv over env; the last entry of a name wins.
func lookupEnv(env []string) func(string) string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		vars[name] = value
	}
	return func(name string) string { return vars[name] }
}

// validateCmd checks a config for the command that will use it: by
// default everything run needs (the Kafka keys) plus an http.listen that
// probes and scrapes can reach; --for replay only what replay needs.
func validateCmd(args []string, env []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("config", "", "config `FILE` (YAML, docs/configuration.md)")
	forCmd := fs.String("for", "run", "check what `COMMAND` needs: run (the Kafka keys, and an http.listen other hosts can reach) or replay")
	if err := parseFlags(fs, args, stderr); err != nil {
		return ignoreHelp(err)
	}
	if *forCmd != "run" && *forCmd != "replay" {
		return fmt.Errorf("%w: validate: --for %q: want run or replay", errUsage, *forCmd)
	}
	cfg, err := loadConfig(fs, *path, env)
	if err != nil {
		return err
	}
	if *forCmd == "run" {
		if err := cfg.ValidateKafka(); err != nil {
			return err
		}
		for _, w := range cfg.Warnings() { // run logs the same at its start
			fmt.Fprintf(stderr, "aggregator: warning: %s\n", w)
		}
	}
	_, err = stdout.Write(cfg.YAML())
	return err
}

func runCmd(ctx context.Context, args []string, env []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	path := fs.String("config", "", "config `FILE` (YAML, docs/configuration.md); AGGREGATOR_* variables override its keys")
	if err := parseFlags(fs, args, stderr); err != nil {
		return ignoreHelp(err)
	}
	cfg, err := loadConfig(fs, *path, env)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, lookupEnv(env), stdout)
}

// ignoreHelp makes --help a success.
func ignoreHelp(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// newLogger builds the zerolog logger the config asks for. Every line has a
// millisecond timestamp; the console format (for humans) has colours only
// when w is a terminal.
func newLogger(cfg config.Log, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(strings.ToLower(cfg.Level))
	if err != nil || cfg.Level == "" {
		level = zerolog.InfoLevel
	}
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: !isTerminal(w), FormatTimestamp: consoleTime}
	}
	return zerolog.New(w).Level(level).Hook(msTimestamp{})
}

// logTimeLayout is RFC 3339 with milliseconds. zerolog's own timestamp
// has whole seconds unless the package-level TimeFieldFormat is changed.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// msTimestamp adds the time field, in logTimeLayout, to every line.
type msTimestamp struct{}

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format(logTimeLayout))
}

// consoleTime shows a line's time of day to the millisecond.
func consoleTime(v any) string {
	s := fmt.Sprint(v)
	t, err := time.Parse(logTimeLayout, s)
	if err != nil {
		return s
	}
	return t.Format("15:04:05.000")
}
