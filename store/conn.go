package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/leasehold/leasehold"
)

// The writer talks to its connection below database/sql. Every statement it
// runs is prepared once at Open and executed through the driver's own
// interfaces: database/sql's per-call Stmt wrapper, its locks and its
// conversions cost about as much as the SQLite work of a small statement,
// and the writer is the node's one serial path. Readers keep database/sql.

// wstmt is one prepared writer statement.
type wstmt struct {
	st    driver.Stmt
	exec  driver.StmtExecContext
	query driver.StmtQueryContext
}

// wconn is the writer's connection and its prepared statements, indexed
// like writerQueries.
type wconn struct {
	c     driver.Conn
	stmts []wstmt
}

func prepareWriter(ctx context.Context, dc any) (*wconn, error) {
	c, ok := dc.(driver.Conn)
	if !ok {
		return nil, fmt.Errorf("store: the driver's connection is a %T", dc)
	}
	cp, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("store: the driver's connection cannot prepare with a context")
	}
	wc := &wconn{c: c}
	for _, q := range writerQueries {
		st, err := prepare(ctx, cp, q.sql)
		if err != nil {
			wc.close()
			return nil, err
		}
		wc.stmts = append(wc.stmts, st)
	}
	return wc, nil
}

func prepare(ctx context.Context, cp driver.ConnPrepareContext, q string) (wstmt, error) {
	st, err := cp.PrepareContext(ctx, q)
	if err != nil {
		return wstmt{}, fmt.Errorf("store: preparing %q: %w", q, err)
	}
	e, ok1 := st.(driver.StmtExecContext)
	r, ok2 := st.(driver.StmtQueryContext)
	if !ok1 || !ok2 {
		st.Close()
		return wstmt{}, fmt.Errorf("store: the driver's statement lacks context methods")
	}
	return wstmt{st: st, exec: e, query: r}, nil
}

func (wc *wconn) close() {
	for _, s := range wc.stmts {
		s.st.Close()
	}
	wc.stmts = nil
}

// namedValues converts arguments the way database/sql would, with the
// common types first.
func namedValues(args []any) ([]driver.NamedValue, error) {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		var v driver.Value
		switch a := a.(type) {
		case nil, int64, string, []byte, float64, bool:
			v = a
		case int:
			v = int64(a)
		default:
			var err error
			if v, err = driver.DefaultParameterConverter.ConvertValue(a); err != nil {
				return nil, fmt.Errorf("store: argument %d: %w", i+1, err)
			}
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv, nil
}

// rows is a writer query's result, with the methods of *sql.Rows the store
// uses.
type rows struct {
	r      driver.Rows
	dest   []driver.Value
	err    error
	closed bool
}

func (r *rows) Next() bool {
	if r.closed || r.err != nil {
		return false
	}
	if err := r.r.Next(r.dest); err != nil {
		if err != io.EOF {
			r.err = err
		}
		return false
	}
	return true
}

func (r *rows) Scan(dest ...any) error { return scanValues(r.dest, dest) }

func (r *rows) Err() error { return r.err }

func (r *rows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.r.Close()
}

// row is a writer query's first row, with the Scan of *sql.Row: the query's
// error, or sql.ErrNoRows, comes out of Scan.
type row struct {
	vals []driver.Value
	err  error
}

func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return scanValues(r.vals, dest)
}

func runQuery(ctx context.Context, s driver.StmtQueryContext, args []any) (*rows, error) {
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	dr, err := s.QueryContext(ctx, nv)
	if err != nil {
		return nil, err
	}
	return &rows{r: dr, dest: make([]driver.Value, len(dr.Columns()))}, nil
}

func firstRow(rs *rows, err error) *row {
	if err != nil {
		return &row{err: err}
	}
	if !rs.Next() {
		err := rs.Err()
		if cerr := rs.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = sql.ErrNoRows
		}
		return &row{err: err}
	}
	vals := rs.dest
	return &row{vals: vals, err: rs.Close()}
}

// scanValues assigns driver values to Scan destinations, for the types the
// store scans into.
func scanValues(src []driver.Value, dest []any) error {
	if len(src) != len(dest) {
		return fmt.Errorf("store: scanning %d columns into %d destinations", len(src), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, src[i]); err != nil {
			return fmt.Errorf("store: column %d: %w", i, err)
		}
	}
	return nil
}

func assign(dest any, v driver.Value) error {
	switch d := dest.(type) {
	case *int64:
		switch v := v.(type) {
		case int64:
			*d = v
			return nil
		case string:
			n, err := strconv.ParseInt(v, 10, 64)
			*d = n
			return err
		}
	case *int:
		if v, ok := v.(int64); ok {
			*d = int(v)
			return nil
		}
	case *bool:
		if v, ok := v.(int64); ok {
			*d = v != 0
			return nil
		}
	case *string:
		switch v := v.(type) {
		case string:
			*d = v
			return nil
		case []byte:
			*d = string(v)
			return nil
		}
	case *leasehold.RangeStatus:
		// A range's status, typed as it is read.
		switch v := v.(type) {
		case string:
			*d = leasehold.RangeStatus(v)
			return nil
		case []byte:
			*d = leasehold.RangeStatus(v)
			return nil
		}
	case *[]byte:
		switch v := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = append([]byte(nil), v...)
			return nil
		case string:
			*d = []byte(v)
			return nil
		}
	case *float64:
		switch v := v.(type) {
		case float64:
			*d = v
			return nil
		case int64:
			*d = float64(v)
			return nil
		}
	case *any:
		*d = v
		return nil
	case sql.Scanner:
		return d.Scan(v)
	}
	if v == nil {
		return errors.New("converting NULL to a non-null destination")
	}
	return fmt.Errorf("cannot scan %T into %T", v, dest)
}

func (wc *wconn) exec(ctx context.Context, q *query, args ...any) (driver.Result, error) {
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return wc.stmts[q.i].exec.ExecContext(ctx, nv)
}
