package nntp

import (
	"context"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"
)

// Start is where reading a group that was never read begins: at the
// server's low mark (the zero Start), Last article numbers below the
// high mark, or at the first article posted at most Days days ago.
type Start struct {
	Last int64
	Days int
}

// Bounds of a Start: a hundred years of days; Last up to the largest
// article number RFC 3977 allows.
const (
	maxStartDays = 36500
	maxStartLast = 2147483647
)

// ParseStart reads "low", "last:N" (1 ≤ N ≤ 2³¹-1) or "days:N"
// (1 ≤ N ≤ 36500). Anything else is an error saying what is wanted.
func ParseStart(s string) (Start, error) {
	if s == "low" || s == "" {
		return Start{}, nil
	}
	kind, num, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(num, 10, 64)
	switch {
	case !ok || err != nil:
	case kind == "last" && n >= 1 && n <= maxStartLast:
		return Start{Last: n}, nil
	case kind == "days" && n >= 1 && n <= maxStartDays:
		return Start{Days: int(n)}, nil
	}
	return Start{}, fmt.Errorf("start %q: want low, last:N (the last N articles, 1 to %d) or days:N (articles of the last N days, 1 to %d)",
		clip(s), maxStartLast, maxStartDays)
}

func (s Start) String() string {
	switch {
	case s.Last > 0:
		return fmt.Sprintf("last:%d", s.Last)
	case s.Days > 0:
		return fmt.Sprintf("days:%d", s.Days)
	}
	return "low"
}

// StartOf is the article number at which s starts reading the group whose
// marks are gi, at time now: never below the low mark, at most high+1
// (nothing yet). For Days it asks the server the dates of articles
// (FirstPostedSince).
func (c *Client) StartOf(ctx context.Context, gi GroupInfo, s Start, now time.Time) (int64, error) {
	low, high := gi.Low, gi.High
	if gi.Count == 0 || high < low {
		return min(low, high+1), nil
	}
	switch {
	case s.Last > 0:
		if high-low+1 <= s.Last {
			return low, nil
		}
		return high - s.Last + 1, nil
	case s.Days > 0:
		return c.FirstPostedSince(ctx, gi.Name, low, high, now.Add(-time.Duration(s.Days)*24*time.Hour))
	}
	return low, nil
}

// FirstPostedSince finds, by binary search over lo..hi, the smallest
// article number n such that the first article at or after n is dated t
// or later (hi+1 when every article is older): articles below n were
// posted before t. An article's date is its overview's Date; numbers with
// no article (cancelled, expired, never used) and articles whose date
// does not parse are stepped over to the next article, so a probe is an
// OVER of a few articles, never of one that may be missing. It assumes
// what servers give: dates that grow with article numbers; where they do
// not, it lands on one of the places where the dates cross t.
func (c *Client) FirstPostedSince(ctx context.Context, group string, lo, hi int64, t time.Time) (int64, error) {
	left, right := lo, hi+1 // the answer is in left..right
	for left < right {
		mid := left + (right-left)/2
		num, date, found, err := c.firstDated(ctx, group, mid, right-1)
		if err != nil {
			return 0, err
		}
		if !found || !date.Before(t) {
			right = mid // every article from mid to the first dated one is t or later
		} else {
			left = num + 1 // that article and everything below it are older
		}
	}
	return left, nil
}

// firstDated returns the first article in from..to whose overview date
// parses, reading windows that grow from 16 to 4096 article numbers, so
// a long gap costs a few OVERs.
func (c *Client) firstDated(ctx context.Context, group string, from, to int64) (int64, time.Time, bool, error) {
	window := int64(16)
	for from <= to {
		hi := to
		if to-from >= window {
			hi = from + window - 1
		}
		hs, _, err := c.Overview(ctx, group, from, hi)
		if err != nil {
			return 0, time.Time{}, false, err
		}
		for _, h := range hs {
			if h.Number < from || h.Number > hi {
				continue
			}
			if d, err := mail.ParseDate(h.Date); err == nil {
				return h.Number, d, true, nil
			}
		}
		from = hi + 1
		window = min(window*4, 4096)
	}
	return 0, time.Time{}, false, nil
}
