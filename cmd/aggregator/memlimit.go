package main

import (
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/rs/zerolog"
)

// memoryLimitShare is the part of the container's memory limit the Go
// runtime is held to: the rest covers what the garbage collector does not
// see (stacks, the binary, kernel buffers) and its overshoot.
const memoryLimitShare = 0.9

// memoryLimit returns the Go memory limit for a container whose memory
// limit, in bytes, the Helm chart passes as CONTAINER_MEMORY_LIMIT (the
// downward API's limits.memory): 90% of it. It returns 0, no limit to
// set, when GOMEMLIMIT is set (the runtime obeys that already) or
// CONTAINER_MEMORY_LIMIT is unset; an unreadable one is an error.
func memoryLimit(getenv func(string) string) (int64, error) {
	text := getenv("CONTAINER_MEMORY_LIMIT")
	if getenv("GOMEMLIMIT") != "" || text == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(text, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("CONTAINER_MEMORY_LIMIT = %q: want the container's memory limit in bytes", text)
	}
	return int64(float64(limit) * memoryLimitShare), nil
}

// setMemoryLimit applies memoryLimit and logs it.
func setMemoryLimit(getenv func(string) string, log zerolog.Logger) error {
	limit, err := memoryLimit(getenv)
	if err != nil || limit == 0 {
		return err
	}
	debug.SetMemoryLimit(limit)
	log.Info().Int64("go_memory_limit_bytes", limit).Msg("Go memory limit set to 90% of CONTAINER_MEMORY_LIMIT")
	return nil
}
