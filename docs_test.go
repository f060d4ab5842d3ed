package leasehold_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// docsChecked are the documents whose cited names TestDocNamesExist holds
// to the code.
var docsChecked = []string{"docs/ARCHITECTURE.md"}

// TestDocNamesExist fails when a doc cites (in backticks) a name the
// repository no longer has: a test (`TestX`, `FuzzX`, `BenchmarkX`), a
// function, type, method (`Type.Method`), field, constant or variable, a
// file or folder, or a catalog table or column (schema.sql). A package
// named before a name (`store` `TestX`, `store/fold.go` `Tx.OwnGroup`,
// `store.Tx.OwnGroup`) says where the name must be: in that package, not
// merely somewhere. A name ending in * is a prefix.
func TestDocNamesExist(t *testing.T) {
	t.Parallel()
	repo := readRepo(t)
	for _, doc := range docsChecked {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			// A table's cells and a prose line each name their own
			// package: a package named in one cell says nothing of the next.
			for _, cell := range strings.Split(line, "|") {
				pkg := ""
				for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
					name := m[1]
					if where, ok := repo.place(pkg, name); ok {
						pkg = where
						continue
					}
					if !codeName.MatchString(name) {
						continue // a command, a flag, a value: not a name
					}
					if repo.words[name] && !testName.MatchString(name) {
						continue // a table, a column, a JSON field, a word the code says
					}
					if q, _, ok := strings.Cut(name, "."); ok && len(repo.base[q]) == 1 {
						pkg = repo.base[q][0] // store.Tx.OwnGroup: what follows is store's too
					}
					if !repo.has(pkg, name) {
						in := "the repository"
						if pkg != "" {
							in = "package " + pkg
						}
						t.Errorf("%s:%d: `%s` is not in %s", doc, i+1, name, in)
					}
				}
			}
		}
	}
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	// codeName is a Go-like name, qualified or not, maybe a prefix (*),
	// maybe a subtest (/Case).
	testName = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)[A-Z0-9_]`)
	wordRE   = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	codeName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\*?(/[A-Za-z0-9_]+)?$`)
)

// foreign are packages outside the repository that docs qualify names by.
var foreign = map[string]bool{"http": true, "context": true, "time": true, "os": true, "json": true, "sql": true, "echo": true, "jetstream": true, "nats": true}

// repoNames is what the repository declares, by package folder.
type repoNames struct {
	dirs  map[string]bool            // package folders, slash paths
	names map[string]map[string]bool // folder → names: F, T, T.M, T.Field, tests
	all   map[string]bool            // every name anywhere
	words map[string]bool            // schema.sql's names, JSON fields, words of string literals
	base  map[string][]string        // a folder's last element → folders
}

// place reports the package folder a token names: a folder of Go files, a
// file in one (a bare file name is looked for in pkg), or another file or
// folder of the repository ("" then).
func (r *repoNames) place(pkg, tok string) (string, bool) {
	tok = strings.TrimSuffix(tok, "/")
	if pkg != "" && strings.HasSuffix(tok, ".go") && !strings.Contains(tok, "/") {
		tok = pkg + "/" + tok
	}
	if pkg != "" && r.dirs[pkg+"/"+tok] {
		return pkg + "/" + tok, true // internal/inflate in source/nntp
	}
	if r.dirs[tok] {
		return tok, true
	}
	if _, err := os.Stat(tok); err == nil && strings.ContainsAny(tok, "/.") {
		if strings.HasSuffix(tok, ".go") {
			return filepath.ToSlash(filepath.Dir(tok)), true
		}
		return "", true
	}
	return "", false
}

// has reports whether name is declared in package folder pkg ("" any).
func (r *repoNames) has(pkg, name string) bool {
	name, _, _ = strings.Cut(name, "/") // a subtest: its test
	parts := strings.Split(name, ".")
	// A qualified name's first part may be a package: store.Tx.OwnGroup.
	if len(parts) > 1 {
		if foreign[parts[0]] {
			return true
		}
		if dirs, ok := r.base[parts[0]]; ok && !r.declaredIn(pkg, name) {
			for _, d := range dirs {
				if r.declaredIn(d, strings.Join(parts[1:], ".")) {
					return true
				}
			}
			return false
		}
	}
	if pkg != "" {
		return r.declaredIn(pkg, name)
	}
	return r.declaredIn("", name)
}

func (r *repoNames) declaredIn(pkg, name string) bool {
	prefix, glob := strings.CutSuffix(name, "*")
	match := func(names map[string]bool) bool {
		if !glob {
			return names[name]
		}
		for n := range names {
			if strings.HasPrefix(n, prefix) {
				return true
			}
		}
		return false
	}
	if pkg == "" {
		return match(r.all)
	}
	return match(r.names[pkg])
}

// readRepo parses every Go file of the repository (tests and harnesses
// too) and the catalog's DDL.
func readRepo(t *testing.T) *repoNames {
	t.Helper()
	r := &repoNames{dirs: map[string]bool{}, names: map[string]map[string]bool{}, all: map[string]bool{}, words: map[string]bool{}, base: map[string][]string{}}
	add := func(dir, name string) {
		if r.names[dir] == nil {
			r.names[dir] = map[string]bool{}
		}
		r.names[dir][name] = true
		r.all[name] = true
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if !r.dirs[dir] {
			r.dirs[dir] = true
			base := filepath.Base(dir)
			if dir == "." {
				base = "leasehold"
			}
			r.base[base] = append(r.base[base], dir)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				for _, w := range wordRE.FindAllString(lit.Value, -1) {
					r.words[w] = true
				}
			}
			return true
		})
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) > 0 {
					add(dir, recvName(d.Recv.List[0].Type)+"."+d.Name.Name)
				}
				add(dir, d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(dir, s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fld := range st.Fields.List {
								for _, n := range fld.Names {
									add(dir, s.Name.Name+"."+n.Name)
									add(dir, n.Name)
								}
								if fld.Tag != nil {
									tag := reflect.StructTag(strings.Trim(fld.Tag.Value, "`"))
									if j, _, _ := strings.Cut(tag.Get("json"), ","); j != "" && j != "-" {
										r.words[j] = true // a field as the API names it
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(dir, n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The catalog's tables, columns and indexes, as `table.column` too.
	ddl, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wordRE.FindAllString(string(ddl), -1) {
		r.words[w] = true
	}
	for _, m := range regexp.MustCompile(`(?s)CREATE TABLE (\w+) \((.*?)\) STRICT`).FindAllStringSubmatch(string(ddl), -1) {
		for _, col := range regexp.MustCompile(`(?m)^\s+([a-z_]+) `).FindAllStringSubmatch(m[2], -1) {
			r.words[m[1]+"."+col[1]] = true
		}
	}
	return r
}

// recvName is a method's receiver type: T of T, *T, T[P].
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
