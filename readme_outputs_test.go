package leasehold_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// readmeOutput finds, in the README's shell blocks, a file or directory
// a command writes into the working directory: curl's -o, a redirection,
// gzip's > and the worker's --out and --nzb.
var readmeOutput = regexp.MustCompile(`(?:\s-o |\s--out (?:sqlite:|jsonl:)?|\s--nzb |[^2&]>\s?|\s2>)([A-Za-z0-9_.][A-Za-z0-9_./$:-]*)`)

// TestReadmeLeavesNoUntrackedFiles: every file the README's commands write
// into the checkout (run from the repository's directory, as it says) is
// one git ignores, so following it leaves `git status` clean.
func TestReadmeLeavesNoUntrackedFiles(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	inBlock := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		for _, m := range readmeOutput.FindAllStringSubmatch(l, -1) {
			p := m[1]
			if strings.Contains(p, "://") {
				continue // a database's URL (--out postgres://…), not a file
			}
			// A shell variable stands for a name: check the path with one.
			p = regexp.MustCompile(`\$[A-Za-z_]+`).ReplaceAllString(p, "1")
			outputs = append(outputs, p)
		}
	}
	if len(outputs) < 5 {
		t.Fatalf("found only %q written by the README's commands", outputs)
	}
	for _, p := range outputs {
		if err := exec.Command("git", "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("the README writes %s into the checkout and git does not ignore it: `git status` shows it", p)
		}
	}
}
