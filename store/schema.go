package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/leasehold/leasehold"
)

// A catalog's schema is code: a trigger runs on every write, a view or an
// index expression on reads, with the node's rights. A catalog this node
// did not make (a backup, restored) is therefore taken only if its
// schema is the one this binary embeds, object for object: an added
// trigger on nodes (re-inserting a deleted node with a token an attacker
// knows) is refused, however good its manifest's sums.

// schemaObject is one row of sqlite_schema that SQL wrote: its kind,
// name, table and DDL, normalized so that comments and layout do not
// count (a migrated catalog's ALTERed tables are laid out otherwise than
// a new one's).
type schemaObject struct{ kind, name, table, ddl string }

func (o schemaObject) String() string { return o.kind + " " + o.name }

// readSchema reads d's schema objects, sorted by kind and name. SQLite's
// own tables (AUTOINCREMENT's sqlite_sequence, ANALYZE's statistics) and
// the indexes it makes for constraints (no DDL) follow from the rest.
func readSchema(ctx context.Context, d *sql.DB) ([]schemaObject, error) {
	rows, err := d.QueryContext(ctx, `SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []schemaObject
	for rows.Next() {
		var o schemaObject
		if err := rows.Scan(&o.kind, &o.name, &o.table, &o.ddl); err != nil {
			return nil, err
		}
		switch {
		case o.kind == "table" && (o.name == "sqlite_sequence" || o.name == "sqlite_stat1" || o.name == "sqlite_stat4"):
			continue
		case o.kind == "index" && o.ddl == "" && strings.HasPrefix(o.name, "sqlite_autoindex_"):
			continue
		}
		o.ddl = normalizeDDL(o.ddl)
		out = append(out, o)
	}
	return out, rows.Err()
}

// normalizeDDL is ddl as its tokens, one space apart: comments dropped,
// whitespace not counted, words lowercased (SQL's keywords and names are
// not case-sensitive); quoted names and strings are kept as written, so
// nothing hides inside them.
func normalizeDDL(ddl string) string {
	const punct = "(),;=<>+*/%|&~!.-"
	var toks []string
	for i := 0; i < len(ddl); {
		c := ddl[i]
		switch {
		case c == '-' && strings.HasPrefix(ddl[i:], "--"):
			for i < len(ddl) && ddl[i] != '\n' {
				i++
			}
		case c == '/' && strings.HasPrefix(ddl[i:], "/*"):
			if end := strings.Index(ddl[i+2:], "*/"); end >= 0 {
				i += end + 4
			} else {
				i = len(ddl)
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closer := c
			if c == '[' {
				closer = ']'
			}
			j := i + 1
			for j < len(ddl) {
				if ddl[j] == closer {
					if closer != ']' && j+1 < len(ddl) && ddl[j+1] == closer { // a doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(ddl))
			toks = append(toks, ddl[i:j])
			i = j
		case strings.IndexByte(punct, c) >= 0:
			toks = append(toks, ddl[i:i+1])
			i++
		default:
			j := i
			for j < len(ddl) && strings.IndexByte(" \t\n\r\f\v'\"`["+punct, ddl[j]) < 0 {
				j++
			}
			toks = append(toks, strings.ToLower(ddl[i:j]))
			i = j
		}
	}
	return strings.Join(toks, " ")
}

// embeddedSchema is the schema a new catalog gets from this binary, read
// from one made in memory.
var embeddedSchema = sync.OnceValues(func() ([]schemaObject, error) {
	d, err := sql.Open("sqlite", "file:embedded-schema?mode=memory")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	if _, err := d.Exec(leasehold.Schema); err != nil {
		return nil, fmt.Errorf("store: the embedded schema: %w", err)
	}
	return readSchema(context.Background(), d)
})

// optionalObjects are what a catalog may have or not, exactly as this
// binary makes them: peer sync's indexes, made and dropped as a node joins
// a fleet or runs alone.
func optionalObjects() map[string]schemaObject {
	out := map[string]schemaObject{}
	for _, ix := range peerIndexes {
		table, _, _ := strings.Cut(strings.TrimSpace(strings.SplitN(ix.create, " ON ", 2)[1]), " ")
		out["index "+ix.name] = schemaObject{kind: "index", name: ix.name, table: table, ddl: normalizeDDL(ix.create)}
	}
	return out
}

// checkSchema compares d's schema with the embedded one and names every
// object added, missing or changed. Errors: unprocessable, internal.
func checkSchema(ctx context.Context, d *sql.DB, path string) error {
	want, err := embeddedSchema()
	if err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "%v", err)
	}
	got, err := readSchema(ctx, d)
	if err != nil {
		return leasehold.Wrap(leasehold.KindUnprocessable, err, "%s: reading its schema: %v", path, err)
	}
	wantBy := map[string]schemaObject{}
	for _, o := range want {
		wantBy[o.String()] = o
	}
	optional := optionalObjects()
	var diffs []string
	seen := map[string]bool{}
	for _, o := range got {
		key := o.String()
		seen[key] = true
		w, ok := wantBy[key]
		if !ok {
			w, ok = optional[key]
		}
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s on %s is not leasehold's", key, o.table))
		case w != o:
			diffs = append(diffs, fmt.Sprintf("%s differs from leasehold's", key))
		}
	}
	for _, o := range want {
		if !seen[o.String()] {
			diffs = append(diffs, fmt.Sprintf("%s is missing", o))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	return leasehold.Errorf(leasehold.KindUnprocessable, "%s does not have the schema this leasehold makes: %s; refused, since a catalog's triggers, views and indexes run as the node",
		path, strings.Join(diffs, "; "))
}

// CheckSchema migrates the catalog file at path (a copy being restored,
// never one a node has open) to this binary's schema version, as a node's
// first open would, and compares its schema with the embedded one. The
// file is opened with trusted_schema=OFF, so that what it holds runs no
// function with side effects while it is looked at. Errors: not found,
// unprocessable (a schema that is not this binary's), unavailable (a newer
// version), internal.
func CheckSchema(ctx context.Context, path string) error {
	d, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=trusted_schema(OFF)&_pragma=synchronous(FULL)")
	if err != nil {
		return mapError(err, "opening "+path)
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	if err := migrateSchema(d, path); err != nil {
		return err
	}
	return checkSchema(ctx, d, path)
}
