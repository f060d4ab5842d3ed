package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/leasehold/leasehold"
)

// backups takes backups of the node back to back through the admin API
// while the load runs, so the kill lands during one most rounds. After
// the restart, checkBackups asks that the node left no catalog copy
// behind, that the backup the kill cut off is refused by restore (it has
// no manifest) and changes nothing, and that the last whole one restores
// with the real binary.
type backups struct {
	s    *session
	dir  string
	wg   sync.WaitGroup
	mu   sync.Mutex
	done []string // backups that finished, in order
	cut  []string // backups the kill cut off
}

// startBackups runs backups until ctx ends.
func (s *session) startBackups(ctx context.Context) *backups {
	b := &backups{s: s, dir: filepath.Join(s.cfg.dir, "backups", fmt.Sprint(s.stats.kills+1))}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			dir := filepath.Join(b.dir, fmt.Sprint(i))
			_, err := s.admin.Backup(ctx, dir, nil)
			b.mu.Lock()
			if err == nil {
				b.done = append(b.done, dir)
			} else {
				b.cut = append(b.cut, dir)
			}
			b.mu.Unlock()
			if err != nil {
				return // the node is dead or dying
			}
		}
	}()
	return b
}

// check runs after the restart.
func (b *backups) check(ctx context.Context) {
	b.wg.Wait()
	s := b.s
	defer os.RemoveAll(b.dir)
	entries, _ := os.ReadDir(s.node.dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "backup-") {
			s.violate("backup", "the restarted node left %s, a catalog copy of a backup the kill cut off, in its data dir", e.Name())
		}
	}
	s.stats.backups += len(b.done)
	if len(b.cut) > 0 {
		cut := b.cut[len(b.cut)-1]
		if _, err := os.Stat(filepath.Join(cut, leasehold.BackupManifestName)); err == nil {
			s.violate("backup", "backup %s failed, yet has a manifest", cut)
		} else {
			s.stats.backupsCut++
			target := filepath.Join(b.dir, "restore-cut")
			if out, err := exec.CommandContext(ctx, s.cfg.bin, "restore", "--quiet", "--data", target, cut).CombinedOutput(); err == nil {
				s.violate("backup", "restore took the backup the kill cut off (%s): %s", cut, out)
			} else if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
				s.violate("backup", "a refused restore of %s made %s", cut, target)
			}
		}
	}
	if len(b.done) > 0 {
		last := b.done[len(b.done)-1]
		target := filepath.Join(b.dir, "restored")
		if out, err := exec.CommandContext(ctx, s.cfg.bin, "restore", "--quiet", "--data", target, last).CombinedOutput(); err != nil {
			s.violate("backup", "restore of the whole backup %s: %v: %s", last, err, out)
		} else {
			s.stats.backupsRestored++
		}
	}
}
