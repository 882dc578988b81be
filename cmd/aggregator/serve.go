package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

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
	srv, err := serveHTTP(cfg.HTTP.Listen, reg, pipe.Ready) // listens before returning, so a bad address fails here
	if err != nil {
		pipe.Close()
		return err
	}
	log.Info().Str("version", version).Strs("topics", cfg.Source.Topics).Str("group", cfg.Source.Group).Msg("consuming")
	runErr := pipe.Run(ctx) // returns nil once ctx is canceled and the batch in hand is done
	stop()                  // from here a second SIGTERM kills the process at once
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
