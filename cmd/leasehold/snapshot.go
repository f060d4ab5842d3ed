package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

const snapshotUsage = `Usage:
  leasehold snapshot get [-o FILE] [--quiet] GROUP       download a group's window snapshot (gzip)
  leasehold snapshot put --next N [--force] [--quiet] GROUP FILE|-  upload one (gzip or raw; refused while held,
      and, unless --force or confirmed on a terminal, when done ranges would be indexed again)

get writes FILE.part first and resumes it on the next try if the transfer
broke; FILE defaults to GROUP.window.gz, "-" is stdout. The sha-256 is
checked at the end either way. Flags: --url, --token, --data as for admin.
`

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, snapshotUsage)
		if len(args) == 0 {
			return usageError(errors.New("snapshot: get or put?"))
		}
		return errHelp
	}
	verb, args := args[0], args[1:]
	o := newOperator()
	fs := flag.NewFlagSet("snapshot "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, snapshotUsage+"\nFlags of snapshot "+verb+":\n"); fs.PrintDefaults() }
	o.flags(fs)
	quiet := fs.Bool("quiet", false, "no progress bar")
	switch verb {
	case "get":
		out := fs.String("o", "", "output file (default GROUP.window.gz; - for stdout)")
		pos, err := parseInterspersed(fs, args)
		if err != nil {
			return err
		}
		if err := wantArgs(pos, "GROUP"); err != nil {
			return err
		}
		c, err := o.client()
		if err != nil {
			return err
		}
		return snapshotGet(ctx, c, pos[0], *out, !*quiet && isTerminal(stderr), stdout, stderr)
	case "put":
		next := fs.Int64("next", -1, "the id the window covers up to (exclusive); required")
		force := fs.Bool("force", false, "store it even if done ranges at or past --next must be indexed again")
		pos, err := parseInterspersed(fs, args)
		if err != nil {
			return err
		}
		if err := wantArgs(pos, "GROUP", "FILE|-"); err != nil {
			return err
		}
		if *next < 0 {
			return usageError(errors.New("snapshot put: --next is required"))
		}
		c, err := o.client()
		if err != nil {
			return err
		}
		return snapshotPut(ctx, c, pos[0], pos[1], *next, *force, !*quiet && isTerminal(stderr), stdout, stderr)
	}
	fmt.Fprint(stderr, snapshotUsage)
	return usageError(fmt.Errorf("snapshot: unknown verb %q", verb))
}

// snapshotGet downloads the group's snapshot into out, by way of out.part
// so that a broken transfer resumes where it broke on the next run.
func snapshotGet(ctx context.Context, c *client.Client, group, out string, bar bool, stdout, stderr io.Writer) error {
	if out == "" {
		out = group + ".window.gz"
	}
	if out == "-" {
		sr, err := c.GetGroupSnapshot(ctx, group, 0)
		if err != nil {
			return err
		}
		if sr == nil {
			return leasehold.Errorf(leasehold.KindNotFound, "group %s has no snapshot", group)
		}
		defer sr.Close()
		// The reader checks the digest itself when it starts at 0.
		_, err = io.Copy(stdout, newMeter(sr, 0, sr.Size, bar, stderr))
		return err
	}
	part := out + ".part"
	for attempt := 0; ; attempt++ {
		err := getInto(ctx, c, group, part, bar, stderr)
		var mismatch *digestMismatch
		if errors.As(err, &mismatch) && mismatch.resumed && attempt == 0 {
			// The part on disk was of another snapshot: start over once.
			fmt.Fprintf(stderr, "snapshot: %v; downloading again from the start\n", err)
			if err := os.Remove(part); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if err := os.Rename(part, out); err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "snapshot of %s: %d bytes, sha-256 checked, written to %s\n", group, fi.Size(), out)
	return nil
}

type digestMismatch struct {
	got, want string
	resumed   bool
}

func (e *digestMismatch) Error() string {
	return fmt.Sprintf("snapshot digest mismatch: got sha-256 %s, node has %s", e.got, e.want)
}

// getInto appends the rest of the snapshot to part and checks the digest
// of the whole file.
func getInto(ctx context.Context, c *client.Client, group, part string, bar bool, stderr io.Writer) error {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// What is on disk already goes through the hash before the rest.
	h := sha256.New()
	have, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	sr, err := c.GetGroupSnapshot(ctx, group, have)
	if have > 0 && leasehold.KindOf(err) == leasehold.KindInvalid {
		// 416: the part is as long as the snapshot, or longer (another
		// one): ask for the whole again.
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		h.Reset()
		have = 0
		sr, err = c.GetGroupSnapshot(ctx, group, 0)
	}
	if err != nil {
		return err
	}
	if sr == nil {
		os.Remove(part)
		return leasehold.Errorf(leasehold.KindNotFound, "group %s has no snapshot", group)
	}
	defer sr.Close()
	if have > 0 {
		fmt.Fprintf(stderr, "snapshot: resuming %s at byte %d\n", part, have)
	}
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if _, err := io.Copy(w, newMeter(sr, have, sr.Size, bar, stderr)); err != nil {
		w.Flush()
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if sr.SHA256 != "" {
		if got := hex.EncodeToString(h.Sum(nil)); got != sr.SHA256 {
			return &digestMismatch{got: got, want: sr.SHA256, resumed: have > 0}
		}
	}
	return f.Close()
}

// snapshotPut uploads a file (or stdin) as the group's snapshot. A file's
// sha-256 goes with it, so the node refuses a body damaged on the way.
func snapshotPut(ctx context.Context, c *client.Client, group, path string, next int64, force, bar bool, stdout, stderr io.Writer) error {
	o := client.SnapshotUpload{Force: force}
	var file *os.File
	var body io.Reader
	var size int64 = -1
	var sum string
	if path == "-" {
		br := bufio.NewReader(os.Stdin)
		magic, _ := br.Peek(2)
		o.Gzip = len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b
		body = br
	} else {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		file = f
		h := sha256.New()
		if size, err = io.Copy(h, f); err != nil {
			return err
		}
		o.Digest = h.Sum(nil)
		sum = hex.EncodeToString(o.Digest)
		var magic [2]byte
		if n, _ := f.ReadAt(magic[:], 0); n == 2 {
			o.Gzip = magic[0] == 0x1f && magic[1] == 0x8b
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		o.Length = size
		body = &seekMeter{meter: newMeter(f, 0, size, bar, stderr), f: f}
	}
	if path == "-" {
		body = newMeter(body, 0, -1, bar, stderr)
	}
	s, err := c.PutGroupSnapshot(ctx, group, next, body, o)
	if errors.Is(err, leasehold.ErrConflict) && !force && file != nil && strings.Contains(err.Error(), "force") &&
		confirm(stderr, err.Error()+"\nStore it anyway?") {
		if _, err := file.Seek(0, io.SeekStart); err != nil {
			return err
		}
		o.Force = true
		s, err = c.PutGroupSnapshot(ctx, group, next, &seekMeter{meter: newMeter(file, 0, size, bar, stderr), f: file}, o)
	}
	if err != nil {
		return forceHint(err, force)
	}
	if o.Gzip && sum != "" && s.SHA256 != sum {
		return fmt.Errorf("node stored sha-256 %s, the file's is %s", s.SHA256, sum)
	}
	fmt.Fprintf(stdout, "snapshot of %s stored: next %d, %d bytes, sha-256 %s\n", group, s.Next, s.Size, s.SHA256)
	return nil
}

// meter counts the bytes that pass and draws a progress bar on a terminal:
// bytes, rate and time left, redrawn at most five times a second.
type meter struct {
	r       io.Reader
	start   int64 // bytes done before this transfer (a resume)
	n       int64
	total   int64
	bar     bool
	w       io.Writer
	began   time.Time
	drawn   time.Time
	printed bool
}

func newMeter(r io.Reader, start, total int64, bar bool, w io.Writer) *meter {
	return &meter{r: r, start: start, total: total, bar: bar, w: w, began: time.Now()}
}

func (m *meter) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.n += int64(n)
	if m.bar && (time.Since(m.drawn) >= 200*time.Millisecond || err != nil) {
		m.draw(err != nil)
	}
	return n, err
}

func (m *meter) draw(end bool) {
	m.drawn = time.Now()
	el := time.Since(m.began).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(m.n) / el
	}
	done := m.start + m.n
	line := bytesText(done)
	if m.total > 0 {
		line += fmt.Sprintf(" / %s  %3.0f%%", bytesText(m.total), 100*float64(done)/float64(m.total))
	}
	line += fmt.Sprintf("  %s/s", bytesText(int64(rate)))
	if m.total > 0 && rate > 0 && !end {
		eta := time.Duration(float64(m.total-done) / rate * float64(time.Second)).Round(time.Second)
		line += fmt.Sprintf("  ETA %s", eta)
	}
	fmt.Fprintf(m.w, "\r\033[K%s", line)
	if end {
		fmt.Fprintln(m.w)
	}
	m.printed = true
}

// seekMeter lets the client rewind a file upload for a retry.
type seekMeter struct {
	*meter
	f *os.File
}

func (s *seekMeter) Seek(off int64, whence int) (int64, error) {
	pos, err := s.f.Seek(off, whence)
	if err == nil {
		s.n = pos
	}
	return pos, err
}

// bytesText is a size for people: 512 B, 1.5 KiB, 2.0 GiB.
func bytesText(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }
