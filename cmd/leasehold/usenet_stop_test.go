package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestUsenetWorkerStopped stops `leasehold worker --source nntp://…`
// with SIGTERM in the middle of a range (records written, the range not
// done), reading INN pipelined, uncompressed and compressed: the worker
// exits 0 without a panic, uploads its window at the range's progress
// and hands the range back with no error and its attempts as they were:
// a clean stop is no attempt, however often the worker is stopped and
// started again (twice here).
func TestUsenetWorkerStopped(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := fmt.Sprintf("lh.worker.stop%d", time.Now().UnixNano())
	if err := s.NewGroups(ctx, g); err != nil {
		t.Fatal(err)
	}
	poster := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer poster.Close()
	if err := usenettest.Post(ctx, poster, usenettest.Generated(g, 300, 10)); err != nil {
		t.Fatal(err)
	}
	for _, compress := range []bool{false, true} {
		name := fmt.Sprintf("compress=%v", compress)
		n := nodetest.Start(t, nodetest.Options{})
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "100000")
		token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
		dir := t.TempDir()
		c := client.New(n.URL, n.AdminToken)
		// Two stops of one range: each hands it back at its progress and
		// leaves its attempts as they were before the lease.
		var progress int64
		for stop := 1; stop <= 2; stop++ {
			name := fmt.Sprintf("%s stop %d", name, stop)
			out, log := filepath.Join(dir, fmt.Sprintf("out%d.jsonl", stop)), filepath.Join(dir, fmt.Sprintf("worker%d.log", stop))
			worker := startWorkerProcess(t, log, "--url", n.URL, "--token", token, "--source", "nntp://"+s.Addr, "--out", out,
				"--nzb", filepath.Join(dir, "nzb"), "--capacity", "1", "--connections", "1", "--batch", "1",
				"--source-compress="+fmt.Sprint(compress), "--snapshot-every", "1h", "--watermark-every", "100ms")
			deadline, _ := ctx.Deadline()
			if poll.Wait(time.Until(deadline), midRange, func() error {
				if raw, _ := os.ReadFile(out); bytes.Count(raw, []byte("\n")) < 2 {
					return errors.New("not two records yet")
				}
				return nil
			}) != nil {
				logs, _ := os.ReadFile(log)
				t.Fatalf("%s: nothing written:\n%s", name, logs)
			}
			worker.Process.Signal(syscall.SIGTERM)
			werr := worker.Wait()
			logs, _ := os.ReadFile(log)
			if werr != nil || bytes.Contains(logs, []byte("panic")) || !bytes.Contains(logs, []byte("why=stopping")) || !bytes.Contains(logs, []byte("window uploaded")) {
				t.Errorf("%s: the stop: %v; want exit 0, no panic, the window uploaded, the group released stopping:\n%s", name, werr, logs)
			}
			rs, err := c.AllRanges(ctx, g, "")
			if err != nil || len(rs) != 1 {
				t.Fatalf("%s: ranges %+v, %v", name, rs, err)
			}
			r := rs[0]
			if r.Status == leasehold.StatusDone {
				t.Fatalf("%s: the range was done before the stop; the test needs a slower read", name)
			}
			if r.Attempts != 0 || r.Status != leasehold.StatusPlanned || r.Next <= max(r.Start, progress) || r.LastError != nil {
				t.Errorf("%s: the range after the stop: %+v; want it planned again past %d, no attempt used, no error", name, r, progress)
			}
			progress = r.Next
			d, err := c.Group(ctx, g)
			if err != nil || d.Snapshot == nil || d.Snapshot.Next != r.Next {
				t.Errorf("%s: the window after the stop: %+v, %v; want one uploaded at the range's progress %d", name, d.Snapshot, err, r.Next)
			}
		}
	}
}
