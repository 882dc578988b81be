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

// TestSessionExpiryAnswersPendingJoin: how the broker treats a member
// whose JoinGroup waits for a rebalance, as Kafka's coordinator does
// (third_party/kfake/PATCHES.md). Removed while it waits (a LeaveGroup
// naming it), its JoinGroup is answered UNKNOWN_MEMBER_ID at once, so
// that its client joins again; unanswered, the request waited until the
// client gave up on it (in TestPairwise an instance was out of the group
// for a minute). Waiting past its own session for a slower member, it is
// kept alive, and its JoinGroup is answered when the rebalance completes
// without the slow member.
func TestSessionExpiryAnswersPendingJoin(t *testing.T) {
	t.Parallel() // its own broker
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	const group = "slow-join"
	ctx := context.Background()
	// join joins as member (a new one when ""), with the given session
	// and rebalance timeouts; named, when non-nil, learns the member ID
	// before the join that waits.
	join := func(cl *kgo.Client, member string, session, rebalance time.Duration, meta byte, named chan<- string) (*kmsg.JoinGroupResponse, error) {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = int32(session.Milliseconds()), int32(rebalance.Milliseconds())
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 0, 0, 0, 0, 0, 0, meta}
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && resp.ErrorCode == kerr.MemberIDRequired.Code {
			req.MemberID = resp.MemberID
			if named != nil {
				named <- req.MemberID
			}
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
	adm := kadm.NewClient(client(t, kc.ListenAddrs()))
	rebalancing := func(what string) {
		waitFor(t, waitTimeout, what, func() bool {
			gs, err := adm.DescribeGroups(ctx, group)
			return err == nil && gs[group].State == "PreparingRebalance"
		})
	}
	a, b := client(t, kc.ListenAddrs()), client(t, kc.ListenAddrs()) // one each: a JoinGroup waits on its connection
	const long = 30 * time.Second
	// a alone: stable at generation 1.
	ra, err := join(a, "", long, 10*time.Second, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	sync(a, ra.MemberID, ra.Generation)

	// b joins and waits for a; a LeaveGroup naming b removes it: b's
	// JoinGroup is answered UNKNOWN_MEMBER_ID at once.
	bID := make(chan string, 1)
	answered := make(chan error, 1)
	go func() {
		_, err := join(b, "", long, 10*time.Second, 0, bID)
		answered <- err
	}()
	member := <-bID
	rebalancing("b's join waiting for a's")
	began := time.Now()
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = group
	leave.Members = []kmsg.LeaveGroupRequestMember{{MemberID: member}}
	if _, err := leave.RequestWith(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; !errors.Is(err, kerr.UnknownMemberID) || time.Since(began) > 5*time.Second {
		t.Errorf("the JoinGroup of a member removed while it waited = %v after %v, want UNKNOWN_MEMBER_ID at once", err, time.Since(began).Round(time.Millisecond))
	}
	// a joins again, alone (its rebalance timeout now 2s): generation 2.
	if ra, err = join(a, ra.MemberID, long, 2*time.Second, 0, nil); err != nil {
		t.Fatal(err)
	}
	sync(a, ra.MemberID, ra.Generation)

	// b joins (a 1 s session) and waits for a, which does not come: b
	// is kept alive past its session, and answered, the leader, when
	// the rebalance completes without a (the rebalance timeout, 2 s).
	began = time.Now()
	rb, err := join(b, "", time.Second, 2*time.Second, 0, nil)
	waited := time.Since(began)
	if err != nil || rb.LeaderID != rb.MemberID || waited < time.Second {
		t.Errorf("the JoinGroup of a member waiting past its session = %v after %v, want it answered as the leader after a's rebalance timeout", err, waited.Round(time.Millisecond))
	}
}
