package newznab

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// keysSchema is the API's own table in the index database: the keys
// downloaders call with, stored as their SHA-256 (a key is 128 random
// bits, so a fast hash is enough: nothing to guess from it), by name.
// A revoked key keeps its row, so list shows when it went.
const keysSchema = `CREATE TABLE IF NOT EXISTS api_keys (
  name text PRIMARY KEY,
  hash bytea NOT NULL UNIQUE,
  created timestamptz NOT NULL,
  revoked timestamptz
)`

// Key is an API key's record (never the key itself).
type Key struct {
	Name    string
	Created time.Time
	// Revoked is when it was revoked; nil while it is good.
	Revoked *time.Time
}

// keyName is what a key's name may be: a word an operator types.
var keyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// ErrKeyName is returned for a name AddKey does not take.
var ErrKeyName = errors.New("newznab: a key's name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")

// ErrKeyExists is returned by AddKey for a name already given (revoked
// or not: a name means one key for good, so list never mixes two).
var ErrKeyExists = errors.New("newznab: a key of that name exists already")

// ErrNoKey is returned by RevokeKey for a name with no good key.
var ErrNoKey = errors.New("newznab: no good key of that name")

// AddKey makes a new API key called name in the index database
// (creating the table of keys on first use) and returns it; only its
// hash is stored, so it is shown this once.
func AddKey(ctx context.Context, db *pgx.Conn, name string, now time.Time) (string, error) {
	if !keyName.MatchString(name) {
		return "", ErrKeyName
	}
	if _, err := db.Exec(ctx, keysSchema); err != nil {
		return "", fmt.Errorf("newznab: making the table of keys: %w", err)
	}
	raw := make([]byte, 16)
	rand.Read(raw)
	key := hex.EncodeToString(raw)
	_, err := db.Exec(ctx, `INSERT INTO api_keys (name, hash, created) VALUES ($1, $2, $3)`, name, keyHash(key), now)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
		return "", ErrKeyExists
	}
	if err != nil {
		return "", fmt.Errorf("newznab: adding key %s: %w", name, err)
	}
	return key, nil
}

// ListKeys is every key's record, by name.
func ListKeys(ctx context.Context, db *pgx.Conn) ([]Key, error) {
	if _, err := db.Exec(ctx, keysSchema); err != nil {
		return nil, fmt.Errorf("newznab: making the table of keys: %w", err)
	}
	rows, _ := db.Query(ctx, `SELECT name, created, revoked FROM api_keys ORDER BY name`)
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		err := r.Scan(&k.Name, &k.Created, &k.Revoked)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("newznab: listing keys: %w", err)
	}
	return keys, nil
}

// RevokeKey revokes the key called name: calls with it are refused from
// then on (error 100). ErrNoKey when no good key has that name.
func RevokeKey(ctx context.Context, db *pgx.Conn, name string, now time.Time) error {
	if _, err := db.Exec(ctx, keysSchema); err != nil {
		return fmt.Errorf("newznab: making the table of keys: %w", err)
	}
	tag, err := db.Exec(ctx, `UPDATE api_keys SET revoked = $2 WHERE name = $1 AND revoked IS NULL`, name, now)
	if err != nil {
		return fmt.Errorf("newznab: revoking key %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNoKey
	}
	return nil
}

// keyHash is what the table of keys holds of a key.
func keyHash(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}
