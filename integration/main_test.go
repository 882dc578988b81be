package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the aggregator built once for the tests that run the process.
var binary, buildErr = "", error(nil)

func TestMain(m *testing.M) {
	if path := os.Getenv(plainConsumerEnv); path != "" { // BenchmarkCatchup's plain consumer
		os.Exit(plainConsumer(path))
	}
	dir, err := os.MkdirTemp("", "aggregator-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "aggregator")
	if out, err := exec.Command("go", "build", "-o", binary, "../cmd/aggregator").CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needBinary fails the test if the binary did not build.
func needBinary(t testing.TB) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}
