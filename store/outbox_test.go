package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/poll"
)

// TestEventBodyAsMarshal: the outbox body written without reflection is
// byte for byte what json.Marshal writes, for the bodies it takes on and
// for those it hands to json.Marshal.
func TestEventBodyAsMarshal(t *testing.T) {
	t.Parallel()
	for _, body := range []map[string]any{
		nil,
		{},
		{"headers": int64(1234)},
		{"fence": int64(-7), "takeover": false, "from_node": int64(3)},
		{"attempts": 2, "rule_version": int64(0)},
		{"reason": "idle", "stopped": true},
		{"reason": `a "quoted" <b> & c\d`},
		{"name": "café", "kinds": []string{"usenet"}},
		{"error": "line\nbreak"},
		{"none": nil, "f": 1.5},
		{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9},
		{"k<": 1},
	} {
		got, err := eventBody(body)
		if err != nil {
			t.Fatalf("eventBody(%v): %v", body, err)
		}
		want := "{}"
		if len(body) > 0 {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			want = string(b)
		}
		if got != want {
			t.Errorf("eventBody(%v) = %s, want %s", body, got, want)
		}
	}
}

// TestOutboxOfRolledBackWrite: a write that fails after making outbox
// rows leaves none, while the write beside it in the same batch keeps
// its own (the rows are inserted as the batch commits).
func TestOutboxOfRolledBackWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openTest(t, "", Options{})
	before, err := db.Events(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// A write that holds the writer while two more queue behind it, so
	// those two run in one batch.
	hold, held := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- db.Write(ctx, func(tx *Tx) error { close(held); <-hold; return nil })
	}()
	<-held
	failed, kept := make(chan error, 1), make(chan error, 1)
	refused := errors.New("refused after its event")
	go func() {
		failed <- db.Write(ctx, func(tx *Tx) error {
			if _, err := tx.CreateNode(NewNode{Name: "rolled-back", TokenHash: []byte("a"), Capacity: 1}); err != nil {
				return err
			}
			return refused
		})
	}()
	go func() {
		kept <- db.Write(ctx, func(tx *Tx) error {
			_, err := tx.CreateNode(NewNode{Name: "kept", TokenHash: []byte("b"), Capacity: 1})
			return err
		})
	}()
	poll.Eventually(t, 10*time.Second, "two writes queued behind the held one", func() bool { return len(db.queue) == 2 })
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-failed; !errors.Is(err, refused) {
		t.Fatalf("the failing write: %v, want its own error", err)
	}
	if err := <-kept; err != nil {
		t.Fatalf("the write beside it: %v", err)
	}
	after, err := db.Events(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range after[len(before):] {
		var body struct{ Name string }
		if err := json.Unmarshal(e.Body, &body); err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Kind+" "+body.Name)
	}
	if len(names) != 1 || names[0] != EventNodeRegistered+" kept" {
		t.Fatalf("outbox rows after the batch: %q, want only the kept node's registration", names)
	}
}
