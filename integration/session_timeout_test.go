package integration

import (
	"strings"
	"testing"
	"time"
)

// A source.session_timeout below the brokers' group.min.session.timeout.ms
// (6s in kfake, as in Kafka) is a config error the brokers find: the
// service exits 2 naming the key and the bounds the brokers describe
// (kfake: 6s to 5m), instead of
// retrying a join that cannot succeed.
func TestSessionTimeoutBelowBrokerMinimum(t *testing.T) {
	kc := newCluster(t, 1)
	path := writeConfig(t, callsConfig(tumbling), kc.ListenAddrs())
	b := startBinary(t, path, "AGGREGATOR_SOURCE_SESSION_TIMEOUT=2s")
	code, _ := b.wait(t, 30*time.Second)
	out := b.out.String()
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, out)
	}
	for _, want := range []string{"source.session_timeout", `"2s"`, "INVALID_SESSION_TIMEOUT", "the brokers allow 6s to 5m"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
}
