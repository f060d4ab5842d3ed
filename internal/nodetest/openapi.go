package nodetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/leasehold/leasehold/web"
)

// RunRecorded is the TestMain of a package whose tests talk to nodes
// Start makes, or that Recording wraps (web, client, cmd/leasehold):
// it records every request those nodes answer (RecordEnv) and, when the
// tests pass, checks each answer against web/openapi.json with
// CheckRecorded, failing the run on one the description does not name.
// It returns the exit code. Fuzzing runs the tests unrecorded.
func RunRecorded(m *testing.M) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if fuzzing() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "leasehold-api-record-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi: temp dir:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	os.Setenv(RecordEnv, dir)
	code := m.Run()
	if recordSeq.Load() == 0 {
		// The tests run (-run) started no node: there is nothing to
		// check, which is not a failure of the recording.
		fmt.Fprintln(os.Stderr, "openapi: the tests run started no node: no answers to check")
		return code
	}
	if code == 0 {
		sum, err := CheckRecorded(dir)
		fmt.Fprint(os.Stderr, sum)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: answers that do not fit web/openapi.json:\n"+err.Error())
			code = 1
		}
	}
	return code
}

func fuzzing() bool {
	f, w := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() != "" || w != nil && w.Value.String() == "true"
}

// OpenAPIValidator parses an OpenAPI description and returns its
// validator and document.
func OpenAPIValidator(spec []byte) (validator.Validator, libopenapi.Document, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("validator: %v", errs)
	}
	return v, doc, nil
}

// IsAPI says whether a path is one the description covers; the
// dashboard's pages and pprof are not.
func IsAPI(path string) bool {
	return strings.HasPrefix(path, "/api/v1/") || slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, path)
}

// CheckRecorded checks every exchange recorded in dir's *.jsonl files
// (by Start's nodes, or by the TypeScript client's tests in the same
// form) against web/openapi.json: the status must be one the description
// names for the operation and the body must fit that status's schema; a
// request the node took (2xx) must fit the description too, so it never
// refuses what the node accepts. It returns a summary, and an error
// listing what does not fit, or saying nothing was recorded.
func CheckRecorded(dir string) (string, error) {
	v, _, err := OpenAPIValidator(web.OpenAPI)
	if err != nil {
		return "", err
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var checked, requests, unknown, skipped int
	seen := map[string]int{} // "METHOD path-template status" → count
	problems := map[string]int{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return "", err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 1<<20), 8<<20)
		for sc.Scan() {
			var x Exchange
			if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
				f.Close()
				return "", fmt.Errorf("%s: %v", name, err)
			}
			path, _, _ := strings.Cut(x.URL, "?")
			if !IsAPI(path) {
				skipped++
				continue
			}
			checked++
			req, resp := exchangeHTTP(x)
			ok, errs := v.ValidateHttpResponse(req, resp)
			if !ok && len(errs) > 0 && (errs[0].IsPathMissingError() || errs[0].IsOperationMissingError()) {
				// An endpoint the description does not name: the node
				// must answer it as the API's unknown endpoint.
				if x.Status == http.StatusNotFound && errorCode(x.ResponseBody) == "not_found" {
					unknown++
					continue
				}
				problems[fmt.Sprintf("%s %s: %d %s: no such operation in the description", x.Method, path, x.Status, trim(x.ResponseBody))]++
				continue
			}
			op := x.Method + " " + template(path)
			seen[fmt.Sprintf("%s %d", op, x.Status)]++
			for _, e := range errs {
				problems[fmt.Sprintf("%s (%s): answer %d %s: %s", op, x.URL, x.Status, trim(x.ResponseBody), Describe(e))]++
			}
			if x.Status >= 200 && x.Status < 300 && !x.RequestCut {
				requests++
				req, _ := exchangeHTTP(x)
				if ok, errs := v.ValidateHttpRequest(req); !ok {
					for _, e := range errs {
						problems[fmt.Sprintf("%s: the node took (%d) a request the description refuses: %s %s", op, x.Status, trim(x.RequestBody), Describe(e))]++
					}
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return "", fmt.Errorf("%s: %v", name, err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "openapi: %d recorded answers checked against web/openapi.json (%d operation×status pairs, %d accepted requests checked), %d answers to unknown endpoints were 404 not_found, %d non-API answers skipped\n",
		checked, len(seen), requests, unknown, skipped)
	if os.Getenv("LEASEHOLD_OPENAPI_VERBOSE") != "" {
		keys := make([]string, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %5d  %s\n", seen[k], k)
		}
	}
	if checked == 0 {
		return b.String(), fmt.Errorf("no answer was recorded in %s: is %s honoured?", dir, RecordEnv)
	}
	if len(problems) == 0 {
		return b.String(), nil
	}
	keys := make([]string, 0, len(problems))
	for k := range problems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var e strings.Builder
	for i, k := range keys {
		if i == 40 {
			fmt.Fprintf(&e, "  … and %d more\n", len(keys)-i)
			break
		}
		fmt.Fprintf(&e, "  %s (×%d)\n", k, problems[k])
	}
	return b.String(), fmt.Errorf("%s", e.String())
}

// exchangeHTTP rebuilds the request and the answer of an exchange. Header
// names are made canonical: a recorder outside Go (Node) writes them in
// lower case.
func exchangeHTTP(x Exchange) (*http.Request, *http.Response) {
	req, _ := http.NewRequest(x.Method, "http://node"+x.URL, bytes.NewReader(x.RequestBody))
	req.Header = canonical(x.RequestHeader)
	path, _, _ := strings.Cut(x.URL, "?")
	switch {
	case req.Header.Get("Content-Type") != "":
	case strings.HasSuffix(path, "/snapshot") && x.Method == http.MethodPut:
		// A body of no named type is octet-stream (RFC 9110, 8.3).
		req.Header.Set("Content-Type", "application/octet-stream")
	case len(x.RequestBody) > 0:
		// curl and the tests' raw client send JSON without saying so;
		// the node reads it as JSON.
		req.Header.Set("Content-Type", "application/json")
	}
	resp := &http.Response{
		StatusCode: x.Status, Header: canonical(x.ResponseHeader), Request: req,
		Body: io.NopCloser(bytes.NewReader(x.ResponseBody)),
	}
	return req, resp
}

func canonical(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		for _, v := range vs {
			out.Add(k, v)
		}
	}
	return out
}

// Describe shortens a validation error for a report.
func Describe(e interface{ Error() string }) string {
	s := e.Error()
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func errorCode(body []byte) string {
	var e struct {
		Error struct{ Code string }
	}
	json.Unmarshal(body, &e)
	return e.Error.Code
}

var (
	idSegment   = regexp.MustCompile(`^[0-9]+$`)
	nameSegment = regexp.MustCompile(`^/api/v1/groups/[^/]+`)
)

// template turns a recorded path back into the description's path, for
// the summary.
func template(path string) string {
	path = nameSegment.ReplaceAllString(path, "/api/v1/groups/{name}")
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if idSegment.MatchString(p) {
			parts[i] = "{id}"
		}
	}
	return strings.Join(parts, "/")
}
