package fleet

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/store"
)

// BenchmarkObjectStore moves window snapshots of the sizes in
// LEASEHOLD_BENCH_OBJSTORE_MIB (e.g. "1024,4096"; skipped when unset)
// through a real embedded nats-server's object store, once per chunk size
// in LEASEHOLD_BENCH_OBJSTORE_CHUNKS_KIB (default "128,0": the client's
// default and the Replicator's own, 0), under LEASEHOLD_BENCH_DIR (default
// a test temp dir). The window is incompressible (ChaCha8), stored on node
// A as an operator's upload, then:
//
//   - cp+sync: `cp` of A's file and `sync` of the copy, the disk's pace;
//   - client-put: nats.go's ObjectStore.Put of the file, for comparison
//     (it may fail with 429, see snapshotInFlight; the row then says so);
//   - replicate: A's Replicator uploads it (read, chunk, ack);
//   - get: a bare download to sha-256, the object store's read pace;
//   - import: B's Replicator downloads it into B's snapshot store (write,
//     both digest checks, fsync).
//
// Each step prints a row "objstore-row size_mib step chunk_kib seconds
// mib_s peak_rss_mib rss_growth_mib sys_mib": the process's peak resident
// memory during the step (VmHWM, reset before it) and how far it rose
// above the resident memory at the step's start. The nats-server runs in
// this process, as it does embedded in a node, so its buffers count.
// Disk: the file on A, the object and B's copy at once (3× the size);
// each is freed before the next size. scripts/bench-objstore.sh runs this
// and prints the table.
func BenchmarkObjectStore(b *testing.B) {
	sizes := benchInts(b, "LEASEHOLD_BENCH_OBJSTORE_MIB", "")
	if len(sizes) == 0 {
		b.Skip("LEASEHOLD_BENCH_OBJSTORE_MIB is not set")
	}
	chunks := benchInts(b, "LEASEHOLD_BENCH_OBJSTORE_CHUNKS_KIB", "128,0")
	dir := os.Getenv("LEASEHOLD_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "objstore-bench-"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	ctx := context.Background()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: filepath.Join(dir, "nats"),
	})
	if err != nil {
		b.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	js := benchConnect(b, s.ClientURL())
	apps := map[string]*appliance.Appliance{}
	dbs := map[string]*store.DB{}
	for _, name := range []string{"a", "b"} {
		app, db, err := openApp(appliance.Config{DataDir: filepath.Join(dir, name), HistoryMinFreeBytes: 0, SnapshotMaxBytes: 1 << 40, Logger: claimQuiet})
		if err != nil {
			b.Fatal(err)
		}
		defer app.Close()
		if _, _, err := app.Coordinator.PutGroup(ctx, "g", store.GroupSpec{}); err != nil {
			b.Fatal(err)
		}
		apps[name], dbs[name] = app, db
	}
	gA, _ := dbs["a"].GroupByName(ctx, "g")
	gB, _ := dbs["b"].GroupByName(ctx, "g")
	fmt.Printf("objstore-row size_mib step chunk_kib seconds mib_s peak_rss_mib rss_growth_mib sys_mib\n")

	for i := 0; i < b.N; i++ {
		for _, mib := range sizes {
			size := int64(mib) << 20
			var snap appliance.Upload
			step := benchStep(mib, "store-on-a", 0, size, func() error {
				snap = appliance.Upload{GroupID: gA.ID, Next: int64(mib), Gzip: true,
					Body: io.LimitReader(rand.NewChaCha8([32]byte{byte(mib)}), size)}
				_, err := apps["a"].Snapshots.Put(ctx, snap)
				return err
			})
			if step != nil {
				b.Fatal(step)
			}
			_, rec, err := apps["a"].Snapshots.Open(ctx, gA.ID)
			if err != nil || rec == nil {
				b.Fatal(rec, err)
			}
			file := apps["a"].Snapshots.Path(gA.ID, *rec)
			cp := filepath.Join(dir, "copy.gz")
			if err := benchStep(mib, "cp+sync", 0, size, func() error {
				if out, err := exec.Command("cp", file, cp).CombinedOutput(); err != nil {
					return fmt.Errorf("cp: %v: %s", err, out)
				}
				if out, err := exec.Command("sync", cp).CombinedOutput(); err != nil {
					return fmt.Errorf("sync: %v: %s", err, out)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			os.Remove(cp)

			for _, kib := range chunks {
				ra, err := NewReplicator(ctx, js, dbs["a"], apps["a"].Snapshots, ReplicatorConfig{Node: "node-a", ChunkSize: kib << 10, Logger: claimQuiet})
				if err != nil {
					b.Fatal(err)
				}
				rb, err := NewReplicator(ctx, js, dbs["b"], apps["b"].Snapshots, ReplicatorConfig{Node: "node-b", Logger: claimQuiet})
				if err != nil {
					b.Fatal(err)
				}
				ck := int(ra.chunk >> 10)
				// nats.go's own Put, for comparison: it may fail (see
				// snapshotInFlight); the row says so and the run goes on.
				if err := benchStep(mib, "client-put", ck, size, func() error {
					f, err := os.Open(file)
					if err != nil {
						return err
					}
					defer f.Close()
					_, err = ra.obs.Put(ctx, jetstream.ObjectMeta{Name: "g", Opts: &jetstream.ObjectMetaOptions{ChunkSize: ra.chunk}}, f)
					return err
				}); err != nil {
					fmt.Printf("objstore-row %d client-put %d failed: %v\n", mib, ck, strings.ReplaceAll(err.Error(), " ", "_"))
				}
				if err := benchDelete(ra, "g"); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
					b.Fatal(err)
				}
				if err := benchStep(mib, "replicate", ck, size, func() error {
					res, err := ra.replicate(ctx, "g")
					if err == nil && res != "ok" {
						err = fmt.Errorf("replicate: %s", res)
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
				if err := benchStep(mib, "get", ck, size, func() error {
					dctx, cancel := context.WithTimeout(ctx, time.Hour)
					defer cancel()
					obj, err := ra.obs.Get(dctx, "g")
					if err != nil {
						return err
					}
					defer obj.Close()
					n, err := io.Copy(sha256.New(), obj)
					if err == nil && n != size {
						err = fmt.Errorf("got %d bytes of %d", n, size)
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
				if err := benchStep(mib, "import-to-b", ck, size, func() error {
					got, err := rb.Import(ctx, "g")
					if err == nil && (got == nil || got.SHA256 != rec.SHA256) {
						err = fmt.Errorf("imported %+v, want sha %s", got, rec.SHA256)
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
				// Free the disk: B's copy (replaced by a small one) and the
				// object.
				if _, err := apps["b"].Snapshots.Put(ctx, appliance.Upload{GroupID: gB.ID, Gzip: true, Body: strings.NewReader("x")}); err != nil {
					b.Fatal(err)
				}
				if err := benchDelete(ra, "g"); err != nil {
					b.Fatal(err)
				}
				ra.Stop()
				rb.Stop()
			}
			if _, err := apps["a"].Snapshots.Put(ctx, appliance.Upload{GroupID: gA.ID, Gzip: true, Body: strings.NewReader("x")}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchDelete deletes an object, allowing its purge the time a busy disk
// takes over gigabytes.
func benchDelete(r *Replicator, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), snapshotPurgeWait)
	defer cancel()
	return r.obs.Delete(ctx, name)
}

// benchConnect is a client of the server at url, closed with the
// benchmark.
func benchConnect(b *testing.B, url string) jetstream.JetStream {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return js
}

// benchStep times do, with the process's peak resident memory reset
// before it, and prints its row.
func benchStep(mib int, step string, chunkKiB int, size int64, do func() error) error {
	runtime.GC()
	snapResetHWM()
	before := benchProcStatus("VmRSS")
	start := time.Now()
	err := do()
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("%d MiB %s (chunk %d KiB) after %s: %w", mib, step, chunkKiB, took, err)
	}
	peak := benchProcStatus("VmHWM")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("objstore-row %d %s %d %.1f %.0f %d %d %d\n", mib, step, chunkKiB, took.Seconds(),
		float64(size)/(1<<20)/took.Seconds(), peak>>20, (peak-before)>>20, ms.Sys>>20)
	return nil
}

// benchProcStatus is a memory line of /proc/self/status in bytes; 0 where
// there is none.
func benchProcStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// snapResetHWM starts VmHWM again from the current resident memory
// (Linux: writing 5 to clear_refs).
func snapResetHWM() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// benchInts reads a comma-separated list of integers from env (or def).
func benchInts(b *testing.B, env, def string) []int {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			b.Fatalf("%s: %q is not a size", env, f)
		}
		out = append(out, n)
	}
	return out
}
