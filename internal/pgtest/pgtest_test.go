package pgtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestDatabase starts the shared server, makes a database and asks it a
// query over TCP with the password; a wrong password is refused (the
// server authenticates even on loopback).
func TestDatabase(t *testing.T) {
	u := Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "psql", "-At", "-c", "SELECT 40+2", u).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("psql %s: %v: %s", u, err, out)
	}
	bad := strings.Replace(u, Shared(t).Password(), "wrong", 1)
	if out, err := exec.CommandContext(ctx, "psql", "-At", "-c", "SELECT 1", bad).CombinedOutput(); err == nil {
		t.Fatalf("a wrong password was let in: %s", out)
	}
}
