package usenettest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// feeder offers articles to innd as a peer does (IHAVE), not as a
// reader posts them (POST through nnrpd): a peer's article keeps its own
// Date and Message-ID and the bytes of its headers as they are, where
// nnrpd refuses a Subject that is not UTF-8 ("441 Invalid syntax
// encountered in Subject header field body"), as subjects posted by
// older tools and passed on by other servers are.
type feeder struct {
	addr string
	tag  string // makes Message-IDs unique to one feed
	seq  *atomic.Int64
}

func newFeeder(addr string) *feeder {
	return &feeder{addr: addr, tag: fmt.Sprintf("%x", time.Now().UnixNano()), seq: new(atomic.Int64)}
}

// dial connects to the server as a peer and reads its greeting; done
// closes the connection (and ends the watch on ctx).
func (f *feeder) dial(ctx context.Context) (net.Conn, *textproto.Conn, func(), error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		return nil, nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	done := func() { stop(); nc.Close() }
	tp := textproto.NewConn(nc)
	if _, _, err := tp.ReadCodeLine(200); err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("%s greets: %w (a peer's IHAVE and TAKETHIS need innd's port, which takes 127.0.0.1 for a peer)", f.addr, err)
	}
	return nc, tp, done, nil
}

// nextID is a Message-ID no article fed before has.
func (f *feeder) nextID() string {
	return fmt.Sprintf("<shape.%s.%d@lh.example>", f.tag, f.seq.Add(1))
}

// writeHead writes article a's head under id, and the blank line after
// it; an article without a date is dated now.
func writeHead(w io.Writer, id string, a Article) {
	date := a.Date
	if date.IsZero() {
		date = time.Now()
	}
	fmt.Fprintf(w, "Path: lh.example!not-for-mail\r\nMessage-ID: %s\r\nFrom: %s\r\nNewsgroups: %s\r\nSubject: %s\r\nDate: %s\r\n\r\n",
		id, a.From, a.Group, a.Subject, date.UTC().Format(time.RFC1123Z))
}

// feed offers articles in order over one connection; each is stored
// (235) before the next is offered, so the server numbers them in order.
func (f *feeder) feed(ctx context.Context, articles []Article) error {
	if len(articles) == 0 {
		return nil
	}
	_, tp, done, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	for _, a := range articles {
		id := f.nextID()
		if err := tp.PrintfLine("IHAVE %s", id); err != nil {
			return err
		}
		if _, _, err := tp.ReadCodeLine(335); err != nil {
			return fmt.Errorf("IHAVE %q to %s: %w", a.Subject, a.Group, err)
		}
		w := tp.DotWriter()
		writeHead(w, id, a)
		fmt.Fprintf(w, "%s\r\n", a.Body)
		if err := w.Close(); err != nil {
			return err
		}
		if _, _, err := tp.ReadCodeLine(235); err != nil {
			return fmt.Errorf("article %q to %s: %w", a.Subject, a.Group, err)
		}
	}
	tp.PrintfLine("QUIT")
	return nil
}

// stream sends articles over one connection in streaming mode (MODE
// STREAM, then TAKETHIS after TAKETHIS without waiting for the answers,
// read as they come): many times faster than IHAVE's round trip per
// article, for the fillers of a corpus.
func (f *feeder) stream(ctx context.Context, articles []Article) error {
	if len(articles) == 0 {
		return nil
	}
	nc, tp, done, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := tp.PrintfLine("MODE STREAM"); err != nil {
		return err
	}
	if _, _, err := tp.ReadCodeLine(203); err != nil {
		return fmt.Errorf("MODE STREAM: %w", err)
	}
	sent := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(nc, 64<<10)
		for _, a := range articles {
			id := f.nextID()
			fmt.Fprintf(w, "TAKETHIS %s\r\n", id)
			writeHead(w, id, a)
			for _, line := range strings.Split(a.Body, "\r\n") {
				if strings.HasPrefix(line, ".") {
					line = "." + line
				}
				w.WriteString(line + "\r\n")
			}
			w.WriteString(".\r\n")
		}
		sent <- w.Flush()
	}()
	for range articles {
		if _, _, err := tp.ReadCodeLine(239); err != nil {
			return fmt.Errorf("TAKETHIS: %w", err)
		}
	}
	if err := <-sent; err != nil {
		return err
	}
	tp.PrintfLine("QUIT")
	return nil
}

// feedAtOnce streams articles over conns connections at once, in no
// order among themselves: the fillers of a corpus, many and alike.
func (f *feeder) feedAtOnce(ctx context.Context, articles []Article, conns int) error {
	conns = max(1, min(conns, len(articles)))
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for i := range conns {
		lo, hi := i*len(articles)/conns, (i+1)*len(articles)/conns
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.stream(ctx, articles[lo:hi])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// waitCounts waits until the server counts want[group] articles in each
// group, asking over a new reader connection each time (see freshGroup).
func waitCounts(ctx context.Context, addr string, want map[string]int64) error {
	for g, n := range want {
		for {
			gi, err := freshGroupAt(ctx, addr, g)
			if err == nil && gi.Count >= n {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("group %s: %d articles fed, the server counts %d (%v)", g, n, gi.Count, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// countGroups adds the articles' groups to want, a cross-post once in
// each of its groups.
func countGroups(want map[string]int64, articles []Article) {
	for _, a := range articles {
		for _, g := range strings.Split(a.Group, ",") {
			want[g]++
		}
	}
}
