package web_test

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

	"github.com/labstack/echo/v4"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/web"
)

// TestMain records every request the web tests send to a node and its
// answer (nodetest.RecordEnv), and after the tests checks each answer
// against web/openapi.json: its status must be one the description names
// for the operation, and its body must fit that status's schema. A
// request the node took (2xx) must fit the description too, so the
// description never refuses what the node accepts. Fuzzing skips it.
func TestMain(m *testing.M) {
	flag.Parse()
	if fuzzing() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "leasehold-api-record-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi: temp dir:", err)
		os.Exit(2)
	}
	os.Setenv(nodetest.RecordEnv, dir)
	code := m.Run()
	if code == 0 {
		sum, err := checkRecorded(dir)
		fmt.Fprint(os.Stderr, sum)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: answers that do not fit web/openapi.json:\n"+err.Error())
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func fuzzing() bool {
	f, w := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() != "" || w != nil && w.Value.String() == "true"
}

// newValidator parses the description and returns its validator.
func newValidator(spec []byte) (validator.Validator, libopenapi.Document, error) {
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

// isAPI says whether a path is one the description covers; the
// dashboard's pages and pprof are not.
func isAPI(path string) bool {
	return strings.HasPrefix(path, "/api/v1/") || slices.Contains([]string{"/healthz", "/readyz", "/metrics"}, path)
}

// checkRecorded checks every recorded exchange in dir and returns a
// summary, and an error listing the answers that do not fit.
func checkRecorded(dir string) (string, error) {
	v, _, err := newValidator(web.OpenAPI)
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
			var x nodetest.Exchange
			if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
				f.Close()
				return "", fmt.Errorf("%s: %v", name, err)
			}
			path, _, _ := strings.Cut(x.URL, "?")
			if !isAPI(path) {
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
				problems[fmt.Sprintf("%s (%s): answer %d %s: %s", op, x.URL, x.Status, trim(x.ResponseBody), describe(e))]++
			}
			if x.Status >= 200 && x.Status < 300 && !x.RequestCut {
				requests++
				req, _ := exchangeHTTP(x)
				if ok, errs := v.ValidateHttpRequest(req); !ok {
					for _, e := range errs {
						problems[fmt.Sprintf("%s: the node took (%d) a request the description refuses: %s %s", op, x.Status, trim(x.RequestBody), describe(e))]++
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
		return b.String(), fmt.Errorf("no answer was recorded: is %s honoured by nodetest?", nodetest.RecordEnv)
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

// exchangeHTTP rebuilds the request and the answer of an exchange.
func exchangeHTTP(x nodetest.Exchange) (*http.Request, *http.Response) {
	req, _ := http.NewRequest(x.Method, "http://node"+x.URL, bytes.NewReader(x.RequestBody))
	req.Header = x.RequestHeader.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
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
		StatusCode: x.Status, Header: x.ResponseHeader, Request: req,
		Body: io.NopCloser(bytes.NewReader(x.ResponseBody)),
	}
	return req, resp
}

func describe(e interface{ Error() string }) string {
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

// TestOpenAPIDocument: the node serves its description without auth, as
// embedded, and the description is valid OpenAPI 3.1 (checked against the
// specification's schema by libopenapi-validator), names every error
// code, and gives every operation an id, a summary and its errors.
func TestOpenAPIDocument(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	resp, err := http.Get(n.URL + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Equal(body, web.OpenAPI) {
		t.Fatal("the served description is not the embedded one")
	}
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil || !bytes.Equal(onDisk, web.OpenAPI) {
		t.Fatalf("web/openapi.json differs from the embedded description (%v)", err)
	}

	_, doc, err := newValidator(body)
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.GetVersion(); got != "3.1.0" {
		t.Errorf("openapi version %q, want 3.1.0", got)
	}
	if ok, errs := schema_validation.ValidateOpenAPIDocument(doc); !ok {
		for _, e := range errs {
			t.Errorf("not valid OpenAPI 3.1: %s", describe(e))
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  %s at %s", f.Reason, f.KeywordLocation)
			}
		}
	}

	var spec struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(body, &spec); err != nil {
		t.Fatal(err)
	}
	codes := spec.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	for _, k := range []leasehold.Kind{leasehold.KindInvalid, leasehold.KindUnauthorized, leasehold.KindForbidden,
		leasehold.KindNotFound, leasehold.KindLeaseLost, leasehold.KindConflict, leasehold.KindTooLarge,
		leasehold.KindUnprocessable, leasehold.KindNoSpace, leasehold.KindUnavailable, leasehold.KindInternal} {
		if !slices.Contains(codes, string(k)) {
			t.Errorf("the Error schema's codes %v lack %q", codes, k)
		}
	}
	for path, item := range spec.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string                     `json:"operationId"`
				Summary     string                     `json:"summary"`
				Responses   map[string]json.RawMessage `json:"responses"`
				Security    []map[string]any           `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if op.OperationID == "" || op.Summary == "" {
				t.Errorf("%s %s has no operationId or summary", method, path)
			}
			if strings.HasPrefix(path, "/api/v1/") && path != "/api/v1/openapi.json" {
				for _, s := range []string{"401", "403"} {
					if _, ok := op.Responses[s]; !ok {
						t.Errorf("%s %s does not name its %s", method, path, s)
					}
				}
				if len(op.Security) == 0 {
					t.Errorf("%s %s names no token", method, path)
				}
			}
		}
	}
}

// TestOpenAPIRoutes: every API route the server has is in the
// description, and every operation of the description is served.
func TestOpenAPIRoutes(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	e := web.New(n.App, web.Options{AdminToken: n.AdminToken}).Handler().(*echo.Echo)
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(web.OpenAPI, &spec); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, item := range spec.Paths {
		for method := range item {
			if method != "parameters" {
				described[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	param := regexp.MustCompile(`:([a-z]+)`)
	served := map[string]bool{}
	for _, r := range e.Routes() {
		if !isAPI(r.Path) || r.Method == echo.RouteNotFound {
			continue
		}
		op := r.Method + " " + param.ReplaceAllString(r.Path, "{$1}")
		served[op] = true
		if !described[op] {
			t.Errorf("the server serves %s; web/openapi.json does not describe it", op)
		}
	}
	for op := range described {
		if !served[op] {
			t.Errorf("web/openapi.json describes %s; the server does not serve it", op)
		}
	}
}
