package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/appliance"
)

const backupUsage = `Usage: leasehold backup [--url U] [--token T] [--data DIR] [--sign-key-file FILE] [--quiet] [--output table|json] BACKUP_DIR

Takes a consistent backup of a running node into BACKUP_DIR (new or empty),
over the node's API (GET /api/v1/backup, admin token): the catalog as of
one commit, the window snapshot files that catalog records, and, written
last, manifest.json with the size and sha-256 of every file. The node keeps
serving meanwhile. A backup that fails is removed; one cut off harder has
no manifest, which restore refuses. The backup holds no admin token.
With --sign-key-file the manifest is signed (HMAC-SHA256, into
manifest.json.hmac) with a key kept outside the backup: restore
--verify-key-file then refuses a backup changed since.

`

const restoreUsage = `Usage: leasehold restore [--data DATA] [--verify-key-file FILE] [--quiet] [--output table|json] BACKUP_DIR

Restores the backup in BACKUP_DIR onto DATA (default ./data), a new or
empty data directory: with no node running on it. Every file's sha-256,
the catalog's integrity and its schema (exactly the tables, indexes,
triggers and views this leasehold makes) are checked before anything is
written; with --verify-key-file the manifest must be signed with that key
(backup --sign-key-file); the files
are then copied beside, checked again, fsynced and moved into place, the
catalog last. A failure leaves DATA as it was. The restored node makes a
new admin token on its first start (or takes --admin-token); its workers'
tokens work as before.

`

func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOperator()
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, backupUsage); fs.PrintDefaults() }
	o.flags(fs)
	quiet := fs.Bool("quiet", false, "no progress")
	signKeyFile := fs.String("sign-key-file", "", "sign the manifest (HMAC-SHA256) with the key in `FILE`, kept outside the backup")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, "BACKUP_DIR"); err != nil {
		return err
	}
	var signKey []byte
	if *signKeyFile != "" {
		// Read first: a bad key is said before a backup is taken.
		if signKey, err = appliance.ReadBackupKey("--sign-key-file", *signKeyFile); err != nil {
			return usageError(err)
		}
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	p := newProgress(stderr, !*quiet)
	start := time.Now()
	m, err := c.Backup(ctx, pos[0], func(done, total int64) { p.show("receiving", done, total) })
	p.end()
	if err != nil {
		return err
	}
	if signKey != nil {
		if err := appliance.SignBackup(pos[0], signKey); err != nil {
			return err
		}
	}
	var bytes int64
	for _, f := range m.Files {
		bytes += f.Size
	}
	took := time.Since(start).Round(time.Millisecond)
	if o.json {
		return printJSON(stdout, map[string]any{"dir": pos[0], "manifest": m, "bytes": bytes, "seconds": took.Seconds()})
	}
	fmt.Fprintf(stdout, "backup of catalog %s taken at %s into %s: catalog and %d window snapshots, %s, in %s; sha-256 of each in %s\n",
		m.CatalogID, m.TakenAt.Format(time.RFC3339), pos[0], len(m.Files)-1, bytesText(bytes), took, leasehold.BackupManifestName)
	return nil
}

func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, restoreUsage); fs.PrintDefaults() }
	data := fs.String("data", envOr("LEASEHOLD_DATA", "./data"), "the data directory to restore onto ($LEASEHOLD_DATA)")
	quiet := fs.Bool("quiet", false, "no progress")
	verifyKeyFile := fs.String("verify-key-file", "", "refuse the backup unless its manifest is signed with the key in `FILE` (backup --sign-key-file), or older than the newest restored with it (recorded in FILE.restored)")
	allowOlder := fs.Bool("allow-older", false, "with --verify-key-file: restore a backup older than the newest restored before with the key (a deliberate rollback)")
	var out outputFlag
	fs.Var(&out, "output", "`table|json`: text for people, JSON for scripts")
	fs.BoolVar((*bool)(&out), "json", false, "print JSON for scripts (as --output json)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, "BACKUP_DIR"); err != nil {
		return err
	}
	opts := appliance.RestoreOptions{}
	var record string
	var newest uint64
	if *verifyKeyFile != "" {
		if opts.VerifyKey, err = appliance.ReadBackupKey("--verify-key-file", *verifyKeyFile); err != nil {
			return usageError(err)
		}
		// The newest backup restored with this key: an older one is a
		// signed backup swapped for an older signed one, unless asked for.
		record = appliance.RestoredRecordFile(*verifyKeyFile)
		if newest, err = appliance.ReadRestoredRecord(record); err != nil {
			return usageError(err)
		}
		if !*allowOlder {
			opts.NewestRestored = newest
		}
	} else if *allowOlder {
		return usageError(errors.New("--allow-older goes with --verify-key-file: only a signed backup's sequence is checked"))
	}
	p := newProgress(stderr, !*quiet)
	opts.Progress = func(stage string, done, total int64) { p.show(stage, done, total) }
	m, err := appliance.Restore(ctx, pos[0], *data, opts)
	p.end()
	if errors.Is(err, appliance.ErrDataDirInUse) {
		return usageError(err) // a node runs on it: exit 2, as a second serve
	}
	if errors.Is(err, appliance.ErrOlderBackup) {
		return fmt.Errorf("%w (recorded in %s); to roll back on purpose, restore it with --allow-older", err, record)
	}
	if err != nil {
		return err
	}
	if record != "" && m.Sequence > newest {
		if err := appliance.RecordRestored(record, m.Sequence); err != nil {
			fmt.Fprintf(stderr, "leasehold: restored, but the record of the newest backup restored was not written: %v\n", err)
		}
	}
	if out {
		return printJSON(stdout, map[string]any{"data": *data, "manifest": m})
	}
	fmt.Fprintf(stdout, "restored catalog %s (backup %d of %s, schema %d) and %d window snapshots onto %s; start the node on it: it makes a new admin token\n",
		m.CatalogID, m.Sequence, m.TakenAt.Format(time.RFC3339), m.SchemaVersion, len(m.Files)-1, *data)
	return nil
}

// progress draws what a long command does, on a terminal: a line redrawn
// at most five times a second. Off a terminal it draws nothing.
type progress struct {
	w     io.Writer
	on    bool
	drawn time.Time
	began time.Time
	any   bool
}

func newProgress(w io.Writer, want bool) *progress {
	return &progress{w: w, on: want && isTerminal(w), began: time.Now()}
}

func (p *progress) show(stage string, done, total int64) {
	if !p.on || time.Since(p.drawn) < 200*time.Millisecond && done != total {
		return
	}
	p.drawn = time.Now()
	line := stage + " " + bytesText(done)
	if total > 0 {
		line += fmt.Sprintf(" / %s  %3.0f%%", bytesText(total), 100*float64(done)/float64(total))
	}
	if el := time.Since(p.began).Seconds(); el > 0 {
		line += fmt.Sprintf("  %s/s", bytesText(int64(float64(done)/el)))
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.any = true
}

func (p *progress) end() {
	if p.any {
		fmt.Fprintln(p.w)
	}
}
