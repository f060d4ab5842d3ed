package fleet

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/store"
)

// A dump is mostly ranges, millions in a catch-up, and encoding/json
// spends most of its time on one by reflection and by checking again what
// each time's MarshalJSON wrote. appendRange writes the same bytes
// json.Marshal would (TestAppendRangeAsMarshal), by hand.

// appendRange appends r as json.Marshal encodes a store.PeerRange, and
// fails where it fails (a time past year 9999: no catalog holds one).
func appendRange(b []byte, r store.PeerRange) ([]byte, error) {
	if !encodable(r.UpdatedAt) || (r.LastErrorAt != nil && !encodable(*r.LastErrorAt)) {
		v, err := json.Marshal(r)
		return append(b, v...), err
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, r.ID, 10)
	b = append(b, `,"group_id":`...)
	b = strconv.AppendInt(b, r.GroupID, 10)
	b = append(b, `,"start":`...)
	b = strconv.AppendInt(b, r.Start, 10)
	b = append(b, `,"end":`...)
	b = strconv.AppendInt(b, r.End, 10)
	b = append(b, `,"next":`...)
	b = strconv.AppendInt(b, r.Next, 10)
	b = append(b, `,"status":`...)
	b = appendString(b, string(r.Status))
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, r.Priority, 10)
	b = append(b, `,"node_id":`...)
	if r.NodeID == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *r.NodeID, 10)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, r.Attempts, 10)
	b = append(b, `,"rule_version":`...)
	b = strconv.AppendInt(b, r.RuleVersion, 10)
	b = append(b, `,"headers":`...)
	b = strconv.AppendInt(b, r.Headers, 10)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, r.UpdatedAt)
	b = append(b, `,"last_error":`...)
	if r.LastError == nil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, *r.LastError)
	}
	b = append(b, `,"last_error_at":`...)
	if r.LastErrorAt == nil {
		b = append(b, "null"...)
	} else {
		b = appendTime(b, *r.LastErrorAt)
	}
	b = append(b, `,"node":`...)
	b = appendString(b, r.Node)
	return append(b, '}'), nil
}

// encodable reports whether time.Time's MarshalJSON takes t.
func encodable(t time.Time) bool { return t.Year() >= 0 && t.Year() <= 9999 }

// appendTime appends t, encodable, as time.Time's MarshalJSON does.
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendString appends s as encoding/json quotes it: plain printable
// ASCII as it is, anything else through json.Marshal (its escapes of
// quotes, controls, HTML characters and invalid UTF-8).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			v, _ := json.Marshal(s)
			return append(b, v...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
