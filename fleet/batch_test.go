package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// TestBatchPackRead: a publish batch's messages go out in as few stream
// messages as batchBytes allows, each under it unless one message alone
// is larger, with distinct ids and the last event in its header; read
// back they are the same messages in the same order, each named by the
// batch's origin and catalog whatever it says itself.
func TestBatchPackRead(t *testing.T) {
	t.Parallel()
	p := &Publisher{node: "node-a", catalog: "cat-a"}
	at := time.Date(2026, 12, 7, 1, 2, 3, 0, time.UTC)
	var msgs []Message
	for i := range 300 {
		m := Message{Format: FormatVersion, Origin: p.node, Catalog: p.catalog, Event: int64(i + 1), Parts: 1, At: at, Kind: store.EventRangeFinished,
			Group: &store.PeerGroup{Group: leasehold.Group{Name: fmt.Sprintf("alt.g%d", i), Priority: 1, Active: true, RangeSize: 100, Start: 1}}}
		// Every tenth carries many ranges: the batch must be split.
		n := 1
		if i%10 == 0 {
			n = 400
		}
		for s := range n {
			m.Ranges = append(m.Ranges, store.PeerRange{Range: leasehold.Range{Start: int64(s*100 + 1), End: int64(s*100 + 100), Next: int64(s*100 + 1), Status: leasehold.StatusPlanned, UpdatedAt: at}})
		}
		msgs = append(msgs, m)
	}
	// And one part alone larger than a stream message's bound.
	big := msgs[len(msgs)-1]
	big.Event, big.Ranges = 301, nil
	for s := range MaxRangesPerMessage {
		big.Ranges = append(big.Ranges, store.PeerRange{Range: leasehold.Range{Start: int64(s*100 + 1), End: int64(s*100 + 100), Next: int64(s*100 + 1), Status: leasehold.StatusDone, UpdatedAt: at, LastError: new(strings.Repeat("x", 200))}})
	}
	msgs = append(msgs, big)

	out, err := p.pack(msgs)
	if err != nil {
		t.Fatal(err)
	}
	var total int
	for _, m := range msgs {
		raw, _ := json.Marshal(m)
		total += len(raw)
	}
	if min := total/batchBytes + 1; len(out) < min || len(out) > 2*min+1 {
		t.Fatalf("%d stream messages for %d bytes of messages, want about %d", len(out), total, min)
	}
	ids := map[string]bool{}
	var got []Message
	for i, sm := range out {
		if sm.Subject != SubjectPrefix+"node-a" || sm.Header.Get(HeaderOrigin) != "node-a" || sm.Header.Get(HeaderCatalog) != "cat-a" {
			t.Fatalf("stream message %d: subject %q, headers %v", i, sm.Subject, sm.Header)
		}
		id := sm.Header.Get(nats.MsgIdHdr)
		if ids[id] || !strings.HasPrefix(id, "cat-a.") {
			t.Fatalf("stream message %d: id %q repeated or not the catalog's", i, id)
		}
		ids[id] = true
		b, err := readBody(sm.Data)
		if err != nil {
			t.Fatal(err)
		}
		if len(sm.Data) > batchBytes && len(b.Messages) > 1 {
			t.Fatalf("stream message %d: %d bytes, over %d, with %d messages", i, len(sm.Data), batchBytes, len(b.Messages))
		}
		if b.Format != FormatVersion || b.Origin != "node-a" || b.Catalog != "cat-a" || len(b.Messages) == 0 {
			t.Fatalf("stream message %d reads as format %d from %q (%q), %d messages", i, b.Format, b.Origin, b.Catalog, len(b.Messages))
		}
		if last := b.Messages[len(b.Messages)-1].Event; sm.Header.Get(HeaderEvent) != fmt.Sprint(last) {
			t.Fatalf("stream message %d: event header %q, last event %d", i, sm.Header.Get(HeaderEvent), last)
		}
		got = append(got, b.Messages...)
	}
	if len(got) != len(msgs) {
		t.Fatalf("%d messages read back, want %d", len(got), len(msgs))
	}
	for i := range msgs {
		w, _ := json.Marshal(msgs[i])
		g, _ := json.Marshal(got[i])
		if string(w) != string(g) {
			t.Fatalf("message %d read back differs: event %d from %q (%q), %d ranges; want event %d from %q (%q), %d ranges",
				i, got[i].Event, got[i].Origin, got[i].Catalog, len(got[i].Ranges), msgs[i].Event, msgs[i].Origin, msgs[i].Catalog, len(msgs[i].Ranges))
		}
	}

	// A message inside a batch speaks for the batch's origin only.
	forged := []byte(`{"format":2,"origin":"node-a","catalog":"cat-a","messages":[{"origin":"node-b","catalog":"cat-b","event":1,"part":0,"parts":1,"at":"2026-12-07T01:02:03Z","kind":"range_finished"}]}`)
	b, err := readBody(forged)
	if err != nil || len(b.Messages) != 1 || b.Messages[0].Origin != "node-a" || b.Messages[0].Catalog != "cat-a" {
		t.Fatalf("a message naming another origin inside a batch reads as %+v, %v", b, err)
	}
	// A body of format 1's shape is one message.
	one, _ := json.Marshal(Message{Origin: "node-b", Catalog: "cat-b", Event: 7, Parts: 1, At: at, Kind: store.EventGroupUpdated})
	b, err = readBody(one)
	if err != nil || b.Format != 1 || b.Origin != "node-b" || len(b.Messages) != 1 || b.Messages[0].Event != 7 {
		t.Fatalf("a format-1 message reads as %+v, %v", b, err)
	}
}

// TestFoldChunks: a fetch's items are folded at most n a write, and each
// write's mark is the last stream message it folds whole: a write that
// ends inside a message marks the one before, and the last write marks
// the fetch's end.
func TestFoldChunks(t *testing.T) {
	t.Parallel()
	item := func(seq uint64) foldItem { return foldItem{seq: seq} }
	items := []foldItem{item(5), item(5), item(5), item(6), item(8), item(8)}
	chunks, marks := foldChunks(items, 2, 9)
	want := []uint64{4, 6, 9}
	if len(chunks) != 3 || fmt.Sprint(marks) != fmt.Sprint(want) {
		t.Fatalf("%d writes marked %v, want 3 marked %v", len(chunks), marks, want)
	}
	for i, c := range chunks {
		if len(c) != 2 {
			t.Fatalf("write %d folds %d items, want 2", i, len(c))
		}
	}
	// One message of more than n items: every write but the last marks
	// the one before it.
	_, marks = foldChunks([]foldItem{item(3), item(3), item(3)}, 1, 3)
	if fmt.Sprint(marks) != "[2 2 3]" {
		t.Fatalf("marks %v, want [2 2 3]", marks)
	}
	if chunks, _ := foldChunks(nil, 16, 4); len(chunks) != 0 {
		t.Fatalf("%d writes for no items", len(chunks))
	}
}
