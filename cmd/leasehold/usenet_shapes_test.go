package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/binaries"
)

// TestUsenetWorkerShapes posts to INN what today's posting tools post
// (usenettest.Shapes: releases of one poster in Nyuu's default subject
// with the same file count, a release in two halves hours apart, files
// without counters, a cross-post to different group sets, a par2 volume
// set, a multi-volume rar, a 3,000-byte subject, a Windows-1252 subject,
// a file missing a part, two films of one poster tagged [MOVIE] and
// nothing else) and indexes it twice with the worker as a
// process of its own, writing JSON lines and NZBs: once in one pass, once
// killed with SIGKILL twice in the middle of group a and started again.
// The records (the last line of each key) and the NZBs are the same
// byte for byte; every release is as posted (name, poster, groups,
// files, complete), and nothing else is a release; and Debian's NZBGet
// downloads each complete release's NZB as a job of its own, rebuilding
// exactly that release's files, byte for byte.
func TestUsenetWorkerShapes(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("alt.binaries.lh.shapes.t%d", time.Now().UnixNano())
	// A few hundred fillers between the halves, not the 250,000 a busy
	// group gets in hours: a release closes by posted time (--release-window),
	// not by article distance, so the distance no longer matters to
	// the worker, only that the halves fall in different ranges read at
	// different times (and across the kills). TestReleaseIdentity puts
	// 250,000 articles between the halves in process, and
	// scripts/usenet-demo.sh takes USENET_DEMO_FILLERS.
	corpus := usenettest.Shapes(prefix, 300, 1)
	if err := corpus.Post(ctx, s, 4); err != nil {
		t.Fatal(err)
	}

	once, onceNZB := indexShapes(t, ctx, s, corpus, 0)
	killed, killedNZB := indexShapes(t, ctx, s, corpus, 2)
	if !reflect.DeepEqual(once.Files, killed.Files) || !reflect.DeepEqual(once.Releases, killed.Releases) {
		for k, r := range once.Releases {
			if !reflect.DeepEqual(killed.Releases[k], r) {
				t.Errorf("release %s:\n one pass %s\n killed   %s", k, asJSON(r), asJSON(killed.Releases[k]))
			}
		}
		for k, f := range once.Files {
			if g := killed.Files[k]; !reflect.DeepEqual(g, f) {
				f.Segments, g.Segments = nil, nil
				t.Errorf("file %s (%s), its segments aside:\n one pass %s\n killed   %s", k, f.Name, asJSON(f), asJSON(g))
			}
		}
		t.Errorf("%d files and %d releases in one pass, %d and %d killed twice: the records differ",
			len(once.Files), len(once.Releases), len(killed.Files), len(killed.Releases))
	}
	a, b := readTree(t, onceNZB), readTree(t, killedNZB)
	for p, body := range a {
		if !bytes.Equal(b[p], body) {
			t.Errorf("NZB %s: %d bytes in one pass, %d killed twice", p, len(body), len(b[p]))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			t.Errorf("NZB %s written killed twice, not in one pass", p)
		}
	}

	byRelease := asPosted(t, corpus, once)
	// The halves were posted hours apart, as their files' times say.
	var first, last time.Time
	for _, f := range once.Files {
		if at, err := time.Parse(time.RFC3339, f.Posted); err == nil && f.Release == byRelease[usenettest.Halves].Key {
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
	}
	if last.Sub(first) < usenettest.HalvesApart-time.Minute {
		t.Errorf("the release posted in two halves: its files posted from %v to %v, want %v apart", first, last, usenettest.HalvesApart)
	}

	// Each complete release's NZB, a job of its own.
	reader := usenettest.NNRPD(t)
	t.Run("nzbget", func(t *testing.T) {
		for _, r := range corpus.Complete() {
			rec, ok := byRelease[r.Name]
			t.Run(r.Files[0].Name, func(t *testing.T) {
				if !ok || rec.NZB == nil {
					t.Fatalf("no NZB of %q", r.Name)
				}
				t.Parallel()
				dir := t.TempDir()
				usenettest.NZBGet(t, ctx, filepath.Join(onceNZB, *rec.NZB), reader, dir)
				got := map[string][]byte{}
				for _, sub := range []string{"dst", "inter"} {
					for p, body := range readTree(t, filepath.Join(dir, sub)) {
						got[filepath.Base(p)] = body
					}
				}
				want := map[string][]byte{}
				for _, f := range r.Files {
					want[f.Name] = f.Data
				}
				if !reflect.DeepEqual(got, want) {
					logs, _ := os.ReadFile(filepath.Join(dir, "nzbget.log"))
					logs = logs[max(0, len(logs)-4000):]
					t.Errorf("NZBGet's job of %s (%s) rebuilt %s, want exactly %s byte for byte\n%s", r.Name, *rec.NZB, fileList(got), fileList(want), logs)
				}
			})
		}
	})
}

// indexShapes indexes the corpus at a new node with the worker as a
// process of its own, killed with SIGKILL kills times in the middle of
// group a (each after more of its ranges are done) and started again,
// until both groups are done; it returns the records written (the last
// line of each key) and the NZB directory.
func indexShapes(t *testing.T, ctx context.Context, s *usenettest.Server, corpus usenettest.Corpus, kills int) (binaries.Records, string) {
	t.Helper()
	n := nodetest.Start(t, nodetest.Options{LeaseTTL: time.Second})
	for _, g := range []string{corpus.A, corpus.B} {
		admin(t, n, "groups", "create", g, "--kind", "nntp", "--range-size", "20")
	}
	token := strings.TrimSpace(admin(t, n, "nodes", "register", "news1", "--kinds", "nntp", "-q"))
	dir := t.TempDir()
	out, nzbs, log := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "nzb"), filepath.Join(dir, "worker.log")
	args := []string{"--url", n.URL, "--token", token, "--source", "nntp://" + s.Addr, "--out", out, "--nzb", nzbs,
		"--capacity", "2", "--connections", "2", "--batch", "5", "--snapshot-every", "1ns", "--watermark-every", "200ms"}
	worker := startWorkerProcess(t, log, args...)
	c := client.New(n.URL, n.AdminToken)
	fail := func(format string, a ...any) {
		logs, _ := os.ReadFile(log)
		t.Fatalf(format+"\n%s", append(a, logs)...)
	}
	done := 0
	for k := range kills {
		// Killed once more of group a's ranges are done, while some are
		// still to do.
		for {
			d, err := c.Group(ctx, corpus.A)
			if err != nil {
				fail("group %s: %v", corpus.A, err)
			}
			left := d.Ranges[leasehold.StatusPlanned] + d.Ranges[leasehold.StatusLeased]
			if d.Ranges[leasehold.StatusDone] >= int64(done+3) && left > 0 {
				done = int(d.Ranges[leasehold.StatusDone])
				break
			}
			if d.High != nil && d.TailEnd == *d.High && d.Ranges[leasehold.StatusDone] > 0 && left == 0 {
				fail("group %s was done before kill %d: %v", corpus.A, k+1, d.Ranges)
			}
			if ctx.Err() != nil {
				fail("group %s never got to kill %d: %v", corpus.A, k+1, d.Ranges)
			}
			time.Sleep(2 * time.Millisecond)
		}
		worker.Process.Signal(syscall.SIGKILL)
		worker.Wait()
		t.Logf("kill -9 of the worker with %d of %s's ranges done", done, corpus.A)
		worker = startWorkerProcess(t, log, args...)
	}
	doneA, doneB := caughtUp(t, ctx, c, corpus.A, 0), caughtUp(t, ctx, c, corpus.B, 0)
	for !doneA() || !doneB() {
		if ctx.Err() != nil {
			fail("the groups were not done in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
	worker.Process.Signal(syscall.SIGTERM)
	if err := worker.Wait(); err != nil {
		fail("the worker stopped: %v", err)
	}
	if logs, _ := os.ReadFile(log); kills > 0 && !bytes.Contains(logs, []byte("takeover=true")) {
		fail("the restarted worker took no group over")
	}
	recs := readRecords(t, out)
	return recs, nzbs
}

// asPosted checks that recs has each release of the corpus as posted
// (name, poster, groups, its files by name, complete, an NZB: one
// missing a part has one too, of the parts there are) and no other release, and returns the records by name.
func asPosted(t *testing.T, corpus usenettest.Corpus, recs binaries.Records) map[string]binaries.Release {
	t.Helper()
	byName := map[string]binaries.Release{}
	for _, r := range recs.Releases {
		if _, twice := byName[r.Name]; twice {
			t.Errorf("two releases named %q", r.Name)
		}
		byName[r.Name] = r
	}
	for _, want := range corpus.Releases {
		r, ok := byName[want.Name]
		short := want.Name[:min(len(want.Name), 40)]
		if !ok {
			t.Errorf("%s: no release %q (releases: %s)", want.Shape, short, releaseNames(recs))
			continue
		}
		var names, wantNames []string
		for _, f := range recs.Files {
			if f.Release == r.Key {
				names = append(names, f.Name)
			}
		}
		for _, f := range want.Files {
			wantNames = append(wantNames, f.Name)
		}
		slices.Sort(names)
		slices.Sort(wantNames)
		complete := len(wantNames)
		if !want.Complete {
			complete--
		}
		if r.Poster != want.Poster || !slices.Equal(r.Groups, want.Groups) || r.Files != len(want.Files) || r.CompleteFiles != complete ||
			r.Complete != want.Complete || !slices.Equal(names, wantNames) || r.NZB == nil {
			t.Errorf("%s: release %q by %s in %v, %d files (%d complete), complete %v, NZB %v, files %q;\n want by %s in %v, %d files, complete %v, files %q",
				want.Shape, short, r.Poster, r.Groups, r.Files, r.CompleteFiles, r.Complete, r.NZB, names,
				want.Poster, want.Groups, len(want.Files), want.Complete, wantNames)
		}
	}
	if len(recs.Releases) != len(corpus.Releases) {
		t.Errorf("%d releases written, %d posted: %s", len(recs.Releases), len(corpus.Releases), releaseNames(recs))
	}
	return byName
}

func releaseNames(recs binaries.Records) string {
	var out []string
	for _, r := range recs.Releases {
		out = append(out, fmt.Sprintf("%.40q (%d files)", r.Name, r.Files))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// readTree reads every file under dir, by its path under dir ("" when
// dir does not exist).
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out[rel], err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func fileList(files map[string][]byte) string {
	var out []string
	for name, body := range files {
		out = append(out, fmt.Sprintf("%s (%d bytes)", name, len(body)))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
