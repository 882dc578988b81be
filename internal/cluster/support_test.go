package cluster_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
)

// A cluster that lists the requests of transactions but refuses a
// transaction coordinator has none either.
func TestCheckSupportCoordinatorRefused(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kc.ControlKey(kmsg.FindCoordinator.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := r.(*kmsg.FindCoordinatorRequest)
		if req.CoordinatorType != 1 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
		for _, key := range req.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.ErrorCode = key, kerr.InvalidRequest.Code
			msg := "type code 1 is only supported in Premium or Dedicated sku"
			c.ErrorMessage = &msg
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp, nil, true
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = cluster.CheckSupport(t.Context(), kadm.NewClient(cl), config.Config{Delivery: "exactly_once", Sink: config.Sink{Compression: "lz4"}}, "g-txn")
	if !errors.Is(err, cluster.ErrUnsupported) || !strings.Contains(err.Error(), "Premium or Dedicated") || !strings.Contains(err.Error(), "delivery: at_least_once") {
		t.Errorf("CheckSupport(coordinator refused) = %v, want ErrUnsupported with the brokers' message and delivery: at_least_once", err)
	}
}

// TestCheckSupport refuses what a cluster cannot do, naming what would
// work, and passes what it can.
func TestCheckSupport(t *testing.T) {
	oldProduce := kversion.Stable()
	oldProduce.SetMaxKeyVersion(0, 6) // Produce v6: Kafka before 2.1
	tests := map[string]struct {
		opts        []kfake.Opt
		delivery    string
		compression string
		want        string // "" = supported
	}{
		"transactions":                   {nil, "exactly_once", "lz4", ""},
		"no transactions, exactly_once":  {[]kfake.Opt{kfake.NoTransactions()}, "exactly_once", "lz4", "set delivery: at_least_once"},
		"no transactions, at_least_once": {[]kfake.Opt{kfake.NoTransactions()}, "at_least_once", "lz4", ""},
		"zstd on Produce v6":             {[]kfake.Opt{kfake.MaxVersions(oldProduce)}, "at_least_once", "zstd", "set sink.compression: lz4"},
		"zstd on a recent broker":        {nil, "exactly_once", "zstd", ""},
		"gzip on Produce v6":             {[]kfake.Opt{kfake.MaxVersions(oldProduce)}, "at_least_once", "gzip", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer kc.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			cfg := config.Config{Delivery: tt.delivery, Sink: config.Sink{Compression: tt.compression}}
			err = cluster.CheckSupport(t.Context(), kadm.NewClient(cl), cfg, "g-txn")
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckSupport(%s, %s) = %v, want nil", tt.delivery, tt.compression, err)
			case tt.want != "" && (!errors.Is(cluster.Permanent(err), cluster.ErrUnsupported) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckSupport(%s, %s) = %v, want a permanent ErrUnsupported saying %q", tt.delivery, tt.compression, err, tt.want)
			}
		})
	}
}
