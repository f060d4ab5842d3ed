package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/leasehold/leasehold"
)

// Watermarks lists up to limit active groups of the node whose water
// marks are oldest (never reported first): the groups to ask the source
// about next (rule 11). It takes a node token.
func (c *Client) Watermarks(ctx context.Context, limit int) ([]leasehold.Watermarks, error) {
	var out leasehold.WatermarksAnswer
	if _, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/watermarks?limit=%d", limit), nil, &out); err != nil {
		return nil, err
	}
	return out.Groups, nil
}

// ReportWatermarks tells the node the named group's water marks as its
// source reports them (0 ≤ low ≤ high+1); the node plans the tail up to
// high and answers how many ranges it planned. Errors: not found (no such
// group), unprocessable (inconsistent marks). It takes a node token.
func (c *Client) ReportWatermarks(ctx context.Context, name string, low, high int64) (int64, error) {
	in := leasehold.WatermarkCall{Low: leasehold.Int(low), High: leasehold.Int(high)}
	var out leasehold.WatermarkReport
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/groups/%s/watermark", name), in, &out); err != nil {
		return 0, err
	}
	return out.Planned, nil
}

// Kinds asks the node which kinds of group it hands this client's node
// (rule 12): the kinds the water-mark list is drawn from. A worker that
// reads one kind of source checks it at start, so a node registered for
// other kinds is a clear error, not a worker that never gets work. It
// takes a node token.
func (c *Client) Kinds(ctx context.Context) ([]string, error) {
	var out leasehold.WatermarksAnswer
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/watermarks?limit=1", nil, &out); err != nil {
		return nil, err
	}
	return out.Kinds, nil
}

// ReportSourceError tells the node that the named group's source cannot
// be read, with what the source said (1 to 4096 bytes): the node shows it
// on the group and makes it a finding after two in a row (rule 13); the
// next ReportWatermarks clears it. Errors: forbidden (the group is not of
// this node's kinds), not found. It takes a node token.
func (c *Client) ReportSourceError(ctx context.Context, name, text string) error {
	if len(text) > 4096 {
		text = text[:4096]
	}
	in := leasehold.WatermarkCall{Error: &text}
	_, err := c.do(ctx, http.MethodPost, pathf("/api/v1/groups/%s/watermark", name), in, nil)
	return err
}
