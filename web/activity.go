package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasehold/leasehold"
)

// The operator's log: one structured line for each takeover, range
// failure, quarantine and admin write, naming who did it (admin, or the
// worker node's name) and from where (the remote address; never a
// token), and refused holder calls summed per node at most once a
// minute, so a worker looping on a lost lease is one line a minute, not
// one a call.

// caller is who made a request, as the log names it.
func caller(c echo.Context) []any {
	return []any{"who", who(c), "remote", c.Request().RemoteAddr}
}

// who is the admin or the worker node's name.
func who(c echo.Context) string {
	if n := nodeOf(c); n.ID != 0 {
		return n.Name
	}
	return "admin"
}

// note puts a log line's entry on the dashboard's timeline.
func (s *Server) note(c echo.Context, kind leasehold.TimelineKind, group, detail string, bad bool) {
	s.noteBy(who(c), c.Request().RemoteAddr, kind, group, detail, bad)
}

// noteBy is note for an entry that may have no request behind it.
func (s *Server) noteBy(who, remote string, kind leasehold.TimelineKind, group, detail string, bad bool) {
	s.timeline.add(timelineEntry{At: s.node.Watchman.Now(), Kind: kind, Group: group, Who: who,
		Remote: remote, Detail: detail, Bad: bad})
}

// requestKey holds a request's echo.Context in its context.Context, for
// what the store tells after a write that request caused (a range failed
// at the attempt limit): it is told on the request's goroutine before the
// write returns to the handler, so the echo.Context is still the
// request's.
type requestKey struct{}

// rememberRequest puts a writing request's echo.Context in its context;
// reads write no ranges, and are spared the copy of their request.
func rememberRequest(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := c.Request(); writeMethod(r.Method) {
			c.SetRequest(r.WithContext(context.WithValue(r.Context(), requestKey{}, c)))
		}
		return next(c)
	}
}

// fleetCaller is who the operator's log names for a write no request on
// this node's API made: a claim lost or won anew, a peer's newer claim
// folded, an admin write a peer forwarded.
const fleetCaller = "fleet"

// callerOf is who made the write of ctx, where from and by which route:
// the request's, or the fleet with neither.
func callerOf(ctx context.Context) (name, remote, route string) {
	c, ok := ctx.Value(requestKey{}).(echo.Context)
	if !ok {
		return fleetCaller, "", ""
	}
	return who(c), c.Request().RemoteAddr, c.Request().Method + " " + c.Path()
}

// logTakeover is the line of a lease that took a group from a quiet
// holder.
func (s *Server) logTakeover(c echo.Context, g *leasehold.Grant) {
	from := g.TakenFrom
	if from == "" {
		from = "(deleted node)"
	}
	s.log.Info("takeover: group taken from a quiet holder", append([]any{
		"group", g.Group.Name, "group_id", g.Group.ID, "fence", g.Fence, "from", from,
		"snapshot_next", snapshotNext(g.Snapshot)}, caller(c)...)...)
	s.note(c, entryTakeover, g.Group.Name, fmt.Sprintf("taken from %s, a quiet holder, at fence %d; resumes from %s",
		from, g.Fence, snapshotText(g.Snapshot)), false)
}

func snapshotText(s *leasehold.Snapshot) string {
	if s == nil {
		return "no window snapshot"
	}
	return fmt.Sprintf("the window snapshot at %d", s.Next)
}

func snapshotNext(s *leasehold.Snapshot) any {
	if s == nil {
		return "none"
	}
	return s.Next
}

// nameOfGroup is the group's name for a log line, its id when it cannot be
// read.
func (s *Server) nameOfGroup(ctx context.Context, id int64) any {
	g, err := s.node.Admin.GroupByID(ctx, id)
	if err != nil {
		return id
	}
	return g.Name
}

// logRangeFailed is the line of a range a worker failed (rule 10).
func (s *Server) logRangeFailed(c echo.Context, r leasehold.Range, text string, retry bool) {
	msg := "range failed: planned again"
	kind, detail := entryRangeRetry, fmt.Sprintf("range %d (%d … %d) planned again at %d after attempt %d: %s", r.ID, r.Start, r.End, r.Next, r.Attempts, text)
	if r.Status == leasehold.StatusFailed {
		msg = "range failed: failed until an operator retries it"
		kind, detail = entryRangeFailed, fmt.Sprintf("range %d (%d … %d) failed until an operator retries it, after %d attempt(s)%s: %s",
			r.ID, r.Start, r.End, r.Attempts, map[bool]string{true: "", false: ", no retry asked"}[retry], text)
	}
	group := s.nameOfGroup(c.Request().Context(), r.GroupID)
	s.note(c, kind, fmt.Sprint(group), detail, true)
	s.log.Warn(msg, append([]any{
		"group", group, "range", r.ID, "start", r.Start, "end", r.End, "next", r.Next,
		"status", r.Status, "attempts", r.Attempts, "retry", retry, "error", text}, caller(c)...)...)
}

// logRangesAtLimit are the lines of ranges a write failed because they
// had used up their attempts (rule 10), whichever write it was: a
// release, a takeover, next passing a range over, a node deleted, a
// window dropped, a group disowned. The write's caller is named when a
// request made it, the fleet when none did.
func (s *Server) logRangesAtLimit(ctx context.Context, failed []leasehold.Range) {
	by, remote, route := callerOf(ctx)
	limit := s.node.Config.MaxAttempts
	for _, r := range failed {
		group := s.nameOfGroup(ctx, r.GroupID)
		s.noteBy(by, remote, entryRangeFailed, fmt.Sprint(group), fmt.Sprintf(
			"range %d (%d … %d) failed after %d attempt(s), at the attempt limit (%d): an operator must retry it; it resumes at %d",
			r.ID, r.Start, r.End, r.Attempts, limit, r.Next), true)
		line := []any{"group", group, "range", r.ID, "start", r.Start, "end", r.End, "next", r.Next,
			"status", r.Status, "attempts", r.Attempts, "max_attempts", limit, "reason", "max attempts", "who", by}
		if route != "" {
			line = append(line, "remote", remote, "route", route)
		}
		s.log.Warn("range failed at the attempt limit: failed until an operator retries it", line...)
	}
}

// logQuarantine is the line of a group quarantined by a release with a
// window error (rule 10).
func (s *Server) logQuarantine(c echo.Context, groupID, fence int64, text string) {
	group := s.nameOfGroup(c.Request().Context(), groupID)
	s.note(c, entryQuarantine, fmt.Sprint(group), "quarantined: its window would not load: "+text, true)
	s.log.Warn("group quarantined: its window would not load; keep it (DELETE .../quarantine), drop it (DELETE .../snapshot) or restore another",
		append([]any{"group", group, "group_id", groupID, "fence", fence, "error", text}, caller(c)...)...)
}

// auditNameKey is where a handler whose route has no name in its path
// (registering a node) leaves the name it wrote to, for the audit line.
const auditNameKey = "leasehold.audit_name"

// auditAdmin logs every admin write once it is answered: the route, what
// it named (the path's parameters), the status, who and from where. The
// body is not logged: it may be a window of gigabytes, and names in the
// path say what was written to.
func (s *Server) auditAdmin(via string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			args := []any{"method", c.Request().Method, "route", c.Path(), "status", c.Response().Status}
			for i, name := range c.ParamNames() {
				args = append(args, name, c.ParamValues()[i])
			}
			if q := c.Request().URL.RawQuery; q != "" {
				args = append(args, "query", q)
			}
			if name, ok := c.Get(auditNameKey).(string); ok {
				args = append(args, "node", name)
			}
			if via != "" {
				args = append(args, "via", via)
			}
			s.log.Info("admin write", append(args, caller(c)...)...)
			s.noteAdminWrite(c, via)
			return nil
		}
	}
}

// noteAdminWrite is an admin write's entry on the timeline: the request
// with its parameters filled in, the status, and the group it names.
func (s *Server) noteAdminWrite(c echo.Context, via string) {
	path := c.Path()
	var group string
	for i, name := range c.ParamNames() {
		v := c.ParamValues()[i]
		path = strings.Replace(path, ":"+name, v, 1)
		if name == "name" {
			group = v
		}
	}
	if q := c.Request().URL.RawQuery; q != "" {
		path += "?" + q
	}
	status := c.Response().Status
	detail := fmt.Sprintf("%s %s → %d %s", c.Request().Method, path, status, http.StatusText(status))
	if via != "" {
		detail += " (" + via + ")"
	}
	s.note(c, entryAdminWrite, group, detail, status >= 400)
}

// refusalWindow is how often refused holder calls are logged per node.
const refusalWindow = time.Minute

// refusals sums refused holder calls per worker node between log lines.
type refusals struct {
	mu    sync.Mutex
	nodes map[int64]*refusalSum
}

type refusalSum struct {
	logged time.Time // when the last line was written
	count  int       // refused since, not logged yet
	codes  map[leasehold.ErrorKind]int
}

// noteRefusals counts and logs holder calls refused: a lease lost, a
// range not in the caller's hands, a group or range gone. The first in a
// minute is logged at once with its message; those after it are summed
// into the next line, written when one comes after the minute.
func (s *Server) noteRefusals(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil {
			return nil
		}
		kind := leasehold.KindOf(err)
		if kind != leasehold.KindLeaseLost && kind != leasehold.KindConflict && kind != leasehold.KindNotFound {
			return err
		}
		s.metrics.holderCallRefused(kind)
		node := nodeOf(c)
		now := s.node.Watchman.Now()
		s.refused.mu.Lock()
		sum := s.refused.nodes[node.ID]
		if sum == nil {
			sum = &refusalSum{codes: map[leasehold.ErrorKind]int{}}
			s.refused.nodes[node.ID] = sum
		}
		sum.count++
		sum.codes[kind]++
		var line []any
		if sum.logged.IsZero() || now.Sub(sum.logged) >= refusalWindow {
			codes := map[string]int{}
			for k, n := range sum.codes {
				codes[string(k)] = n
			}
			line = []any{"refused", sum.count, "codes", codes, "since_s", sinceSeconds(sum.logged, now),
				"route", c.Request().Method + " " + c.Path(), "error", leasehold.ErrorMessage(err)}
			sum.logged, sum.count, sum.codes = now, 0, map[leasehold.ErrorKind]int{}
		}
		s.refused.mu.Unlock()
		if line != nil {
			s.log.Warn("holder calls refused: the worker acts on a lease it no longer holds, or on ranges not its own (logged at most once a minute a node)",
				append(line, caller(c)...)...)
		}
		return err
	}
}

// sinceSeconds is how long the summed calls span: 0 for the first line.
func sinceSeconds(from, now time.Time) float64 {
	if from.IsZero() {
		return 0
	}
	return now.Sub(from).Round(time.Second).Seconds()
}

// writeMethod says whether a request with method writes (a read is GET or HEAD).
func writeMethod(method string) bool {
	return method != http.MethodGet && method != http.MethodHead
}
