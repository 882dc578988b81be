package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// brokerFlags are the options of `aggregator broker`.
type brokerFlags struct {
	port       int
	topics     []string
	partitions int
	dataDir    string
	autoCreate bool
	// registryPort: serve an in-memory Schema Registry there too; -1 none.
	registryPort int
}

func parseBrokerFlags(args []string, stderr io.Writer) (brokerFlags, error) {
	var f brokerFlags
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.IntVar(&f.port, "port", 9092, "TCP `port` on 127.0.0.1 (0: any free port)")
	topics := fs.String("topics", "calls", "comma-separated `names` of the topics to create at start (the service creates its output topics; others are created on first use)")
	fs.IntVar(&f.partitions, "partitions", 1, "partitions of each topic in --topics")
	fs.IntVar(&f.registryPort, "schema-registry-port", -1, "also serve an in-memory Schema Registry (franz-go's srfake) on 127.0.0.1:`port` (0: any free port; -1: none)")
	fs.StringVar(&f.dataDir, "data-dir", "", "keep the topics in `DIR` across restarts (default: in memory, gone at exit)")
	fs.BoolVar(&f.autoCreate, "auto-create", true, "create a topic, with --partitions partitions, when a client that asks for it (a producer such as kcat -P) first uses it, as Kafka's auto.create.topics.enable; --auto-create=false turns it off")
	if err := parseFlags(fs, args, stderr); err != nil {
		return f, err
	}
	for t := range strings.SplitSeq(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			f.topics = append(f.topics, t)
		}
	}
	switch {
	case f.port < 0 || f.port > 65535:
		return f, fmt.Errorf("%w: broker: --port %d: want 0 to 65535", errUsage, f.port)
	case f.registryPort < -1 || f.registryPort > 65535:
		return f, fmt.Errorf("%w: broker: --schema-registry-port %d: want -1 (none) or 0 to 65535", errUsage, f.registryPort)
	case f.partitions < 1:
		return f, fmt.Errorf("%w: broker: --partitions %d: must be at least 1", errUsage, f.partitions)
	}
	return f, nil
}

// brokerCmd is `aggregator broker`: a one-broker Kafka cluster (franz-go's
// kfake, as in the demo) on a fixed loopback port, with topics from the
// flags, until SIGINT or SIGTERM; with --auto-create (the default) a
// producer's first write to another topic creates it. It is the local loop
// of README's "Run it locally": run against it, kcat to produce and read. It speaks the
// Kafka protocol with transactions, so run's exactly_once works, but it is
// not a production broker: one process, no replication.
func brokerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseBrokerFlags(args, stderr)
	if err != nil {
		return ignoreHelp(err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(f.port), kfake.DefaultNumPartitions(f.partitions)}
	if f.autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if len(f.topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(f.partitions), f.topics...))
	}
	if f.dataDir != "" {
		opts = append(opts, kfake.DataDir(f.dataDir), kfake.WithLogger(recoveryLogger{stderr}))
	}
	kc, err := kfake.NewCluster(opts...)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("broker: %w\n  another process is listening on port %d (a Kafka broker?); pick another with --port", err, f.port)
		}
		return fmt.Errorf("broker: %w", err)
	}
	defer kc.Close()
	topics := "no topics"
	if len(f.topics) > 0 {
		topics = fmt.Sprintf("topics %s (%d partitions each)", strings.Join(f.topics, ", "), f.partitions)
	}
	switch {
	case f.autoCreate && len(f.topics) == 0:
		topics = "topics created on first use"
	case f.autoCreate:
		topics += "; others are created on first use"
	}
	fmt.Fprintf(stdout, "broker: Kafka (kfake) at %s, %s; Ctrl-C to stop\n", kc.ListenAddrs()[0], topics)
	if f.registryPort >= 0 {
		stopRegistry, err := serveRegistry(f.registryPort, stdout)
		if err != nil {
			return err
		}
		defer stopRegistry()
	}
	<-ctx.Done()
	return nil
}

// recoveryLogger prints kfake's crash-recovery lines (the transactions a
// restart from --data-dir aborted, see third_party/kfake) and drops the
// rest of its log.
type recoveryLogger struct{ w io.Writer }

func (l recoveryLogger) Logf(_ kfake.LogLevel, format string, args ...any) {
	if strings.HasPrefix(format, "crash recovery:") {
		fmt.Fprintf(l.w, "broker: "+format+"\n", args...)
	}
}

// serveRegistry serves srfake, an in-memory Schema Registry speaking the
// real REST API (schemas are gone at exit), on a loopback port, for the
// registry formats' local loop; the returned func stops it.
func serveRegistry(port int, stdout io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("broker: schema registry: %w", err)
	}
	srv := &http.Server{Handler: srfake.NewRegistry().Handler(), ReadHeaderTimeout: 5 * time.Second}
	var serving sync.WaitGroup
	serving.Go(func() { _ = srv.Serve(ln) }) // returns ErrServerClosed once stopped
	fmt.Fprintf(stdout, "broker: Schema Registry (srfake) at http://%s\n", ln.Addr())
	return func() {
		_ = srv.Close()
		serving.Wait()
	}, nil
}
