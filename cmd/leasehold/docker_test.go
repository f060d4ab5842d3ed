package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerContextHasSources: the image's build context, as .dockerignore
// leaves it, holds every file the binary is built from (each package's Go
// files and embedded files, go.mod and go.sum) and none of the secrets and
// data the ignore file keeps out. The image cannot be built here (no
// Docker daemon), so the context is checked instead: a package added under
// a new top-level directory and not let in breaks `docker build` with
// "cannot find module providing package".
func TestDockerContextHasSources(t *testing.T) {
	root := moduleRoot(t)
	ignore := readDockerignore(t, filepath.Join(root, ".dockerignore"))

	list := exec.Command("go", "list", "-deps", "-json=Dir,Module,GoFiles,EmbedFiles", "./cmd/leasehold")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	need := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			Dir                 string
			Module              *struct{ Main bool }
			GoFiles, EmbedFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue // the standard library and modules go mod download fetches
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(p.GoFiles, p.EmbedFiles...) {
			need = append(need, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	if len(need) < 20 {
		t.Fatalf("only %d files found to build the binary from: %v", len(need), need)
	}
	for _, f := range need {
		if !ignore.included(f) {
			t.Errorf(".dockerignore leaves %s out of the image's build context; the binary needs it", f)
		}
	}
	for _, f := range []string{"data/catalog.db", "admin.token", "web/testdata/x.json", "cmd/leasehold/main_test.go",
		"nats.secret", "artifacts/a.png", "clients/typescript/node_modules/x/index.js"} {
		if ignore.included(f) {
			t.Errorf(".dockerignore lets %s into the image's build context", f)
		}
	}
}

// dockerignore is an ignore file's patterns, in order; the last that
// matches a path or one of its parent directories decides, and a "!"
// pattern lets back in what an earlier one left out (Docker's rules).
type dockerignore []struct {
	re     *regexp.Regexp
	negate bool
}

func readDockerignore(t *testing.T, path string) dockerignore {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerignore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		negate := strings.HasPrefix(line, "!")
		line = strings.TrimSuffix(strings.TrimPrefix(line, "!"), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		re.WriteString("$")
		d = append(d, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile(re.String()), negate})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

// included reports whether path (slash-separated, from the context's root)
// is in the build context.
func (d dockerignore) included(path string) bool {
	in := true
	for _, p := range d {
		for q := path; ; q = filepath.ToSlash(filepath.Dir(q)) {
			if p.re.MatchString(q) {
				in = p.negate
				break
			}
			if !strings.Contains(q, "/") {
				break
			}
		}
	}
	return in
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
