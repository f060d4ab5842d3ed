package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func snapshotCmd(t *testing.T, n *nodetest.Node, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	args = append(args[:1:1], append([]string{"--url", n.URL, "--token", n.AdminToken}, args[1:]...)...)
	err = runSnapshot(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestSnapshot(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	admin(t, n, "groups", "create", "alt.snap")
	dir := t.TempDir()
	// Incompressible enough that the gzip is a few hundred KiB.
	raw := make([]byte, 0, 1<<20)
	for i := 0; len(raw) < 1<<20; i++ {
		raw = append(raw, byte(i*7919>>3), byte(i))
	}
	blob := gzipped(t, raw)
	in := filepath.Join(dir, "in.gz")
	if err := os.WriteFile(in, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := snapshotCmd(t, n, "put", "alt.snap", in, "--next", "501", "--quiet")
	if err != nil || !strings.Contains(out, "next 501") {
		t.Fatalf("put: got %q, %v", out, err)
	}

	get := filepath.Join(dir, "out.gz")
	t.Run("Get", func(t *testing.T) {
		out, _, err := snapshotCmd(t, n, "get", "alt.snap", "-o", get)
		if err != nil || !strings.Contains(out, "sha-256 checked") {
			t.Fatalf("get: got %q, %v", out, err)
		}
		if b, _ := os.ReadFile(get); !bytes.Equal(b, blob) {
			t.Errorf("got %d bytes, want the %d put (stored as is)", len(b), len(blob))
		}
	})
	t.Run("ResumeBroken", func(t *testing.T) {
		// A broken earlier run left the first half in out.gz.part.
		os.Remove(get)
		if err := os.WriteFile(get+".part", blob[:len(blob)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, err := snapshotCmd(t, n, "get", "alt.snap", "-o", get)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "resuming") {
			t.Errorf("stderr: got %q, want a resume", stderr)
		}
		if b, _ := os.ReadFile(get); !bytes.Equal(b, blob) {
			t.Errorf("got %d bytes, want the %d stored", len(b), len(blob))
		}
		if _, err := os.Stat(get + ".part"); !os.IsNotExist(err) {
			t.Errorf("the part is still there: %v", err)
		}
	})
	t.Run("ResumeOfAnotherSnapshot", func(t *testing.T) {
		// The part on disk is of some other snapshot: the digest catches
		// it and the download starts over.
		os.Remove(get)
		if err := os.WriteFile(get+".part", bytes.Repeat([]byte{'x'}, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, err := snapshotCmd(t, n, "get", "alt.snap", "-o", get)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "digest mismatch") {
			t.Errorf("stderr: got %q, want the mismatch told", stderr)
		}
		if b, _ := os.ReadFile(get); !bytes.Equal(b, blob) {
			t.Errorf("got %d bytes, want the %d stored", len(b), len(blob))
		}
	})
	t.Run("Stdout", func(t *testing.T) {
		out, _, err := snapshotCmd(t, n, "get", "alt.snap", "-o", "-")
		if err != nil || out != string(blob) {
			t.Errorf("got %d bytes, %v; want the %d stored", len(out), err, len(blob))
		}
	})
	t.Run("PutRaw", func(t *testing.T) {
		plain := filepath.Join(dir, "plain")
		if err := os.WriteFile(plain, []byte("a raw window"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := snapshotCmd(t, n, "put", "alt.snap", plain, "--next", "7"); err != nil {
			t.Fatal(err)
		}
		out, _, err := snapshotCmd(t, n, "get", "alt.snap", "-o", "-")
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(zr); string(b) != "a raw window" {
			t.Errorf("got %q, want the raw body gzipped by the node", b)
		}
	})
	t.Run("NoSnapshot", func(t *testing.T) {
		admin(t, n, "groups", "create", "alt.empty")
		if _, _, err := snapshotCmd(t, n, "get", "alt.empty", "-o", filepath.Join(dir, "none")); err == nil {
			t.Error("got nil error for a group without a snapshot")
		}
	})
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"NoVerb", nil},
		{"UnknownVerb", []string{"move"}},
		{"PutWithoutNext", []string{"put", "alt.snap", in}},
		{"GetWithoutGroup", []string{"get"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var o, e bytes.Buffer
			if err := runSnapshot(context.Background(), tt.args, &o, &e); !isUsage(err) {
				t.Errorf("got %v, want a usage error", err)
			}
		})
	}
}

// TestSnapshotPutRefusedBeforeUpload: `snapshot put` of a held group is
// refused before any of the file is sent: the progress bar, drawn as the
// file is read for sending, is never drawn.
func TestSnapshotPutRefusedBeforeUpload(t *testing.T) {
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	heldGroup(t, n, "alt.held")
	window := filepath.Join(t.TempDir(), "w.gz")
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i * 7919 >> 3)
	}
	if err := os.WriteFile(window, gzipped(t, big), 0o600); err != nil {
		t.Fatal(err)
	}
	c := client.New(n.URL, n.AdminToken)
	var stdout, stderr bytes.Buffer
	err := snapshotPut(context.Background(), c, "alt.held", window, 1, false, true, &stdout, &stderr)
	if !errors.Is(err, leasehold.ErrConflict) || !strings.Contains(err.Error(), "held") {
		t.Fatalf("snapshot put of a held group: %v, want a conflict saying it is held", err)
	}
	if stderr.Len() != 0 {
		t.Errorf("snapshot put drew %q before the refusal, want nothing drawn", stderr.String())
	}
}
