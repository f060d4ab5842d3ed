package newznab

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
	"github.com/leasehold/leasehold/internal/usenettest"
	"github.com/leasehold/leasehold/source/binaries"
	"github.com/leasehold/leasehold/source/nntp"
)

// TestNZBGetFeed runs Debian's NZBGet against the API as a downloader
// does: its RSS feed is the API's t=search with a key, it takes the
// releases the feed lists, fetches each NZB from the item's t=get link,
// and downloads the articles from the news server. The articles are
// posted to the test INN here and the index's rows point at their
// message-ids; the files NZBGet writes equal the posted bytes. A release
// still being read is in the index but not in the feed, so NZBGet never
// fetches it.
func TestNZBGetFeed(t *testing.T) {
	t.Parallel()
	s := usenettest.Find(t)
	nzbget, err := exec.LookPath("nzbget")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no nzbget (apt-get install nzbget)")
		}
		t.Skip("no nzbget (apt-get install nzbget)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	group := fmt.Sprintf("alt.binaries.lh.newznab.t%d", time.Now().UnixNano())
	if err := s.NewGroups(ctx, group); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(43, 1))
	data := func(n int) []byte {
		d := make([]byte, n)
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		return d
	}
	type post struct {
		key, name string
		files     []usenettest.File
		listed    bool
	}
	posts := []post{
		{"show", "Feed.Show.S01E01.720p.HDTV", []usenettest.File{{Name: "Feed.Show.S01E01.720p.HDTV.part1.rar", Data: data(4500)}, {Name: "Feed.Show.S01E01.720p.HDTV.part2.rar", Data: data(2100)}}, true},
		{"film", "Feed.Film.2024.1080p.BluRay", []usenettest.File{{Name: "Feed.Film.2024.1080p.BluRay.mkv", Data: data(3300)}}, true},
		{"partial", "Feed.Show.S01E02.720p.HDTV", []usenettest.File{{Name: "Feed.Show.S01E02.720p.HDTV.part1.rar", Data: data(1500)}}, false},
	}
	var arts []usenettest.Article
	for _, p := range posts {
		arts = append(arts, usenettest.YEncArticles(group, "feeder <feeder@lh.example>", p.name, p.files, 1000)...)
	}
	src := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, Timeout: 10 * time.Second})
	defer src.Close()
	if err := usenettest.Post(ctx, src, arts); err != nil {
		t.Fatal(err)
	}
	// Read over a new connection, as Post counts them: the nnrpd that
	// took the posts can go on answering from the group's state before
	// them (usenettest.freshGroup).
	fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, Timeout: 10 * time.Second})
	defer fresh.Close()
	hs, _, err := fresh.Overview(ctx, group, 1, int64(len(arts)))
	if err != nil {
		t.Fatal(err)
	}
	bySubject := map[string]nntp.Header{}
	for _, h := range hs {
		bySubject[h.Subject] = h
	}

	// The index's rows, as a worker's sink writes them, pointing at the
	// posted articles.
	dbURL, db := testIndex(t)
	posted := time.Now().UTC().Truncate(time.Second)
	next := 0
	for i, p := range posts {
		n := len(p.files)
		r := binaries.Release{Type: "release", Key: p.key, Name: p.name, Poster: "feeder <feeder@lh.example>", Group: group, Groups: []string{group},
			Files: n, TotalFiles: &n, CompleteFiles: n, Complete: p.listed, Posted: posted.Add(time.Duration(i) * time.Second).Format(time.RFC3339)}
		var files []binaries.File
		for k, f := range p.files {
			parts := (len(f.Data) + 999) / 1000
			k1 := k + 1
			bf := binaries.File{Type: "file", Key: fmt.Sprintf("%s-%d", p.key, k1), Release: p.key, Group: group, Groups: []string{group},
				Poster: r.Poster, Subject: arts[next].Subject, Name: f.Name, File: &k1, Files: &n, Parts: parts, Total: &parts, Complete: true, Posted: r.Posted}
			for part := 1; part <= parts; part++ {
				h, ok := bySubject[arts[next].Subject]
				if !ok {
					t.Fatalf("no overview of %q", arts[next].Subject)
				}
				bf.Segments = append(bf.Segments, binaries.Segment{Number: part, Article: h.Number, MessageID: h.MessageID, Bytes: h.Bytes})
				bf.Bytes += h.Bytes
				next++
			}
			r.Bytes += bf.Bytes
			files = append(files, bf)
		}
		writeRelease(t, db, r, files)
	}
	key, err := AddKey(ctx, db, "nzbget", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := OpenIndex(ctx, dbURL, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: New(Options{Index: pool}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	feedURL := fmt.Sprintf("http://%s/api?t=search&apikey=%s", ln.Addr(), key)

	// NZBGet as a server with one feed, read at once (Backlog=no takes
	// the first read's items too, and the empty filter takes them all).
	reader := usenettest.NNRPD(t)
	host, port, _ := net.SplitHostPort(reader)
	dir := t.TempDir()
	args := []string{"-n", "-s",
		"-o", "MainDir=" + dir, "-o", "DestDir=" + filepath.Join(dir, "dst"), "-o", "InterDir=" + filepath.Join(dir, "inter"),
		"-o", "TempDir=" + filepath.Join(dir, "tmp"), "-o", "QueueDir=" + filepath.Join(dir, "queue"), "-o", "NzbDir=" + filepath.Join(dir, "nzb"),
		"-o", "LogFile=" + filepath.Join(dir, "nzbget.log"), "-o", "WriteLog=append", "-o", "LockFile=" + filepath.Join(dir, "nzbget.lock"),
		"-o", "ScriptDir=" + filepath.Join(dir, "scripts"), "-o", "WebDir=", "-o", "ConfigTemplate=",
		"-o", "Server1.Active=yes", "-o", "Server1.Host=" + host, "-o", "Server1.Port=" + port, "-o", "Server1.Connections=2",
		"-o", "Server1.Level=0", "-o", "Server1.Encryption=no",
		"-o", "ParCheck=manual", "-o", "Unpack=no", "-o", "DirectRename=no", "-o", "FileNaming=article",
		"-o", "ArticleTimeout=10", "-o", "UrlTimeout=10", "-o", "ControlIP=127.0.0.1", "-o", "ControlPort=0",
		"-o", "OutputMode=loggable", "-o", "CrcCheck=yes",
		"-o", "Feed1.Name=leasehold", "-o", "Feed1.URL=" + feedURL, "-o", "Feed1.Filter=", "-o", "Feed1.Backlog=no",
		"-o", "Feed1.Interval=1", "-o", "Feed1.PauseNzb=no", "-o", "Feed1.Category=",
	}
	cmd := exec.CommandContext(ctx, nzbget, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var want []usenettest.File
	for _, p := range posts {
		if p.listed {
			want = append(want, p.files...)
		}
	}
	err = poll.Wait(2*time.Minute, 100*time.Millisecond, func() error {
		for _, f := range want {
			p := usenettest.Downloaded(dir, f.Name)
			if p == "" {
				return fmt.Errorf("%s not downloaded", f.Name)
			}
			body, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(body, f.Data) {
				return fmt.Errorf("%s: %d bytes (%v), want the %d posted", f.Name, len(body), err, len(f.Data))
			}
		}
		return nil
	})
	if err != nil {
		logs, _ := os.ReadFile(filepath.Join(dir, "nzbget.log"))
		t.Fatalf("NZBGet's feed: %v\n%s\n%s", err, logs, out.String())
	}
	for _, f := range posts[2].files {
		if p := usenettest.Downloaded(dir, f.Name); p != "" {
			t.Errorf("NZBGet downloaded %s, of a release still being read", p)
		}
	}
	logs, _ := os.ReadFile(filepath.Join(dir, "nzbget.log"))
	if !strings.Contains(string(logs), "leasehold") {
		t.Errorf("NZBGet's log names no feed leasehold:\n%s", logs)
	}
}
