package client

import (
	"context"
	"net/http"
)

// RemoveMember removes node from the client's node's fleet for good: its
// events are no longer taken, its worker nodes' tokens are refused
// everywhere and its groups are taken over. The node the client talks to
// cannot be removed through itself (leasehold.ErrInvalid); a member
// running now is leasehold.ErrConflict unless force.
func (c *Client) RemoveMember(ctx context.Context, node string, force bool) error {
	path := pathf("/api/v1/peers/%s", node)
	if force {
		path += "?force=true"
	}
	_, err := c.do(ctx, http.MethodDelete, path, nil, nil)
	return err
}

// ApproveMember undoes node's removal from the fleet; one not removed is
// leasehold.ErrNotFound.
func (c *Client) ApproveMember(ctx context.Context, node string) error {
	_, err := c.do(ctx, http.MethodPost, pathf("/api/v1/peers/%s/approve", node), nil, nil)
	return err
}
