package web_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/pb33f/libopenapi-validator/schema_validation"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/nodetest"
	"github.com/leasehold/leasehold/web"
)

// TestMain records every request the web tests send to a node and its
// answer, and after the tests checks each answer against web/openapi.json
// (nodetest.RunRecorded).
func TestMain(m *testing.M) { os.Exit(nodetest.RunRecorded(m)) }

// TestOpenAPIDocument: the node serves its description without auth, as
// embedded, and the description is valid OpenAPI 3.1 (checked against the
// specification's schema by libopenapi-validator), names every error
// code, and gives every operation an id, a summary and its errors.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
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

	_, doc, err := nodetest.OpenAPIValidator(body)
	if err != nil {
		t.Fatal(err)
	}
	if got := doc.GetVersion(); got != "3.1.0" {
		t.Errorf("openapi version %q, want 3.1.0", got)
	}
	if ok, errs := schema_validation.ValidateOpenAPIDocument(doc); !ok {
		for _, e := range errs {
			t.Errorf("not valid OpenAPI 3.1: %s", nodetest.Describe(e))
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
	for _, k := range []leasehold.ErrorKind{leasehold.KindInvalid, leasehold.KindUnauthorized, leasehold.KindForbidden,
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
	t.Parallel()
	n := nodetest.Start(t, nodetest.Options{})
	e := web.New(web.DoorsOf(n.App), web.Options{AdminToken: n.AdminToken}).Handler().(*echo.Echo)
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
		if !nodetest.IsAPI(r.Path) || r.Method == echo.RouteNotFound {
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
