package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Batch is the body of a stream message of format 2: the Messages of one
// publish batch, in order, from one origin. A stream message per event
// cost every node of the fleet a replicated, fsynced stream write, a
// delivery and a fold for each event (4.8x a lone node's CPU a range in a
// fleet of three); one per publish batch pays those once for the events
// the publisher gathered meanwhile. The Messages inside carry neither
// Format, Origin nor Catalog: they are the batch's.
//
// A node of format 1 reads a Batch as a Message of format 2, newer than
// it reads, and holds its fold there until it is upgraded (see
// FormatVersion); this build reads both.
type Batch struct {
	Format   int       `json:"format"`
	Origin   string    `json:"origin"`
	Catalog  string    `json:"catalog"`
	Messages []Message `json:"messages"`
}

// batchBytes bounds a stream message's body (NATS takes 1 MiB at most by
// default): a publish batch whose messages are larger goes out as several
// stream messages. A single message larger than it (an event's part of
// up to MaxRangesPerMessage ranges) goes out alone.
const batchBytes = 256 << 10

// pack is msgs, one publish batch's messages in order, as the stream
// messages that carry them: as few as batchBytes allows.
func (p *Publisher) pack(msgs []Message) ([]*nats.Msg, error) {
	head, err := json.Marshal(struct {
		Format  int    `json:"format"`
		Origin  string `json:"origin"`
		Catalog string `json:"catalog"`
	}{FormatVersion, p.node, p.catalog})
	if err != nil {
		return nil, err
	}
	// head without its closing brace, then the messages.
	open := append(head[:len(head)-1:len(head)-1], `,"messages":[`...)
	var out []*nats.Msg
	var body bytes.Buffer
	var first, last Message
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		body.WriteString("]}")
		id := fmt.Sprintf("%s.%d.%d-%d.%d", p.catalog, first.Event, first.Part, last.Event, last.Part)
		out = append(out, p.streamMsg(id, last.Event, bytes.Clone(body.Bytes())))
		body.Reset()
		n = 0
	}
	for _, m := range msgs {
		m.Format, m.Origin, m.Catalog = 0, "", ""
		raw, err := json.Marshal(&m)
		if err != nil {
			return nil, err
		}
		if n > 0 && body.Len()+len(raw)+3 > batchBytes {
			flush()
		}
		if n == 0 {
			body.Write(open)
			first = m
		} else {
			body.WriteByte(',')
		}
		body.Write(raw)
		last = m
		n++
	}
	flush()
	return out, nil
}

// streamMsg is the one place a stream message of this node's is made:
// body under this node's subject, with the message id the stream
// deduplicates a resend by and the headers naming its origin, catalog
// and last event.
func (p *Publisher) streamMsg(id string, lastEvent int64, body []byte) *nats.Msg {
	msg := nats.NewMsg(SubjectPrefix + p.node)
	msg.Data = body
	msg.Header.Set(nats.MsgIdHdr, id)
	msg.Header.Set(HeaderOrigin, p.node)
	msg.Header.Set(HeaderCatalog, p.catalog)
	msg.Header.Set(HeaderEvent, strconv.FormatInt(lastEvent, 10))
	return msg
}

// readBody is a stream message's body as a Batch: a batch as it is, its
// messages given the batch's origin and catalog (a message cannot speak
// for another origin than its batch); a body without messages (format
// 1's shape, a Message) as a batch of that one message.
func readBody(data []byte) (Batch, error) {
	var body struct {
		Message
		Messages []Message `json:"messages"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return Batch{}, err
	}
	format := max(1, body.Format)
	if body.Messages == nil {
		return Batch{Format: format, Origin: body.Origin, Catalog: body.Catalog, Messages: []Message{body.Message}}, nil
	}
	b := Batch{Format: format, Origin: body.Origin, Catalog: body.Catalog, Messages: body.Messages}
	for i := range b.Messages {
		b.Messages[i].Format, b.Messages[i].Origin, b.Messages[i].Catalog = format, b.Origin, b.Catalog
	}
	return b, nil
}

// foldChunks splits a fetch's items into the catalog writes that fold
// them, at most n items each (the node's own holder calls wait on the one
// writer while the fold writes), with the mark each write records: the
// last stream message it folds whole. A write that ends inside a stream
// message (a batch of more than n events) marks the message before it,
// so a restart folds that message again, which changes nothing. The last
// write marks last, the fetch's end (own and unreadable messages
// included).
func foldChunks(items []foldItem, n int, last uint64) (chunks [][]foldItem, marks []uint64) {
	for len(items) > 0 {
		k := min(n, len(items))
		chunk := items[:k]
		items = items[k:]
		mark := chunk[k-1].seq
		switch {
		case len(items) == 0:
			mark = max(mark, last)
		case items[0].seq == mark:
			mark-- // the message goes on in the next write
		}
		chunks, marks = append(chunks, chunk), append(marks, mark)
	}
	return chunks, marks
}
