package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
)

func TestSASLMechanismSelected(t *testing.T) {
	tests := map[string]struct{ mechanism, want string }{
		"plain":      {"PLAIN", "PLAIN"},
		"scram 256":  {"SCRAM-SHA-256", "SCRAM-SHA-256"},
		"scram 512":  {"SCRAM-SHA-512", "SCRAM-SHA-512"},
		"lower case": {"scram-sha-512", "SCRAM-SHA-512"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			mech, err := cluster.SASLMechanism(config.SASL{Mechanism: tt.mechanism, Username: "u", Password: "p"})
			if err != nil {
				t.Fatalf("SASLMechanism(%q) = %v", tt.mechanism, err)
			}
			if got := mech.Name(); got != tt.want {
				t.Errorf("SASLMechanism(%q).Name() = %q, want %q", tt.mechanism, got, tt.want)
			}
		})
	}
}

func TestSASLMechanismErrorsKeepSecrets(t *testing.T) {
	tests := map[string]struct {
		sasl config.SASL
		want string
	}{
		"unknown mechanism": {config.SASL{Mechanism: "GSSAPI", Password: "hunter2"}, `source.sasl.mechanism "GSSAPI"`},
		"missing file":      {config.SASL{Mechanism: "PLAIN", PasswordFile: "/nonexistent/pw"}, "source.sasl.password_file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := cluster.SASLMechanism(tt.sasl)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("SASLMechanism(%s) = %v, want an error containing %q and no password", name, err, tt.want)
			}
		})
	}
}

// TestClientOptsSASL authenticates against a kfake broker with SASL, one
// user per mechanism.
func TestClientOptsSASL(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "alice", "alice-pw"),
		kfake.Superuser("SCRAM-SHA-256", "bob", "bob-pw"),
		kfake.Superuser("SCRAM-SHA-512", "carol", "carol-pw"),
	)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer kc.Close()
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("carol-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		sasl   config.SASL
		wantOK bool
	}{
		"plain":               {config.SASL{Mechanism: "PLAIN", Username: "alice", Password: "alice-pw"}, true},
		"scram 256":           {config.SASL{Mechanism: "SCRAM-SHA-256", Username: "bob", Password: "bob-pw"}, true},
		"scram 512 from file": {config.SASL{Mechanism: "SCRAM-SHA-512", Username: "carol", PasswordFile: pwFile}, true},
		// config.Parse put the file's content at start in Password; the
		// file, rotated since, wins.
		"rotated password file": {config.SASL{Mechanism: "SCRAM-SHA-512", Username: "carol", Password: "old-pw", PasswordFile: pwFile}, true},
		"wrong password":        {config.SASL{Mechanism: "SCRAM-SHA-256", Username: "bob", Password: "nope"}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := ping(t, config.Source{Brokers: kc.ListenAddrs(), SASL: tt.sasl})
			if (err == nil) != tt.wantOK {
				t.Errorf("Ping as %s/%s = %v, want success %v", tt.sasl.Mechanism, tt.sasl.Username, err, tt.wantOK)
			}
		})
	}
}
