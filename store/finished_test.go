package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/store"
)

// TestThroughputAlone: a node running alone (no outbox, the default)
// charts the ranges its workers finish, with their headers, in the
// dashboard's last hour, finished by either call a worker makes; a
// refused finish is not counted.
func TestThroughputAlone(t *testing.T) {
	t.Parallel()
	var clock = nodetest.NewClock()
	n := nodetest.Start(t, nodetest.Options{Clock: clock.Now, Store: store.Options{NoOutbox: true}})
	ctx := context.Background()
	adm := client.New(n.URL, n.AdminToken)
	if _, _, err := adm.PutGroup(ctx, "alt.alone", client.GroupSpec{RangeSize: new(int64(100))}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.PlanTail(ctx, "alt.alone", 300); err != nil {
		t.Fatal(err)
	}
	tok, err := adm.RegisterNode(ctx, client.NodeSpec{Name: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	w := client.New(n.URL, tok.Token)
	g, err := w.Lease(ctx)
	if err != nil || g == nil {
		t.Fatalf("lease: %v, %v", g, err)
	}
	r, err := w.Next(ctx, g.Group.ID, g.Fence)
	if err != nil || r == nil {
		t.Fatalf("next: %v, %v", r, err)
	}
	if _, err := w.Finish(ctx, r.ID, g.Fence+1, 5); err == nil {
		t.Fatal("a finish with a wrong fence was taken")
	}
	if _, err := w.Finish(ctx, r.ID, g.Fence, 90); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	r2, err := w.Next(ctx, g.Group.ID, g.Fence)
	if err != nil || r2 == nil {
		t.Fatalf("next: %v, %v", r2, err)
	}
	if _, err := w.NextAfter(ctx, g.Group.ID, g.Fence, &client.Finished{Range: r2.ID, Headers: 10}); err != nil {
		t.Fatal(err)
	}
	o, err := n.App.Overview(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ranges, headers int64
	for _, m := range o.Throughput {
		ranges += m.Ranges
		headers += m.Headers
	}
	last := o.Throughput[len(o.Throughput)-1]
	if ranges != 2 || headers != 100 || last.Ranges != 1 || last.Headers != 10 {
		t.Errorf("the chart has %d ranges, %d headers, the last minute %+v; want 2 ranges, 100 headers, the last minute 1 range and 10", ranges, headers, last)
	}
}
