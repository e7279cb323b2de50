package approvals_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sharedos/sharedos/approval"
	"github.com/sharedos/sharedos/internal/approvals"
	"github.com/sharedos/sharedos/internal/natsserver/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openBucket(t *testing.T) *approvals.Bucket {
	t.Helper()
	_, nc := natstest.Start(t, true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := approvals.OpenBucket(ctx, js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(id string) approval.Request {
	args := []byte(`{"id": 7, "why": "<b>&</b>"}`)
	now := time.Now().UTC()
	return approval.Request{ID: id, Tenant: "acme", Principal: "ada", Turn: "n.t1", CallID: "c1",
		Provider: "files", Tool: "rm", Alias: "files_rm", Revision: "rev1", CatalogHash: "cat1",
		Arguments: args, ArgsHash: approval.ArgsHash(args), Rule: "destructive", RequestedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// The bucket keeps the exact argument bytes, refuses a second request
// with one id, and a write at a revision the key has moved on from.
func TestBucketRoundTripAndConflict(t *testing.T) {
	b := openBucket(t)
	ctx := context.Background()
	q := &approval.Requests{B: b}
	r := request("apr-a-c1")
	if err := q.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(ctx, r); !errors.Is(err, approval.ErrExists) {
		t.Fatalf("a second put of one id: %v, want ErrExists", err)
	}
	st, rev, err := q.Get(ctx, "acme", r.ID)
	if err != nil || string(st.Arguments) != string(r.Arguments) || st.Status != approval.Pending {
		t.Fatalf("get: %+v %v", st, err)
	}
	if _, err := b.Update(ctx, st, rev+7); !errors.Is(err, approval.ErrConflict) {
		t.Fatalf("update at a stale revision: %v, want ErrConflict", err)
	}
	if tenant, err := b.Find(ctx, r.ID, []string{"globex", "acme"}); err != nil || tenant != "acme" {
		t.Fatalf("find: %q %v", tenant, err)
	}
	if _, err := b.Find(ctx, r.ID, []string{"globex"}); !errors.Is(err, approval.ErrNotFound) {
		t.Fatalf("find in another tenant: %v", err)
	}
	if sts, err := q.List(ctx, "acme"); err != nil || len(sts) != 1 {
		t.Fatalf("list: %d %v", len(sts), err)
	}
	if _, _, err := q.Get(ctx, "acme", "apr-none"); !errors.Is(err, approval.ErrNotFound) {
		t.Fatalf("get of none: %v", err)
	}
}

// Many users of one approval at once, through the JetStream bucket: one
// wins, the others are refused ErrConflict.
func TestBucketUseOnce(t *testing.T) {
	b := openBucket(t)
	ctx := context.Background()
	q := &approval.Requests{B: b}
	r := request("apr-b-c1")
	if err := q.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Decide(ctx, "acme", r.ID, approval.Decision{Approve: true, By: "carol"}); err != nil {
		t.Fatal(err)
	}
	_, rev, err := q.Get(ctx, "acme", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = q.Use(ctx, "acme", r.ID, rev, "c2", time.Now()) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, approval.ErrConflict):
			t.Errorf("a losing use: %v", err)
		}
	}
	st, _, _ := q.Get(ctx, "acme", r.ID)
	if won != 1 || st.Status != approval.Used || st.UsedBy != "c2" {
		t.Fatalf("%d uses won; state %s by %s", won, st.Status, st.UsedBy)
	}
}
