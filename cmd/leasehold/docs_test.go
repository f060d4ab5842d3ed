package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docCommand is one `leasehold …` command line found in a document.
type docCommand struct {
	file string
	line int
	text string // as written, from "leasehold" on
}

// commandStart finds "leasehold <subcommand>" as a command: at a line's or
// a code span's start, after a path (./leasehold, /usr/local/bin/…), a
// prompt, "$(", "&&" or an environment assignment.
var commandStart = regexp.MustCompile(`(?:^|[\s(/])leasehold (serve|worker|usenet|snapshot|admin|backup|restore|healthcheck|completion|version)\b`)

// docCommands are the leasehold command lines of a markdown file: every
// line of its code blocks (continuations joined) and every code span.
func docCommands(t *testing.T, file string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []docCommand
	add := func(n int, s string) {
		for _, loc := range commandStart.FindAllStringIndex(s, -1) {
			text := s[loc[0]:]
			text = text[strings.Index(text, "leasehold "):]
			// The command ends where the shell's line goes on to something else.
			for _, end := range []string{" | ", " && ", "; ", " # ", " >", " 2>", ")", " <", " &"} {
				if i := strings.Index(text, end); i >= 0 {
					text = text[:i]
				}
			}
			out = append(out, docCommand{file, n, strings.TrimSpace(text)})
		}
	}
	lines := strings.Split(string(b), "\n")
	inBlock := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			start := i
			for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
			}
			add(start+1, l)
			continue
		}
		for _, span := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(l, -1) {
			add(i+1, span[1])
		}
	}
	return out
}

// onlyFlags reports whether args are flags with their values and no
// command: "admin --url U --data D" as a shell variable holds it.
func onlyFlags(args []string) bool {
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			return false
		}
		if !strings.Contains(args[i], "=") {
			i++ // its value
		}
	}
	return true
}

// shellWords splits a command line as the shell would, enough for the
// docs: quotes, and any $VAR or $(…) stands for one word.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// expand turns a documented form into the command lines it stands for: a
// word "a|b" (not a URL or a path) is each of a and b.
func expand(words []string) [][]string {
	for i, w := range words {
		if strings.Contains(w, "|") && !strings.ContainsAny(w, "/:") {
			var all [][]string
			for _, alt := range strings.Split(w, "|") {
				next := append(append(append([]string{}, words[:i]...), alt), words[i+1:]...)
				all = append(all, expand(next)...)
			}
			return all
		}
	}
	return [][]string{words}
}

// TestDocsCommandLines: every `leasehold …` command line in README.md and
// docs/ is a form the CLI takes. Each runs through the CLI's own argument
// parsing with the context already cancelled and no node at the URL, so
// nothing is served or changed: a usage error (exit code 2) fails, what
// would have reached the node passes. A line that names a command alone
// (`leasehold admin`) is run with -h; serve's flags only are parsed.
func TestDocsCommandLines(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	var cmds []docCommand
	for _, f := range files {
		cmds = append(cmds, docCommands(t, f)...)
	}
	if len(cmds) < 30 {
		t.Fatalf("found %d command lines in the docs; the reader must be broken", len(cmds))
	}
	t.Chdir(t.TempDir())
	t.Setenv("LEASEHOLD_URL", "http://127.0.0.1:1")
	t.Setenv("LEASEHOLD_ADMIN_TOKEN", "docs-test-admin-token")
	t.Setenv("LEASEHOLD_TOKEN", "docs-test-node-token")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range cmds {
		for _, words := range expand(shellWords(c.text)) {
			args := words[1:]
			if len(args) == 1 || (args[0] == "admin" && onlyFlags(args[1:])) {
				args = append(args, "-h")
			}
			// A loop's counter ($i) stands for its first value.
			for j, a := range args {
				args[j] = strings.ReplaceAll(a, "$i", "1")
			}
			var err error
			var out strings.Builder
			if args[0] == "serve" {
				err = NewMain(&out, &out).ParseFlags(args[1:])
			} else {
				err = run(ctx, args, &out, &out)
			}
			if errors.Is(err, errHelp) {
				continue
			}
			// A file the docs name that this machine lacks (a key in
			// /etc) says nothing of the form.
			if errors.Is(err, fs.ErrNotExist) || (err != nil && strings.Contains(err.Error(), "no such file or directory")) {
				continue
			}
			if code := exitCode(err, &out); code == 2 {
				t.Errorf("%s:%d: leasehold %s: the CLI refuses it: %v", c.file, c.line, strings.Join(args, " "), err)
			}
		}
	}
}

// TestDocsLinksStayInRepo: every relative link of README.md, docs/ and the
// TypeScript client's README (markdown links, and paths in code spans
// that climb with ../) names a file of this repository: a clone has
// nothing beside it.
func TestDocsLinksStayInRepo(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "clients", "typescript", "README.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)|` + "`" + `(\.\./[^` + "`" + `\s]*)` + "`")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			p := filepath.Join(filepath.Dir(f), target)
			rel, err := filepath.Rel(root, p)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s links to %s, outside the repository", f, target)
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s: %v", f, target, err)
			}
		}
	}
}
