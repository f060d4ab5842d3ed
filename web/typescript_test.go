package web_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tsMirrors names, for each schema of openapi.json, the interface of the
// TypeScript client's types.ts that mirrors it ("" for a schema it has no
// interface for, with why).
var tsMirrors = map[string]string{
	"Snapshot":        "Snapshot",
	"SnapshotStored":  "SnapshotStored",
	"Quarantine":      "Quarantine",
	"SourceError":     "SourceError",
	"Group":           "Group",
	"Lease":           "Lease",
	"GroupDetail":     "GroupDetail",
	"Range":           "Range",
	"Node":            "Node",
	"RegisteredNode":  "RegisteredNode",
	"NewToken":        "NewToken",
	"WatermarkReport": "WatermarkReport",
	"Rules":           "Rules",
	"Grant":           "Grant",
	"Finding":         "Finding",
	"Findings":        "Findings",
	"Fleet":           "Fleet",
	// The TS client reads these answers inline, in the call that gets
	// them (client.ts), and never hands them to its caller whole.
	"Error":       "", // errors.ts turns it into a LeaseholdError
	"RangeCounts": "", // GroupDetail.ranges is a Record by status
	"PeerState":   "", // GroupDetail.peer is kept opaque
	"NextRange":   "", // next() answers a Range
	"Planned":     "", // plan calls answer the count
	"Watermarks":  "", // watermarks() answers Watermark[]
	"Fenced":      "", // a request body, written in each call
}

// tsOnly are the interfaces of types.ts that mirror no schema: request
// bodies openapi.json writes inline in its operations, and list items.
var tsOnly = []string{"NodeSpec", "NodeChange", "GroupSpec", "Watermark"}

// TestTypeScriptTypes holds clients/typescript/src/types.ts to openapi.json:
// every schema's properties are the fields of the interface mirroring it,
// no more and no fewer, and every schema and interface is accounted for.
func TestTypeScriptTypes(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../clients/typescript/src/types.ts")
	if err != nil {
		t.Fatal(err)
	}
	ifaces := tsInterfaces(string(src))
	schemas := openAPIFields(t)

	for name, fields := range schemas {
		mirror, ok := tsMirrors[name]
		if !ok {
			t.Errorf("openapi schema %s: no entry in tsMirrors (name its types.ts interface, or \"\" with why)", name)
			continue
		}
		if mirror == "" {
			continue
		}
		got, ok := ifaces[mirror]
		if !ok {
			t.Errorf("openapi schema %s: types.ts has no interface %s", name, mirror)
			continue
		}
		for _, f := range fields {
			if !slices.Contains(got, f) {
				t.Errorf("%s: field %q is in openapi.json, not in types.ts", name, f)
			}
		}
		for _, f := range got {
			if !slices.Contains(fields, f) {
				t.Errorf("%s: field %q is in types.ts, not in openapi.json", name, f)
			}
		}
	}
	for name := range tsMirrors {
		if _, ok := schemas[name]; !ok {
			t.Errorf("tsMirrors names schema %s, which openapi.json no longer has", name)
		}
	}
	mirrored := map[string]bool{}
	for _, m := range tsMirrors {
		mirrored[m] = true
	}
	for name := range ifaces {
		if !mirrored[name] && !slices.Contains(tsOnly, name) {
			t.Errorf("types.ts interface %s mirrors no openapi schema: map it in tsMirrors or name it in tsOnly", name)
		}
	}
}

// openAPIFields reads each schema's property names from openapi.json, an
// allOf's parts merged (a $ref part by the named schema's properties).
func openAPIFields(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	type schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		AllOf      []struct {
			Ref        string                     `json:"$ref"`
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"allOf"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var fieldsOf func(name string) []string
	fieldsOf = func(name string) []string {
		s := doc.Components.Schemas[name]
		var out []string
		for p := range s.Properties {
			out = append(out, p)
		}
		for _, part := range s.AllOf {
			if ref, ok := strings.CutPrefix(part.Ref, "#/components/schemas/"); ok {
				out = append(out, fieldsOf(ref)...)
			}
			for p := range part.Properties {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	out := map[string][]string{}
	for name := range doc.Components.Schemas {
		out[name] = fieldsOf(name)
	}
	return out
}

var (
	tsInterfaceRE = regexp.MustCompile(`^export interface (\w+)(?: extends (\w+))? \{`)
	tsFieldRE     = regexp.MustCompile(`^\s*(\w+)\??:`)
)

// tsInterfaces reads each exported interface's field names from types.ts,
// an extended interface's fields included. Only fields at the interface's
// own level count: a field's inline object type is not read into it.
func tsInterfaces(src string) map[string][]string {
	own := map[string][]string{}
	parent := map[string]string{}
	var cur string
	depth := 0
	for _, line := range strings.Split(src, "\n") {
		if m := tsInterfaceRE.FindStringSubmatch(line); m != nil && depth == 0 {
			cur, parent[m[1]] = m[1], m[2]
			own[cur] = []string{}
		} else if cur != "" && depth == 1 {
			if m := tsFieldRE.FindStringSubmatch(line); m != nil {
				own[cur] = append(own[cur], m[1])
			}
		}
		if strings.HasPrefix(strings.TrimSpace(line), "/") || strings.HasPrefix(strings.TrimSpace(line), "*") {
			continue // a comment's braces are not the type's
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth == 0 {
			cur = ""
		}
	}
	out := map[string][]string{}
	for name := range own {
		var fields []string
		for n := name; n != ""; n = parent[n] {
			fields = append(fields, own[n]...)
		}
		slices.Sort(fields)
		out[name] = slices.Compact(fields)
	}
	return out
}
