package main

import (
	"context"
	"errors"
	"io"
)

// Stubs until the operator and worker subcommands land.

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("worker: not built yet")
}

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("admin: not built yet")
}

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("snapshot: not built yet")
}
