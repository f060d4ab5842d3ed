package leasehold_test

import (
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxMethods is the most methods a product type declares: past it a type
// is several types under one name, and a reader no longer holds what it
// does in mind. TestProductSizes caps files; this caps types, which a
// file cap misses when a type's methods are spread over many files.
const maxMethods = 30

// methodsAllowed are the product types over maxMethods, each with why it
// is left so. Key: the package's directory (the root package's name for
// the root) and the type, "store.Tx". A name here that is back within the
// limit fails the test too, so the list only shrinks.
var methodsAllowed = map[string]string{
	"store.Tx":               "the catalog's write transaction: each rule's statements are its methods, by concern over 20 files; left for the round that gives each rule its own room",
	"store.DB":               "the catalog's reads outside a write, one method a query (the dashboard's, the API's, the fleet's)",
	"web.Server":             "one handler a route of the API and the dashboard, named in New's route table",
	"client.Client":          "the Go client of the HTTP API: one method a call, as web/openapi.json lists them",
	"appliance.Coordinator":  "the door of the holders' and the operator's calls (web.Holders and web.Admin): one method a call",
	"fleet.Claims":           "the fleet's claims bucket (grant, renew, release, watch) over 3 files; left while the fleet's own work is in flight",
	"cmd/leasehold.adminCmd": "one method a `leasehold admin` subcommand, read as the command's index",
}

// TestMethodCounts fails on a product type with more than maxMethods
// methods that methodsAllowed does not name, and on an allowed name no
// longer over.
func TestMethodCounts(t *testing.T) {
	t.Parallel()
	problems, err := methodProblems(".", methodsAllowed)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestMethodCountsPlanted is TestMethodCounts' planted failure: a type of
// maxMethods+1 methods is reported, one of maxMethods is not, and so is
// an allowed type that is gone.
func TestMethodCountsPlanted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("package many\n\ntype Big struct{}\n\ntype Fits[T any] struct{}\n\n")
	for i := range maxMethods + 1 {
		fmt.Fprintf(&src, "func (*Big) M%d() {}\n", i)
		if i < maxMethods {
			fmt.Fprintf(&src, "func (Fits[T]) M%d() {}\n", i)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "many"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "many", "many.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err := methodProblems(dir, map[string]string{"many.Gone": "planted"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.HasPrefix(problems[0], "many.Big has 31 methods") || !strings.HasPrefix(problems[1], "methodsAllowed names many.Gone") {
		t.Errorf("problems of the planted types: %q, want many.Big over and many.Gone stale", problems)
	}
}

// methodProblems counts the methods of each product type under root and
// says which are over maxMethods unallowed, and which allowed are not.
func methodProblems(root string, allowed map[string]string) ([]string, error) {
	counts := map[string]int{}
	err := walkProduct(root, token.NewFileSet(), func(file string, f *ast.File) {
		pkg := path.Dir(file)
		if pkg == "." {
			pkg = f.Name.Name
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				if name, ok := strings.CutSuffix(funcName(fd), "."+fd.Name.Name); ok {
					counts[pkg+"."+name]++
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	var problems []string
	for name, n := range counts {
		if _, ok := allowed[name]; n > maxMethods && !ok {
			problems = append(problems, fmt.Sprintf("%s has %d methods, over the limit (%d): split it, or name it in methodsAllowed with why", name, n, maxMethods))
		}
	}
	for name := range allowed {
		if counts[name] <= maxMethods {
			problems = append(problems, fmt.Sprintf("methodsAllowed names %s, which has %d methods now (or is gone): take it off the list", name, counts[name]))
		}
	}
	sort.Strings(problems)
	return problems, nil
}
