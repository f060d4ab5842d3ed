package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The data disk failing under a running node: full, or turned read-only.
// /readyz must say 503, every write must answer 507 (full) or 503
// (read-only) with the API's error body, never 500, and the node must not
// crash; a snapshot upload that fails keeps the old snapshot and leaves no
// .part. The filesystems are real: a small tmpfs, and an ext4 image on a
// loop device that is turned read-only the way a kernel does after an I/O
// error. Mounting needs root; without it the tests skip.

// mountTmpfs mounts a tmpfs of size at a new directory until the test ends.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// diskNode is a node served on a data dir (serveNode), with its admin
// token.
type diskNode struct {
	*servedNode
	t     *testing.T
	admin string
}

// startDiskNode serves a node alone on data, logging WARN and above.
func startDiskNode(t *testing.T, data string) *diskNode {
	t.Helper()
	n := serveNode(t, "--data", data, "--history-min-free-bytes", "0", "--log-level", "warn", "--nats", "off")
	return &diskNode{servedNode: n, t: t, admin: n.adminToken(t)}
}

type diskAnswer struct {
	status int
	body   []byte
}

func (n *diskNode) call(method, path, token string, body io.Reader, hdr ...string) diskAnswer {
	n.t.Helper()
	req, err := http.NewRequest(method, n.url+path, body)
	if err != nil {
		n.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v (did the node crash?)", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return diskAnswer{resp.StatusCode, b}
}

func (n *diskNode) json(method, path, token, body string) diskAnswer {
	n.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return n.call(method, path, token, r)
}

// value decodes one field of a JSON answer.
func (a diskAnswer) value(t *testing.T, key string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %q", a.status, a.body)
	}
	return m[key]
}

// wantRefusal checks an answer is one of the statuses with the API's
// error body: its code and a message that names the cause.
func wantRefusal(t *testing.T, what string, a diskAnswer, statuses map[int]string, mention string) {
	t.Helper()
	code, ok := statuses[a.status]
	if !ok {
		t.Fatalf("%s: got %d %s, want one of %v", what, a.status, a.body, statuses)
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error.Code != code || !strings.Contains(e.Error.Message, mention) {
		t.Fatalf("%s: got %d %s, want code %q and a message mentioning %q", what, a.status, a.body, code, mention)
	}
}

// seeded is a node with a group held by a worker, a range in work and a
// stored snapshot.
type seeded struct {
	worker       string
	group, fence int64
	rangeID      int64
	snapSHA      string
}

func seed(t *testing.T, n *diskNode) seeded {
	t.Helper()
	var s seeded
	if a := n.json("PUT", "/api/v1/groups/disk.test", n.admin, `{"range_size":100}`); a.status != 201 {
		t.Fatalf("create group: %d %s", a.status, a.body)
	}
	if a := n.json("POST", "/api/v1/groups/disk.test/tail", n.admin, `{"high":1000}`); a.status != 200 {
		t.Fatalf("plan: %d %s", a.status, a.body)
	}
	a := n.json("POST", "/api/v1/nodes", n.admin, `{"name":"w1"}`)
	if a.status != 201 {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	s.worker = a.value(t, "token").(string)
	a = n.json("POST", "/api/v1/leases", s.worker, "")
	if a.status != 200 {
		t.Fatalf("lease: %d %s", a.status, a.body)
	}
	s.group = int64(a.value(t, "group").(map[string]any)["id"].(float64))
	s.fence = int64(a.value(t, "fence").(float64))
	a = n.json("POST", fmt.Sprintf("/api/v1/leases/%d/next", s.group), s.worker, fmt.Sprintf(`{"fence":%d}`, s.fence))
	if a.status != 200 {
		t.Fatalf("next: %d %s", a.status, a.body)
	}
	s.rangeID = int64(a.value(t, "range").(map[string]any)["id"].(float64))
	body := []byte("the window before the disk failed\n")
	a = n.call("PUT", fmt.Sprintf("/api/v1/leases/%d/snapshot?fence=%d&next=1", s.group, s.fence), s.worker, bytes.NewReader(body))
	if a.status != 201 {
		t.Fatalf("snapshot: %d %s", a.status, a.body)
	}
	s.snapSHA = a.value(t, "sha256").(string)
	return s
}

// checkSnapshotKept checks the group still serves the snapshot seeded
// before the failure, and no .part was left behind.
func checkSnapshotKept(t *testing.T, n *diskNode, data string, s seeded) {
	t.Helper()
	a := n.call("GET", fmt.Sprintf("/api/v1/leases/%d/snapshot?fence=%d", s.group, s.fence), s.worker, nil)
	sum := sha256.Sum256(a.body)
	// The download is also a heartbeat: on a failed disk it may be refused,
	// but then the file must still be whole on disk.
	if a.status == 200 {
		if got := hex.EncodeToString(sum[:]); got != s.snapSHA {
			t.Fatalf("after the failed upload the node serves sha-256 %s, want the old %s", got, s.snapSHA)
		}
	} else {
		wantRefusal(t, "download", a, map[int]string{503: "unavailable", 507: "no_space"}, "")
	}
	entries, err := os.ReadDir(filepath.Join(data, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	gz := 0
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".part"):
			t.Fatalf("%s is left after the failed upload", e.Name())
		case strings.HasSuffix(e.Name(), ".gz"):
			gz++
			_, got := fileSHA(t, filepath.Join(data, "snapshots", e.Name()))
			if got != s.snapSHA {
				t.Fatalf("%s has sha-256 %s, want the old snapshot's %s", e.Name(), got, s.snapSHA)
			}
		}
	}
	if gz != 1 {
		t.Fatalf("%d snapshot files, want the old one only: %v", gz, entries)
	}
}

func fileSHA(t *testing.T, path string) (int64, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return int64(len(b)), hex.EncodeToString(sum[:])
}

// fill writes a file until the filesystem is full and returns it.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	return path
}

// incompressible is a body gzip cannot shrink.
func incompressible(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func TestFullDisk(t *testing.T) {
	t.Parallel()
	mnt := mountTmpfs(t, "16m")
	data := filepath.Join(mnt, "data")
	n := startDiskNode(t, data)
	s := seed(t, n)
	filler := fill(t, mnt)

	acked := map[string]bool{} // the writes the full disk took
	t.Run("ReadyzSays503", func(t *testing.T) {
		a := n.json("GET", "/readyz", "", "")
		if a.status != 503 || !strings.Contains(fmt.Sprint(a.value(t, "reason")), "full") {
			t.Fatalf("readyz on a full disk: %d %s, want 503 naming the full disk", a.status, a.body)
		}
	})
	t.Run("SnapshotUpload507", func(t *testing.T) {
		a := n.call("PUT", fmt.Sprintf("/api/v1/leases/%d/snapshot?fence=%d&next=50", s.group, s.fence), s.worker, bytes.NewReader(incompressible(4<<20)))
		wantRefusal(t, "snapshot upload", a, map[int]string{507: "no_space"}, "full")
		checkSnapshotKept(t, n, data, s)
	})
	t.Run("CatalogWrites507", func(t *testing.T) {
		// Planning 20000 ranges needs megabytes of WAL the disk does not
		// have; the refusal must leave the catalog as it was.
		a := n.json("POST", "/api/v1/groups/disk.test/tail", n.admin, `{"high":2001000}`)
		wantRefusal(t, "plan 20000 ranges", a, map[int]string{507: "no_space"}, "full")
		if a := n.json("GET", "/api/v1/groups/disk.test", n.admin, ""); a.status != 200 || a.value(t, "tail_end").(float64) != 1000 {
			t.Fatalf("after the refused plan: %d %s, want tail_end 1000", a.status, a.body)
		}
		// Smaller writes may still fit in WAL space already allocated
		// (then they are durable, checked after the restart below) or fail
		// at the commit. Either way: no 500, the error body when refused.
		for _, c := range []struct{ method, path, token, body string }{
			{"POST", "/api/v1/groups/disk.test/tail", n.admin, `{"high":201000}`},
			{"PUT", "/api/v1/groups/disk.other", n.admin, `{}`},
			{"POST", "/api/v1/nodes", n.admin, `{"name":"w2"}`},
			{"POST", fmt.Sprintf("/api/v1/ranges/%d/progress", s.rangeID), s.worker, fmt.Sprintf(`{"fence":%d,"next":50}`, s.fence)},
			{"POST", fmt.Sprintf("/api/v1/leases/%d/heartbeat", s.group), s.worker, fmt.Sprintf(`{"fence":%d}`, s.fence)},
		} {
			a := n.json(c.method, c.path, c.token, c.body)
			t.Logf("%s %s on a full disk: %d %s", c.method, c.path, a.status, bytes.TrimSpace(a.body))
			if a.status >= 300 {
				wantRefusal(t, c.method+" "+c.path, a, map[int]string{507: "no_space", 503: "unavailable"}, "")
			}
			acked[c.path] = a.status < 300
		}
	})
	t.Run("LoudWhenFull", func(t *testing.T) {
		// The refusals above are each a WARN naming the data dir and the
		// room left, and the free bytes are a gauge.
		warned := false
		for _, line := range strings.Split(n.log.String(), "\n") {
			warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, "the data disk is full") &&
				strings.Contains(line, "path="+data) && strings.Contains(line, "free_bytes=")
		}
		if !warned {
			t.Errorf("no WARN line with the path and the free bytes for the full disk; the log:\n%s", n.log.String())
		}
		a := n.call("GET", "/metrics", "", nil)
		var free float64 = -2
		for _, line := range strings.Split(string(a.body), "\n") {
			if v, ok := strings.CutPrefix(line, "leasehold_data_free_bytes "); ok {
				fmt.Sscan(v, &free)
			}
		}
		if free < 0 || free > 1<<20 {
			t.Errorf("leasehold_data_free_bytes on a full 16 MiB disk = %v, want 0 to 1 MiB", free)
		}
	})
	t.Run("Backup507", func(t *testing.T) {
		// The catalog's copy is written beside the catalog, on the full
		// disk: the backup is refused before a byte is sent, and what was
		// written of the copy is removed.
		a := n.call("GET", "/api/v1/backup", n.admin, nil)
		wantRefusal(t, "backup", a, map[int]string{507: "no_space"}, "full")
		if left, _ := filepath.Glob(filepath.Join(data, "backup-*")); len(left) > 0 {
			t.Fatalf("the refused backup left %v", left)
		}
	})
	t.Run("RecoversWhenFreed", func(t *testing.T) {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if a := n.json("GET", "/readyz", "", ""); a.status != 200 {
			t.Fatalf("readyz after freeing the disk: %d %s", a.status, a.body)
		}
		if a := n.json("POST", "/api/v1/groups/disk.test/tail", n.admin, `{"high":11000}`); a.status != 200 {
			t.Fatalf("plan after freeing the disk: %d %s", a.status, a.body)
		}
		a := n.call("PUT", fmt.Sprintf("/api/v1/leases/%d/snapshot?fence=%d&next=50", s.group, s.fence), s.worker, bytes.NewReader(incompressible(1<<20)))
		if a.status != 201 {
			t.Fatalf("snapshot after freeing the disk: %d %s", a.status, a.body)
		}
	})
	if err := n.stop(); err != nil {
		t.Fatalf("the node after a full disk: %v", err)
	}
	t.Run("AckedWritesKept", func(t *testing.T) {
		n := startDiskNode(t, data)
		got := n.json("GET", "/api/v1/groups/disk.other", n.admin, "").status == 200
		if want := acked["/api/v1/groups/disk.other"]; got != want {
			t.Errorf("after the restart group disk.other exists: %v; its creation was acknowledged: %v", got, want)
		}
		got = n.json("POST", "/api/v1/nodes", n.admin, `{"name":"w2"}`).status == 409
		if want := acked["/api/v1/nodes"]; got != want {
			t.Errorf("after the restart node w2 exists: %v; its registration was acknowledged: %v", got, want)
		}
	})
}

// loopExt4 mounts a fresh ext4 image on a loop device with errors=remount-ro
// and returns the mount point and the file that makes the kernel report an
// error on it (turning it read-only under open files, as after an I/O
// error).
func loopExt4(t *testing.T) (mnt, trigger string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount an ext4 image on a loop device")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = errors.Join(f.Truncate(64<<20), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Skipf("cannot make an ext4 image (mkfs.ext4): %v: %s", err, bytes.TrimSpace(out))
	}
	if out, err := exec.Command("mount", "-o", "loop,errors=remount-ro", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount an ext4 image on a loop device (needs root and /dev/loop*): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	// /sys/fs/ext4/<dev>: the device is named by its kernel name.
	entries, _ := os.ReadDir("/sys/fs/ext4")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/sys/class/block", e.Name(), "dev"))
		if err == nil && strings.TrimSpace(string(b)) == fmt.Sprintf("%d:%d", st.Dev>>8&0xfff, st.Dev&0xff|st.Dev>>12&0xfff00) {
			trigger = filepath.Join("/sys/fs/ext4", e.Name(), "trigger_fs_error")
		}
	}
	if trigger == "" {
		t.Skip("no /sys/fs/ext4/<dev>/trigger_fs_error for the loop device")
	}
	return mnt, trigger
}

func TestReadOnlyDataDir(t *testing.T) {
	t.Parallel()
	t.Run("AtStart", func(t *testing.T) {
		mnt := mountTmpfs(t, "4m")
		if err := os.Mkdir(filepath.Join(mnt, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot remount the tmpfs read-only: %v: %s", err, out)
		}
		var stderr bytes.Buffer
		code := exitCode(run(context.Background(), []string{"serve", "--data", filepath.Join(mnt, "data"), "--listen", "127.0.0.1:0", "--nats", "off"}, io.Discard, &stderr), &stderr)
		if code != 2 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "read-only file system") {
			t.Fatalf("serve on a read-only data dir: exit %d, stderr %q; want exit 2 and one line naming the read-only file system", code, stderr.String())
		}
	})
	t.Run("WhileServing", func(t *testing.T) {
		mnt, trigger := loopExt4(t)
		data := filepath.Join(mnt, "data")
		n := startDiskNode(t, data)
		s := seed(t, n)
		if err := os.WriteFile(trigger, []byte("leasehold test: turn the disk read-only"), 0o200); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mnt, "probe"), nil, 0o600); !errors.Is(err, syscall.EROFS) {
			t.Fatalf("the filesystem is not read-only after the error: %v", err)
		}
		a := n.json("GET", "/readyz", "", "")
		if a.status != 503 || !strings.Contains(fmt.Sprint(a.value(t, "reason")), "read-only") {
			t.Fatalf("readyz on a read-only disk: %d %s, want 503 naming the read-only file system", a.status, a.body)
		}
		a = n.call("PUT", fmt.Sprintf("/api/v1/leases/%d/snapshot?fence=%d&next=50", s.group, s.fence), s.worker, bytes.NewReader(incompressible(1<<20)))
		t.Logf("snapshot upload on a read-only disk: %d %s", a.status, bytes.TrimSpace(a.body))
		wantRefusal(t, "snapshot upload", a, map[int]string{503: "unavailable"}, "read-only")
		for _, c := range []struct{ method, path, token, body string }{
			{"POST", "/api/v1/groups/disk.test/tail", n.admin, `{"high":5000}`},
			{"PUT", "/api/v1/groups/disk.other", n.admin, `{}`},
			{"POST", "/api/v1/nodes", n.admin, `{"name":"w2"}`},
			{"POST", fmt.Sprintf("/api/v1/ranges/%d/progress", s.rangeID), s.worker, fmt.Sprintf(`{"fence":%d,"next":50}`, s.fence)},
			{"POST", fmt.Sprintf("/api/v1/leases/%d/heartbeat", s.group), s.worker, fmt.Sprintf(`{"fence":%d}`, s.fence)},
		} {
			a := n.json(c.method, c.path, c.token, c.body)
			t.Logf("%s %s on a read-only disk: %d %s", c.method, c.path, a.status, bytes.TrimSpace(a.body))
			wantRefusal(t, c.method+" "+c.path, a, map[int]string{503: "unavailable"}, "read-only file system")
		}
		checkSnapshotKept(t, n, data, s)
		if a := n.json("GET", "/healthz", "", ""); a.status != 200 {
			t.Fatalf("healthz on a read-only disk: %d %s", a.status, a.body)
		}
		// The node stops without a crash; closing the catalog may report
		// that it could not be flushed.
		n.stop()
	})
}
