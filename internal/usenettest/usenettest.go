// Package usenettest gives leasehold's tests and demos a real news server:
// the INN that scripts/inn.sh starts (found by LEASEHOLD_TEST_NNTP), fresh
// groups in it (ctlinnd newgroup), and a fixed set of articles posted into
// them, with what an indexer must make of them, and a corpus of the
// shapes today's posting tools give posts (Shapes).
package usenettest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/source/nntp"
)

// Server is a running INN.
type Server struct {
	// Addr is host:port of its reader service.
	Addr string
	// User and PasswordFile are a login it takes with AUTHINFO.
	User, PasswordFile string
	// TLSAddr is host:port of its reader service over TLS from the first
	// byte (nntps), and CAFile the PEM certificate of the CA that signed
	// its certificate.
	TLSAddr, CAFile string
	ctlinnd         string
}

// Find returns the INN that scripts/inn.sh started, from the environment
// it prints (eval "$(scripts/inn.sh start)"). Without one the test is
// skipped, saying how to get one, unless CI=true: then it fails.
func Find(t testing.TB) *Server {
	t.Helper()
	s, err := FromEnv()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("usenettest: CI=true and %v", err)
		}
		t.Skipf("usenettest: %v", err)
	}
	return s
}

// FromEnv is Find for programs.
func FromEnv() (*Server, error) {
	s := &Server{
		Addr:         os.Getenv("LEASEHOLD_TEST_NNTP"),
		ctlinnd:      os.Getenv("LEASEHOLD_TEST_CTLINND"),
		User:         os.Getenv("LEASEHOLD_TEST_NNTP_USER"),
		PasswordFile: os.Getenv("LEASEHOLD_TEST_NNTP_PASSWORD_FILE"),
		TLSAddr:      os.Getenv("LEASEHOLD_TEST_NNTPS"),
		CAFile:       os.Getenv("LEASEHOLD_TEST_NNTPS_CA"),
	}
	if s.Addr == "" || s.ctlinnd == "" {
		return nil, fmt.Errorf("no news server: run `eval \"$(scripts/inn.sh start)\"` as root first (LEASEHOLD_TEST_NNTP is not set)")
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("making groups in INN needs root (ctlinnd)")
	}
	return s, nil
}

// Password reads the login's password.
func (s *Server) Password() (string, error) {
	b, err := os.ReadFile(s.PasswordFile)
	return strings.TrimSpace(string(b)), err
}

// NewGroups makes the named groups (ctlinnd newgroup NAME y) and waits
// until the server answers GROUP for each.
func (s *Server) NewGroups(ctx context.Context, names ...string) error {
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, Timeout: 10 * time.Second})
	defer c.Close()
	for _, name := range names {
		out, err := exec.CommandContext(ctx, s.ctlinnd, "-t", "10", "newgroup", name, "y").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctlinnd newgroup %s: %v: %s", name, err, out)
		}
		for {
			_, err := c.Group(ctx, name)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("group %s not served: %v", name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// ExpireFirst removes the first n articles of group from the server and
// waits until GROUP's low mark is above them, as on a server whose
// oldest articles have expired: ctlinnd cancel of each (their
// message-ids read with OVER), then expireover of that group (run as
// news) drops them from the overview, which is where INN's GROUP reads
// the low mark.
func (s *Server) ExpireFirst(ctx context.Context, group string, n int64) error {
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, Timeout: 10 * time.Second})
	defer c.Close()
	hs, _, err := c.Overview(ctx, group, 1, n)
	if err != nil {
		return err
	}
	if err := s.cancel(ctx, group, hs); err != nil {
		return err
	}
	for {
		gi, err := c.Group(ctx, group)
		if err == nil && gi.Low > n {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("group %s: low mark %d after expiring 1..%d (%v)", group, gi.Low, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cancel removes the articles hs of group: ctlinnd cancel of each by its
// message-id, then expireover of that group (run as news), which drops
// them from the overview, where INN's GROUP and OVER read.
func (s *Server) cancel(ctx context.Context, group string, hs []nntp.Header) error {
	for _, h := range hs {
		if out, err := exec.CommandContext(ctx, s.ctlinnd, "-t", "10", "cancel", h.MessageID).CombinedOutput(); err != nil {
			return fmt.Errorf("ctlinnd cancel %s: %v: %s", h.MessageID, err, out)
		}
	}
	expireover := filepath.Join(filepath.Dir(s.ctlinnd), "expireover")
	// Only this group (-f - reads the groups from stdin): expireover
	// over every group rewrites indexes other tests are reading and
	// posting to, and they see their groups empty.
	cmd := exec.CommandContext(ctx, "su", "-s", "/bin/sh", "news", "-c", expireover+" -f -")
	cmd.Stdin = strings.NewReader(group + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("expireover: %v: %s", err, out)
	}
	return nil
}

// Cancel removes the articles numbered numbers from group, as a server
// whose articles were cancelled or expired here and there: ctlinnd cancel
// of each (its message-id read with OVER), then expireover of that group
// (as news), and waits until OVER of each number answers nothing.
func (s *Server) Cancel(ctx context.Context, group string, numbers ...int64) error {
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, Timeout: 10 * time.Second})
	defer c.Close()
	var hs []nntp.Header
	for _, n := range numbers {
		h, _, err := c.Overview(ctx, group, n, n)
		if err != nil {
			return err
		}
		hs = append(hs, h...)
	}
	if err := s.cancel(ctx, group, hs); err != nil {
		return err
	}
	for _, n := range numbers {
		for {
			// A new connection each time: an nnrpd may keep the
			// overview it opened before expireover.
			fresh := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1, Timeout: 10 * time.Second})
			hs, _, err := fresh.Overview(ctx, group, n, n)
			fresh.Close()
			if err == nil && len(hs) == 0 {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("group %s: article %d still there after cancelling it (%v)", group, n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Dated is an article with a Date header of its own, as POST sends it:
// how tests put articles at chosen times (INN takes dates up to its
// artcutoff, 10 days, in the past).
func (a Article) Dated(date time.Time) []byte {
	return fmt.Appendf(nil, "From: %s\r\nNewsgroups: %s\r\nSubject: %s\r\nDate: %s\r\n\r\n%s\r\n",
		a.From, a.Group, a.Subject, date.UTC().Format(time.RFC1123Z), a.Body)
}

// CancelID removes the article with Message-ID id from the server
// (ctlinnd cancel): its number is skipped in OVER answers from then on.
func (s *Server) CancelID(ctx context.Context, id string) error {
	out, err := exec.CommandContext(ctx, s.ctlinnd, "-t", "10", "cancel", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctlinnd cancel %s: %v: %s", id, err, out)
	}
	return nil
}

// Article is one article to post: Group may name several groups,
// comma-separated (a cross-post).
type Article struct {
	Group, From, Subject, Body string
	// Date is the article's Date header when it is fed to the server
	// (Corpus.Post); zero is the time it is fed.
	Date time.Time
}

// Bytes is the article as POST sends it.
func (a Article) Bytes() []byte {
	return fmt.Appendf(nil, "From: %s\r\nNewsgroups: %s\r\nSubject: %s\r\n\r\n%s\r\n", a.From, a.Group, a.Subject, a.Body)
}

// Posters of the fixed set.
const (
	Alice = "alice <alice@example.org>"
	Bob   = "bob <bob@example.net>"
	Carol = "carol <carol@example.com>"
	Dave  = "dave <dave@example.org>"
	Erin  = "erin <erin@example.net>"
	Frank = "frank <frank@example.com>"
	Grace = "grace <grace@example.org>"
)

// Fixed is the fixed article set, in posting order, over groups
// prefix.a and prefix.b: two posters posting a file of the same name
// interleaved, a plain text article between, a single-part file, a file
// missing a part, a repost of a complete file, and in prefix.b a
// single-part file and a file named in the "name (n/m)" style.
func Fixed(prefix string) []Article {
	a, b := prefix+".a", prefix+".b"
	y := func(group, from, name string, file, files, part, parts int) Article {
		return Article{Group: group, From: from, Subject: fmt.Sprintf("[%d/%d] - %q yEnc (%d/%d)", file, files, name, part, parts),
			Body: fmt.Sprintf("=ybegin part=%d total=%d name=%s", part, parts, name)}
	}
	txt := func(group, from, subject, body string) Article {
		return Article{Group: group, From: from, Subject: subject, Body: body}
	}
	return []Article{
		y(a, Alice, "holiday.rar", 1, 2, 1, 3),
		y(a, Bob, "holiday.rar", 1, 1, 1, 2),
		y(a, Alice, "holiday.rar", 1, 2, 2, 3),
		txt(a, Carol, "what is a good newsreader?", "Asking for a friend."),
		y(a, Bob, "holiday.rar", 1, 1, 2, 2),
		y(a, Alice, "holiday.rar", 1, 2, 3, 3),
		y(a, Alice, "holiday.par2", 2, 2, 1, 1),
		txt(a, Dave, "Linux ISO disc (1/4)", "part 1"),
		txt(a, Dave, "Linux ISO disc (2/4)", "part 2"),
		txt(a, Erin, `"song.mp3" yEnc (1/2)`, "=ybegin"),
		txt(a, Dave, "Linux ISO disc (4/4)", "part 4 (part 3 never came)"),
		txt(a, Erin, `"song.mp3" yEnc (2/2)`, "=ybegin"),
		txt(a, Carol, "Re: what is a good newsreader?", "slrn."),
		// Bob posts his file again.
		y(a, Bob, "holiday.rar", 1, 1, 1, 2),
		y(a, Bob, "holiday.rar", 1, 1, 2, 2),
		y(b, Frank, "notes.txt", 1, 1, 1, 1),
		txt(b, Grace, "vacation photos (1/2)", "jpeg"),
		txt(b, Grace, "vacation photos (2/2)", "jpeg"),
	}
}

// Complete is the complete files an indexer must find in the fixed set,
// by group: name and poster, sorted (Bob's holiday.rar once: his repost
// has the same subject, so it is a second copy of each part; Dave's
// disc, missing a part, is written incomplete).
func Complete(prefix string) map[string][]string {
	return map[string][]string{
		prefix + ".a": {"holiday.par2 " + Alice, "holiday.rar " + Alice, "holiday.rar " + Bob, "song.mp3 " + Erin},
		prefix + ".b": {"notes.txt " + Frank, "vacation photos " + Grace},
	}
}

// Generated is files more files of parts parts each in group, their
// parts interleaved across five posters: the load of a speed run.
func Generated(group string, files, parts int) []Article {
	posters := []string{Alice, Bob, Erin, Frank, Grace}
	var out []Article
	for f := 0; f < files; f += len(posters) {
		for p := 1; p <= parts; p++ {
			for i, from := range posters {
				if f+i >= files {
					break
				}
				name := fmt.Sprintf("gen%06d.rar", f+i)
				out = append(out, Article{Group: group, From: from, Subject: fmt.Sprintf("[1/1] - %q yEnc (%d/%d)", name, p, parts), Body: "=ybegin"})
			}
		}
	}
	return out
}

// Post posts articles in order over c and waits until the server counts
// them in each group, asking over a new plain connection each time (see
// freshGroup).
func Post(ctx context.Context, c *nntp.Client, articles []Article) error {
	want := map[string]int64{}
	for _, a := range articles {
		if err := c.Post(ctx, a.Bytes()); err != nil {
			return fmt.Errorf("posting %q to %s: %w", a.Subject, a.Group, err)
		}
		for _, g := range strings.Split(a.Group, ",") {
			want[g]++
		}
	}
	for g, n := range want {
		for {
			gi, err := freshGroup(ctx, c, g)
			if err == nil && gi.Count >= n {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("group %s: %d articles posted, the server counts %d (%v)", g, n, gi.Count, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// freshGroup asks GROUP over a new connection to the server c reads. An
// nnrpd that has been running while many groups were made can go on
// answering a group made after it started as empty (0 1 0) however many
// articles arrive (seen with INN 2.7 when the tests of several packages
// make groups at once); a new nnrpd reads the overview afresh.
func freshGroup(ctx context.Context, c *nntp.Client, group string) (nntp.GroupInfo, error) {
	return freshGroupAt(ctx, c.Addr(), group)
}

// freshGroupAt is freshGroup of the server at addr.
func freshGroupAt(ctx context.Context, addr, group string) (nntp.GroupInfo, error) {
	fresh := nntp.New(nntp.Config{Addr: addr, Connections: 1, Timeout: 10 * time.Second})
	defer fresh.Close()
	return fresh.Group(ctx, group)
}
