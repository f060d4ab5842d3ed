package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestUsenetWorkerNZBGet posts real yEnc articles to INN (a three-file
// release cross-posted to two groups, and a file missing a part), indexes
// them with `leasehold worker --nzb`, and has Debian's nzbget download
// each complete file from the NZBs the worker wrote: the bytes equal
// what was posted. The file missing a part has an NZB too, listing the
// parts there are.
func TestUsenetWorkerNZBGet(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("alt.binaries.lh.rec.t%d", time.Now().UnixNano())
	a, b := prefix+".a", prefix+".b"
	if err := s.NewGroups(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 32))
	data := func(n int) []byte {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		return d
	}
	files := []usenettest.File{{Name: "rec.show.part1.rar", Data: data(9000)}, {Name: "rec.show.part2.rar", Data: data(4100)}, {Name: "rec.show.nfo", Data: data(300)}}
	arts := usenettest.YEncArticles(a+","+b, "poster <poster@lh.example>", "rec.show", files, 2000)
	ten := usenettest.YEncArticles(a, "ten <ten@lh.example>", "", []usenettest.File{{Name: "ten.bin", Data: data(10 * 500)}}, 500)
	arts = append(arts, append(ten[:6], ten[7:]...)...) // part 7 never posted
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer src.Close()
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}

	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	for _, g := range []string{a, b} {
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "4")
	}
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	c := client.New(n.URL, n.AdminToken)
	dir := t.TempDir()
	out, nzbs := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "nzb")
	doneA, doneB := caughtUp(t, ctx, c, a, 0), caughtUp(t, ctx, c, b, 0)
	workUntil(t, ctx, "yEnc groups", func() bool { return doneA() && doneB() },
		"--url", n.URL, "--token", token, "--source", "nntp://"+s.Addr, "--out", out, "--nzb", nzbs, "--capacity", "2", "--batch", "3", "--watermark-every", "200ms")

	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := binaries.ReadJSONL(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var show, tenRel binaries.Release
	for _, r := range got.Releases {
		switch r.Name {
		case "rec.show":
			show = r
		case "ten":
			tenRel = r
		}
	}
	if show.Files != 3 || !show.Complete || len(show.Groups) != 2 || show.NZB == nil || tenRel.Complete || tenRel.NZB == nil {
		t.Fatalf("releases: %+v and %+v; want rec.show complete in both groups and ten incomplete, both with NZBs\n%s", show, tenRel, raw)
	}
	if st, err := os.Stat(filepath.Join(nzbs, *show.NZB)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the NZB %s: %v, %v; want a file of mode 0600", *show.NZB, st, err)
	}

	reader := usenettest.NNRPD(t)
	get := t.TempDir()
	usenettest.NZBGet(t, ctx, filepath.Join(nzbs, *show.NZB), reader, get)
	for _, f := range files {
		p := usenettest.Downloaded(get, f.Name)
		body, err := os.ReadFile(p)
		if p == "" || err != nil || !bytes.Equal(body, f.Data) {
			logs, _ := os.ReadFile(filepath.Join(get, "nzbget.log"))
			t.Errorf("nzbget's %s (at %q): %d bytes, %v; want the %d posted\n%s", f.Name, p, len(body), err, len(f.Data), logs)
		}
	}
	nzb, _ := os.ReadFile(filepath.Join(nzbs, *tenRel.NZB))
	if c := bytes.Count(nzb, []byte("<segment ")); c != 9 {
		t.Errorf("the NZB of the file missing a part lists %d segments, want 9:\n%s", c, nzb)
	}
}

// TestUsenetWorkerNZBDirRefused: an --nzb directory that cannot be
// written stops the worker before it leases anything.
func TestUsenetWorkerNZBDirRefused(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	admin(t, n, "groups", "create", "alt.binaries.lh.rec.refused", "--kind", "nntp", "--range-size", "4")
	admin(t, n, "groups", "tail", "alt.binaries.lh.rec.refused", "8")
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	os.WriteFile(file, nil, 0o600)
	var logs bytes.Buffer
	err := runWorker(context.Background(), []string{"--url", n.URL, "--token", token, "--source", "nntp://127.0.0.1:1",
		"--out", filepath.Join(dir, "out.jsonl"), "--nzb", filepath.Join(file, "nzb")}, &logs, &logs)
	if err == nil || !strings.Contains(err.Error(), "--nzb") {
		t.Fatalf("a worker with an --nzb under a file: %v, want an error naming --nzb\n%s", err, logs.String())
	}
	c := client.New(n.URL, n.AdminToken)
	d, err := c.Group(context.Background(), "alt.binaries.lh.rec.refused")
	if err != nil || d.Lease != nil || d.Ranges["leased"] != 0 {
		t.Errorf("the group after the refused worker: %+v, %v; want nothing leased", d, err)
	}
}
