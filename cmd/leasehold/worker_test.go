package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/synthetic"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestWorkerCommand runs `leasehold worker` over a few groups until they
// are done, then `leasehold worker --verify`.
func TestWorkerCommand(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	groups := []string{"alt.one", "alt.two", "alt.three"}
	for _, g := range groups {
		admin(t, n, "groups", "create", g, "--range-size", "200", "--start", "1001")
		admin(t, n, "groups", "tail", g, "2000")
		admin(t, n, "groups", "history", g, "1")
	}
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "w1", "-q"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, []string{"--url", n.URL, "--token", token, "--capacity", "2", "--snapshot-every", "1ns"}, &logs, &logs)
	}()
	if out, err := operatorRun(t, n, nil, "wait", "--timeout", "60s", "--every", "50ms"); err != nil {
		t.Fatalf("wait: %v (%s)\nworker log:\n%s", err, out, logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("worker: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not stop")
	}
	if !strings.Contains(logs.String(), "everything released") {
		t.Errorf("worker log: no clean stop:\n%s", logs.String())
	}

	var out bytes.Buffer
	if err := runWorker(context.Background(), []string{"--verify", "--url", n.URL, "--admin-token", n.AdminToken}, &out, &out); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "verify: 3 groups, windows match") {
		t.Errorf("verify: got %q", out.String())
	}

	t.Run("VerifyCatchesMismatch", func(t *testing.T) {
		// Seed a window that misses one id.
		w := synthetic.NewWindow("alt.two")
		for id := int64(1); id <= 2000; id++ {
			if id != 1234 {
				w.Add(id)
			}
		}
		var raw bytes.Buffer
		if err := w.Save(&raw); err != nil {
			t.Fatal(err)
		}
		c := client.New(n.URL, n.AdminToken)
		if _, err := c.PutGroupSnapshot(context.Background(), "alt.two", 2001, &raw, client.SnapshotUpload{}); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := runWorker(context.Background(), []string{"--verify", "--url", n.URL, "--admin-token", n.AdminToken}, &out, &out)
		if err == nil || !strings.Contains(out.String(), "alt.two: MISMATCH") {
			t.Errorf("got %v, %q; want alt.two told apart", err, out.String())
		}
	})
	t.Run("NoToken", func(t *testing.T) {
		t.Setenv("LEASEHOLD_TOKEN", "")
		var out bytes.Buffer
		if err := runWorker(context.Background(), []string{"--url", n.URL}, &out, &out); !isUsage(err) {
			t.Errorf("got %v, want a usage error", err)
		}
	})
}
