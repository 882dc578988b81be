package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
)

// serve is `aggregator run`: it consumes until SIGINT or SIGTERM, then
// drains. getenv is for the process settings beside the config
// (CONTAINER_MEMORY_LIMIT).
func serve(ctx context.Context, cfg config.Config, getenv func(string) string, stdout io.Writer) error {
	if err := cfg.ValidateKafka(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newLogger(cfg.Log, stdout)
	if err := setMemoryLimit(getenv, log); err != nil {
		return err
	}
	reg := newRegistry()
	pipe, err := consumer.New(cfg, log, reg)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	srv, err := serveHTTP(cfg.HTTP, reg, pipe.Serving) // listens before returning, so a bad address fails here
	if err != nil {
		pipe.Close()
		return err
	}
	log.Info().Str("version", version).Strs("brokers", cfg.Source.Brokers).Str("group", cfg.Source.Group).
		Strs("topics", cfg.Source.Topics).Str("delivery", cfg.Delivery).Str("results_topic", cfg.Sink.ResultsTopic).
		Str("late_topic", cfg.Sink.LateTopic).Msg("starting")
	for _, w := range cfg.Warnings() { // validate prints the same
		log.Warn().Str("warning", w).Msg("config accepted with a warning")
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		logReady(watchCtx, log, pipe.Serving, reg, metricsURL(srv.Addr))
	}()
	runErr := pipe.Run(ctx) // returns nil once ctx is canceled and the batch in hand is done
	stopWatch()
	<-watched
	stop() // from here a second SIGTERM kills the process at once
	// shutdown_timeout stays below the pod's terminationGracePeriodSeconds.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	drainErr := pipe.Drain(dctx)
	err = errors.Join(runErr, drainErr, srv.Shutdown(dctx))
	if err == nil {
		log.Info().Msg("stopped")
	}
	return err
}

// readyCheck is how often logReady looks at readiness.
const readyCheck = 100 * time.Millisecond

// logReady writes one info line the first time the service is ready: the
// partitions it holds, the changelog records restored so far and where
// the metrics are. Later changes have lines of their own (each rebalance,
// the brokers going silent and answering again); /readyz and
// aggregator_ready follow every restore. It returns then, or when ctx
// ends.
func logReady(ctx context.Context, log zerolog.Logger, ready func() bool, reg prometheus.Gatherer, url string) {
	t := time.NewTicker(readyCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ready() {
			partitions, restored := readyFigures(reg)
			log.Info().Int("partitions", partitions).Int64("restored_records", restored).Str("metrics_url", url).Msg("ready")
			return
		}
	}
}

// readyFigures reads from the metrics the partitions assigned (one
// watermark gauge each) and the changelog records restored.
func readyFigures(reg prometheus.Gatherer) (partitions int, restored int64) {
	families, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, f := range families {
		switch f.GetName() {
		case "aggregator_partition_watermark_seconds":
			partitions = len(f.GetMetric())
		case "aggregator_restored_records_total":
			for _, m := range f.GetMetric() {
				restored += int64(m.GetCounter().GetValue())
			}
		}
	}
	return partitions, restored
}
