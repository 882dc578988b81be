package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSessionExpiryAnswersPendingJoin: a member of a stable group joins
// again and waits for the other, slow to join, past its own session; the
// broker removes it, and answers its JoinGroup UNKNOWN_MEMBER_ID at once
// (third_party/kfake/PATCHES.md), as Kafka does, so that its client joins
// again. Unanswered, the request waited past the rebalance (which
// completed without the member) until the client gave up on it: in
// TestPairwise, an instance slowed by a loaded machine lost its session
// during a rejoin and was out of the group for a minute.
func TestSessionExpiryAnswersPendingJoin(t *testing.T) {
	t.Parallel() // its own broker
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	const group = "slow-join"
	ctx := context.Background()
	join := func(cl *kgo.Client, member string, session time.Duration, meta byte) (*kmsg.JoinGroupResponse, error) {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = int32(session.Milliseconds()), 10_000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 0, 0, 0, 0, 0, 0, meta}
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && resp.ErrorCode == kerr.MemberIDRequired.Code {
			req.MemberID = resp.MemberID
			resp, err = req.RequestWith(ctx, cl)
		}
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		return resp, err
	}
	sync := func(cl *kgo.Client, member string, gen int32) {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.MemberID, req.Generation, req.ProtocolType = group, member, gen, kmsg.StringPtr("consumer")
		req.Protocol = kmsg.StringPtr("range")
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			t.Fatalf("SyncGroup of %s: %v", member, err)
		}
	}
	a, b := client(t, kc.ListenAddrs()), client(t, kc.ListenAddrs()) // one each: a JoinGroup waits on its connection
	// a alone: stable at generation 1.
	ra, err := join(a, "", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	sync(a, ra.MemberID, ra.Generation)
	// b joins; a joins again: both at generation 2, b's session (1s)
	// counted from the answers.
	joinedB := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		rb, err := join(b, "", time.Second, 0)
		if err != nil {
			t.Error(err)
		}
		joinedB <- rb
	}()
	adm := kadm.NewClient(a)
	waitFor(t, waitTimeout, "b's join waiting for a's", func() bool { // the group preparing a rebalance
		gs, err := adm.DescribeGroups(ctx, group)
		return err == nil && gs[group].State == "PreparingRebalance"
	})
	if ra, err = join(a, ra.MemberID, 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	rb := <-joinedB
	if rb == nil {
		t.FailNow()
	}
	sync(a, ra.MemberID, ra.Generation)
	sync(b, rb.MemberID, rb.Generation)
	// b joins again with other metadata (another subscription: a
	// rebalance) and waits for a, which does not come: its session ends
	// first.
	began := time.Now()
	_, err = join(b, rb.MemberID, time.Second, 1)
	if waited := time.Since(began); !errors.Is(err, kerr.UnknownMemberID) || waited > 5*time.Second {
		t.Errorf("the JoinGroup of a member whose session ended while it waited = %v after %v, want UNKNOWN_MEMBER_ID within its session (1s) and a little", err, waited.Round(time.Millisecond))
	}
}
