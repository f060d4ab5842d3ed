package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/source/binaries"
)

const usenetNZBUsage = `Usage: leasehold usenet nzb --index postgres://… [-o FILE] RELEASE

Writes the NZB of a release from the shared index (the PostgreSQL
database workers write with --out postgres://…) to standard output, or
to FILE (atomically: a temporary name, then a rename). RELEASE is a
release's key (the key column of the releases table; the guid of its
item in the newznab API's answers), or its name when one release has
it. The NZB lists every
file of the release the index holds, whichever worker box read it.
--index defaults to $LEASEHOLD_OUT when that names a PostgreSQL index.

`

// runUsenetNZB is `leasehold usenet nzb`.
func runUsenetNZB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usenet nzb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usenetNZBUsage)
		fs.PrintDefaults()
	}
	index := fs.String("index", "", "the shared index, postgres://USER[:PASSWORD]@HOST[:PORT]/DB (default $LEASEHOLD_OUT)")
	out := fs.String("o", "", "write the NZB to this file instead of standard output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *index == "" && binaries.IsPostgres(os.Getenv("LEASEHOLD_OUT")) {
		*index = os.Getenv("LEASEHOLD_OUT")
	}
	switch {
	case *index == "":
		return usageError(errors.New("usenet nzb: --index postgres://… is required (or $LEASEHOLD_OUT naming one)"))
	case !binaries.IsPostgres(*index):
		return usageError(fmt.Errorf("usenet nzb: --index %q is not a postgres:// URL", *index))
	case fs.NArg() != 1:
		return usageError(fmt.Errorf("usenet nzb: one RELEASE (a key or a name), not %d arguments", fs.NArg()))
	}
	want := fs.Arg(0)
	db, err := binaries.OpenPostgres(ctx, *index)
	if err != nil {
		return indexError("usenet nzb: --index", err)
	}
	defer db.Close()
	rel, files, err := binaries.ReadReleaseFromIndex(ctx, db.Pool(), want)
	if errors.Is(err, pgx.ErrNoRows) {
		keys, kerr := binaries.ReleaseKeys(ctx, db.Pool(), want)
		switch {
		case kerr != nil:
			return kerr
		case len(keys) == 0:
			return fmt.Errorf("usenet nzb: no release with the key or name %q in the index", want)
		case len(keys) > 1:
			return fmt.Errorf("usenet nzb: %d releases are named %q: give one's key: %s", len(keys), want, strings.Join(keys, ", "))
		}
		rel, files, err = binaries.ReadReleaseFromIndex(ctx, db.Pool(), keys[0])
	}
	if err != nil {
		return fmt.Errorf("usenet nzb: %w", err)
	}
	body := binaries.NZB(rel, files)
	if *out == "" {
		_, err := stdout.Write(body)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".nzb-*")
	if err != nil {
		return fmt.Errorf("usenet nzb: -o: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return fmt.Errorf("usenet nzb: -o: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), *out)
}

// indexError is an index that would not open, said after what: a usage
// error (exit 2) when it is named wrong (a wrong password, no such
// database, a schema too new).
func indexError(what string, err error) error {
	var setup *binaries.IndexSetupError
	if errors.As(err, &setup) {
		return usageError(fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}
