package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"
)

// Tx is the writer's transaction as one queued write sees it. Its methods
// are the catalog's writes; each returns leasehold error kinds.
type Tx struct {
	w   *wconn
	db  *DB
	ctx context.Context
	now time.Time
	cur *write
}

// Now is the clock reading this write runs at.
func (tx *Tx) Now() time.Time { return tx.now }

// AfterCommit runs f after the transaction holding this write has
// committed, before the writer's caller is answered. If the write is rolled
// back, f never runs. Use it for effects outside SQLite (removing a file
// the catalog no longer points at).
func (tx *Tx) AfterCommit(f func()) {
	if tx.cur != nil {
		tx.cur.after = append(tx.cur.after, f)
	}
}

// query is a statement the writer prepares once at Open.
type query struct {
	i   int
	sql string
}

var writerQueries []*query

// wq registers a writer statement. Every statement the writer runs is a
// package-level wq, so all of them are prepared before the first write.
func wq(s string) *query {
	q := &query{i: len(writerQueries), sql: s}
	writerQueries = append(writerQueries, q)
	return q
}

var (
	qPing       = wq(`SELECT 1`)
	qBegin      = wq(`BEGIN IMMEDIATE`)
	qCommit     = wq(`COMMIT`)
	qRollback   = wq(`ROLLBACK`)
	qSavepoint  = wq(`SAVEPOINT w`)
	qRollbackTo = wq(`ROLLBACK TO w`)
	qRelease    = wq(`RELEASE w`)
)

func (tx *Tx) exec(q *query, args ...any) (sql.Result, error) {
	return tx.w.exec(tx.ctx, q, args...)
}

func (tx *Tx) queryRow(q *query, args ...any) *row {
	return firstRow(tx.query(q, args...))
}

func (tx *Tx) query(q *query, args ...any) (*rows, error) {
	return runQuery(tx.ctx, tx.w.stmts[q.i].query, args)
}

// queryRowSQL runs a query that is not prepared at Open (tests, pragmas)
// and returns its first row.
func (tx *Tx) queryRowSQL(q string, args ...any) *row {
	st, err := prepare(tx.ctx, tx.w.c.(driver.ConnPrepareContext), q)
	if err != nil {
		return &row{err: err}
	}
	defer st.st.Close()
	return firstRow(runQuery(tx.ctx, st.query, args))
}

// execSQL runs a statement that is not worth preparing at Open (bulk
// loads): it is prepared, run once and closed.
func (tx *Tx) execSQL(q string, args ...any) (sql.Result, error) {
	st, err := prepare(tx.ctx, tx.w.c.(driver.ConnPrepareContext), q)
	if err != nil {
		return nil, err
	}
	defer st.st.Close()
	nv, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return st.exec.ExecContext(tx.ctx, nv)
}

// ms is a time as stored: unix milliseconds.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS is a stored time back as UTC.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func fromNullMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

func nullInt(v sql.NullInt64) *int64 {
	if !v.Valid {
		return nil
	}
	x := v.Int64
	return &x
}
