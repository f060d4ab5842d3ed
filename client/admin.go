package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
)

// The admin calls take the admin token. A node token gets 403
// (leasehold.ErrForbidden), a wrong one 401 (leasehold.ErrUnauthorized).

// NodeSpec is the registration of a worker node. Nil fields take the node's
// defaults.
type NodeSpec = leasehold.NodeSpec

// NodeChange is what ChangeNode sets on a node; nil fields stay.
type NodeChange = leasehold.NodeChange

// ChangeNode sets node id's kinds or capacity (PATCH /nodes/{id}). An
// unknown id is leasehold.ErrNotFound; a bad kind leasehold.ErrInvalid.
func (c *Client) ChangeNode(ctx context.Context, id int64, ch NodeChange) (*leasehold.Node, error) {
	var n leasehold.Node
	if _, err := c.do(ctx, http.MethodPatch, fmt.Sprintf("/api/v1/nodes/%d", id), ch, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// RegisterNode registers a worker node. The answer is the only place its
// token is ever shown. A taken name is leasehold.ErrConflict; a bad one
// leasehold.ErrInvalid.
func (c *Client) RegisterNode(ctx context.Context, spec NodeSpec) (*leasehold.Node, error) {
	var n leasehold.Node
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/nodes", spec, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// Nodes lists the worker nodes with the groups each holds now.
func (c *Client) Nodes(ctx context.Context) ([]leasehold.Node, error) {
	var ns []leasehold.Node
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/nodes", nil, &ns); err != nil {
		return nil, err
	}
	return ns, nil
}

// NodesAt lists the worker nodes as Nodes does, with the node's clock at
// its answer (its Date header; the zero time when it sent none), so that
// how long ago a node was seen is told on the node's clock, whatever the
// caller's says.
func (c *Client) NodesAt(ctx context.Context) ([]leasehold.Node, time.Time, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/api/v1/nodes"})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer resp.Body.Close()
	var ns []leasehold.Node
	if err := json.NewDecoder(resp.Body).Decode(&ns); err != nil {
		return nil, time.Time{}, leasehold.Wrap(leasehold.KindInternal, err, "GET /api/v1/nodes: bad answer: %v", err)
	}
	at, _ := http.ParseTime(resp.Header.Get("Date"))
	return ns, at, nil
}

// PauseNode pauses node id: it is leased nothing more until resumed, and
// the pause outlives a restart of the node. by names who paused it (may be
// empty). An unknown id is leasehold.ErrNotFound.
func (c *Client) PauseNode(ctx context.Context, id int64, by string) (*leasehold.Node, error) {
	return c.pauseOrResume(ctx, id, "pause", by)
}

// ResumeNode lifts a pause of node id. An unknown id is leasehold.ErrNotFound.
func (c *Client) ResumeNode(ctx context.Context, id int64, by string) (*leasehold.Node, error) {
	return c.pauseOrResume(ctx, id, "resume", by)
}

func (c *Client) pauseOrResume(ctx context.Context, id int64, verb, by string) (*leasehold.Node, error) {
	var in any
	if by != "" {
		in = leasehold.PauseCall{By: by}
	}
	var n leasehold.Node
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/nodes/%d/%s", id, verb), in, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// DeleteNode removes node id and its token; the node releases what it held
// at the resume points. An unknown id is leasehold.ErrNotFound; a node that
// holds groups is leasehold.ErrConflict (naming how many) unless force.
func (c *Client) DeleteNode(ctx context.Context, id int64, force bool) error {
	path := pathf("/api/v1/nodes/%d", id)
	if force {
		path += "?force=true"
	}
	_, err := c.do(ctx, http.MethodDelete, path, nil, nil)
	return err
}

// DeleteGroup deletes the group name with its ranges and window. An
// unknown group is leasehold.ErrNotFound; a held group is
// leasehold.ErrConflict. In a fleet it is deleted at every node.
func (c *Client) DeleteGroup(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, pathf("/api/v1/groups/%s", name), nil, nil)
	return err
}

// RotateNodeToken gives node id a new token and returns it; the old one
// is refused from then on. The admin token may do it, or the node's own.
func (c *Client) RotateNodeToken(ctx context.Context, id int64) (string, error) {
	var out leasehold.NewToken
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/nodes/%d/token", id), nil, &out); err != nil {
		return "", err
	}
	return out.Token, nil
}

// RotateAdminToken gives the node a new admin token and returns it; the
// old one and every dashboard session signed in with it are refused from
// then on, and a node that keeps its token in a file has replaced it.
func (c *Client) RotateAdminToken(ctx context.Context) (string, error) {
	var out leasehold.NewToken
	if _, err := c.do(ctx, http.MethodPost, "/api/v1/admin/token", nil, &out); err != nil {
		return "", err
	}
	return out.Token, nil
}

// GroupSpec creates or updates a group. Nil fields keep the current value
// (or take the default on creation); Start counts only on creation.
type GroupSpec = leasehold.GroupSpec

// PutGroup creates the group name, or updates it, and reports which. A bad
// name is leasehold.ErrInvalid.
func (c *Client) PutGroup(ctx context.Context, name string, spec GroupSpec) (g *leasehold.Group, created bool, err error) {
	resp, err := c.send(ctx, request{method: http.MethodPut, path: pathf("/api/v1/groups/%s", name), in: spec})
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	g = new(leasehold.Group)
	if err := json.NewDecoder(resp.Body).Decode(g); err != nil {
		return nil, false, leasehold.Wrap(leasehold.KindInternal, err, "PUT group %s: bad answer: %v", name, err)
	}
	return g, resp.StatusCode == http.StatusCreated, nil
}

// GroupPage is one page of groups; Next is the cursor of the following page,
// empty after the last.
type GroupPage = leasehold.GroupPage

// Groups lists up to limit groups (0: the node's default) after the cursor
// after (empty: from the first), in id order.
func (c *Client) Groups(ctx context.Context, after string, limit int) (*GroupPage, error) {
	var p GroupPage
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/groups"+pageQuery(nil, after, limit), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// AllGroups lists every group, following the pages.
func (c *Client) AllGroups(ctx context.Context) ([]leasehold.Group, error) {
	var all []leasehold.Group
	after := ""
	for {
		p, err := c.Groups(ctx, after, 0)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Groups...)
		// A cursor that does not move would loop for ever.
		if p.Next == "" || p.Next == after || len(p.Groups) == 0 {
			return all, nil
		}
		after = p.Next
	}
}

// Group is the group name with its lease (nil when nobody holds it) and its
// range counts by status. An unknown name is leasehold.ErrNotFound.
func (c *Client) Group(ctx context.Context, name string) (*leasehold.GroupDetail, error) {
	var g leasehold.GroupDetail
	if _, err := c.do(ctx, http.MethodGet, pathf("/api/v1/groups/%s", name), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// PlanTail plans the group's tail up to high and returns how many ranges
// were planned; the same call twice plans nothing new.
func (c *Client) PlanTail(ctx context.Context, name string, high int64) (int64, error) {
	return c.plan(ctx, name, "tail", leasehold.PlanTailCall{High: &high})
}

// PlanHistory plans the group's history down to low and returns how many
// ranges were planned; the same call twice plans nothing new.
func (c *Client) PlanHistory(ctx context.Context, name string, low int64) (int64, error) {
	return c.plan(ctx, name, "history", leasehold.PlanHistoryCall{Low: &low})
}

func (c *Client) plan(ctx context.Context, name, verb string, in any) (int64, error) {
	var out leasehold.PlanAnswer
	if _, err := c.do(ctx, http.MethodPost, pathf("/api/v1/groups/%s/%s", name, verb), in, &out); err != nil {
		return 0, err
	}
	return out.Planned, nil
}

// RangePage is one page of a group's ranges; Next is the cursor of the
// following page, empty after the last.
type RangePage = leasehold.RangePage

// Ranges lists up to limit ranges (0: the node's default) of group name
// after the cursor after, only those of status when it is not empty.
func (c *Client) Ranges(ctx context.Context, name string, status leasehold.RangeStatus, after string, limit int) (*RangePage, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", string(status))
	}
	var p RangePage
	if _, err := c.do(ctx, http.MethodGet, pathf("/api/v1/groups/%s/ranges", name)+pageQuery(q, after, limit), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// AllRanges lists every range of group name (of status, when not empty).
func (c *Client) AllRanges(ctx context.Context, name string, status leasehold.RangeStatus) ([]leasehold.Range, error) {
	var all []leasehold.Range
	after := ""
	for {
		p, err := c.Ranges(ctx, name, status, after, 0)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Ranges...)
		if p.Next == "" || p.Next == after || len(p.Ranges) == 0 {
			return all, nil
		}
		after = p.Next
	}
}

// RetryRange plans a failed range again with its attempts reset. The range
// is returned when the node answers with it. A range that is not failed is
// leasehold.ErrConflict; an unknown one leasehold.ErrNotFound.
func (c *Client) RetryRange(ctx context.Context, id int64) (*leasehold.Range, error) {
	var r leasehold.Range
	ok, err := c.do(ctx, http.MethodPost, pathf("/api/v1/ranges/%d/retry", id), nil, &r)
	if err != nil || !ok || r.ID == 0 {
		return nil, err
	}
	return &r, nil
}

// LiftQuarantine lets a quarantined group be leased again with the window
// it has, and returns the group. An unknown name is leasehold.ErrNotFound.
func (c *Client) LiftQuarantine(ctx context.Context, name string) (*leasehold.Group, error) {
	var g leasehold.Group
	if _, err := c.do(ctx, http.MethodDelete, pathf("/api/v1/groups/%s/quarantine", name), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// DropGroupSnapshot drops a group's window (its next holder starts
// without one) and lifts its quarantine, and returns the group. A held
// group is leasehold.ErrConflict.
func (c *Client) DropGroupSnapshot(ctx context.Context, name string) (*leasehold.Group, error) {
	var g leasehold.Group
	if _, err := c.do(ctx, http.MethodDelete, pathf("/api/v1/groups/%s/snapshot", name), nil, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// Rules is a version of the rules the workers index by; Body is the JSON
// object as the operator put it.
type Rules = leasehold.RulesJSON

// PutRules stores body, a JSON object, as the next version of the rules and
// returns its version. Anything but an object is leasehold.ErrInvalid.
func (c *Client) PutRules(ctx context.Context, body json.RawMessage) (int64, error) {
	var out leasehold.RulesVersion
	if _, err := c.do(ctx, http.MethodPut, "/api/v1/rules", body, &out); err != nil {
		return 0, err
	}
	return out.Version, nil
}

// CurrentRules returns the current rules.
func (c *Client) CurrentRules(ctx context.Context) (*Rules, error) {
	var r Rules
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/rules", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Findings is the watchman's report: what is stuck, with its age, and the
// backlog of planned work waiting for a worker (never a stall).
type Findings = leasehold.Findings

// Findings returns the watchman's current report.
func (c *Client) Findings(ctx context.Context) (*Findings, error) {
	var f Findings
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/findings", nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Peers returns the node's view of its fleet: its own outbox and, for each
// peer, how far its events are folded here.
func (c *Client) Peers(ctx context.Context) (*leasehold.FleetStatus, error) {
	var st leasehold.FleetStatus
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/peers", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func pageQuery(q url.Values, after string, limit int) string {
	if q == nil {
		q = url.Values{}
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}
