package usenettest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// NNRPD starts an nnrpd of its own on a free port of 127.0.0.1, run as
// user news over the shared INN's spool, and returns its host:port; it
// is stopped when the test ends. NZBGet needs one: it never sends MODE
// READER, and innd takes 127.0.0.1 for a peer (USENET.md "Facts").
func NNRPD(t testing.TB) string {
	t.Helper()
	nnrpd := "/usr/lib/news/bin/nnrpd"
	if _, err := os.Stat(nnrpd); err != nil {
		t.Skipf("usenettest: no %s", nnrpd)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("setpriv", "--reuid=news", "--regid=news", "--init-groups", nnrpd, "-D", "-f", "-b", "127.0.0.1", "-p", strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		t.Fatalf("usenettest: starting nnrpd: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	poll.Until(t, 10*time.Second, "usenettest: nnrpd on "+addr+" to answer", func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	return addr
}

// NZBGet runs Debian's nzbget standalone on nzb against the news server
// at addr, in dir, and returns where the files it downloads go (its
// DestDir; a file may stay in InterDir, see Downloaded). Without nzbget
// the test is skipped, unless CI=true: then it fails.
func NZBGet(t testing.TB, ctx context.Context, nzb, addr, dir string) string {
	t.Helper()
	bin, err := exec.LookPath("nzbget")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("usenettest: CI=true and no nzbget (apt-get install nzbget)")
		}
		t.Skip("usenettest: no nzbget (apt-get install nzbget)")
	}
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"-n",
		"-o", "MainDir=" + dir, "-o", "DestDir=" + filepath.Join(dir, "dst"), "-o", "InterDir=" + filepath.Join(dir, "inter"),
		"-o", "TempDir=" + filepath.Join(dir, "tmp"), "-o", "QueueDir=" + filepath.Join(dir, "queue"), "-o", "NzbDir=" + filepath.Join(dir, "nzb"),
		"-o", "LogFile=" + filepath.Join(dir, "nzbget.log"), "-o", "WriteLog=append", "-o", "LockFile=" + filepath.Join(dir, "nzbget.lock"),
		"-o", "ScriptDir=" + filepath.Join(dir, "scripts"), "-o", "WebDir=", "-o", "ConfigTemplate=",
		"-o", "Server1.Active=yes", "-o", "Server1.Host=" + host, "-o", "Server1.Port=" + port, "-o", "Server1.Connections=2",
		"-o", "Server1.Level=0", "-o", "Server1.Encryption=no",
		"-o", "ParCheck=force", "-o", "ParRepair=yes", "-o", "Unpack=no", "-o", "DirectRename=no", "-o", "FileNaming=article",
		"-o", "ArticleTimeout=10", "-o", "UrlTimeout=10", "-o", "ControlIP=127.0.0.1", "-o", "ControlPort=0",
		"-o", "OutputMode=loggable", "-o", "CrcCheck=yes",
		nzb}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nzbget %s: %v\n%s", nzb, err, out)
	}
	return filepath.Join(dir, "dst")
}

// Downloaded finds the file name under NZBGet's directories in dir
// (DestDir, then InterDir), or "".
func Downloaded(dir, name string) string {
	var found string
	for _, sub := range []string{"dst", "inter"} {
		filepath.Walk(filepath.Join(dir, sub), func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && info.Name() == name && found == "" {
				found = p
			}
			return nil
		})
		if found != "" {
			return found
		}
	}
	return found
}

// String describes a file for a test's message.
func (f File) String() string { return fmt.Sprintf("%s (%d bytes)", f.Name, len(f.Data)) }
