package store

import (
	"context"
	"strings"
	"testing"
)

// TestWriterStatementsSeek: every statement the writer prepares reaches
// the catalog's big tables (ranges, groups, group_leases, events) by an
// index or primary-key seek, never a scan or a sort, so a write costs the
// same at a million groups as at a thousand. Only the statements named in
// scanAllowed touch a table whole, each for a stated reason.
func TestWriterStatementsSeek(t *testing.T) {
	t.Parallel()
	db := openTest(t, "", Options{})
	if err := db.BulkGroups(context.Background(), "g.", 100, 100, 10); err != nil {
		t.Fatal(err)
	}
	big := []string{"ranges", "groups", "group_leases", "events", " r", " g", " l"}
	for _, q := range writerQueries {
		upper := strings.ToUpper(strings.TrimSpace(q.sql))
		if !strings.HasPrefix(upper, "SELECT") && !strings.HasPrefix(upper, "UPDATE") &&
			!strings.HasPrefix(upper, "DELETE") && !strings.HasPrefix(upper, "INSERT") && !strings.HasPrefix(upper, "WITH") {
			continue
		}
		name := strings.Join(strings.Fields(q.sql), " ")
		if len(name) > 70 {
			name = name[:70]
		}
		t.Run(name, func(t *testing.T) {
			p := plan(t, db, q.sql, make([]any, strings.Count(q.sql, "?"))...)
			for _, line := range p {
				if !strings.HasPrefix(line, "SCAN") && !strings.Contains(line, "TEMP B-TREE") {
					continue
				}
				if strings.HasPrefix(line, "SCAN") && strings.Contains(line, "USING") && strings.Contains(line, "INDEX") && !strings.Contains(line, "COVERING") {
					// An ordered walk of an index that stops at LIMIT.
					if strings.Contains(q.sql, "LIMIT") {
						continue
					}
				}
				for _, table := range big {
					if strings.Contains(line, table) {
						t.Errorf("plan %q: %q", line, p)
					}
				}
			}
		})
	}
}
