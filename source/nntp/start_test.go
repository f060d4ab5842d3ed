package nntp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/source/nntp"
)

func TestParseStart(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]nntp.Start{
		"low": {}, "": {}, "last:1": {Last: 1}, "last:100000": {Last: 100000}, "last:2147483647": {Last: 2147483647},
		"days:1": {Days: 1}, "days:36500": {Days: 36500},
	} {
		got, err := nntp.ParseStart(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
		if err == nil && in != "" && got.String() != in {
			t.Errorf("%q reads back as %q", in, got.String())
		}
	}
	for _, bad := range []string{"last:0", "last:-5", "last:2147483648", "days:0", "days:36501", "days:1.5", "days:", "last",
		"first:10", "30d", "high", "days:1e3", "last: 10", strings.Repeat("9", 500)} {
		if got, err := nntp.ParseStart(bad); err == nil || !strings.Contains(err.Error(), "want low, last:N") {
			t.Errorf("%q: %+v, %v; want an error saying what is wanted", bad, got, err)
		}
	}
}

// TestStartAgainstINN posts 40 articles dated five hours apart, from
// nine days ago, cancels some, and finds by binary search where each
// article's date falls (every answer checked against the posted dates),
// and where last:N and days:N start.
func TestStartAgainstINN(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	dated := func(i int) time.Time { return now.Add(-9*24*time.Hour + time.Duration(i-1)*5*time.Hour) }
	gaps := map[int64]bool{10: true, 11: true, 12: true, 30: true}
	s, group := wireGroup(t, 40, dated, 10, 11, 12, 30)
	ctx := context.Background()
	c := nntp.New(nntp.Config{Addr: s.Addr, Connections: 1})
	defer c.Close()
	gi, err := c.Group(ctx, group)
	if err != nil || gi.Low != 1 || gi.High != 40 {
		t.Fatalf("GROUP: %+v, %v", gi, err)
	}
	// want is, from the posted dates, the smallest n such that the
	// first article at or after n is dated t or later (41 when none).
	want := func(t time.Time) int64 {
		for n := int64(1); n <= 40; n++ {
			first := n
			for first <= 40 && gaps[first] {
				first++
			}
			if first > 40 || !dated(int(first)).Before(t) {
				return n
			}
		}
		return 41
	}
	for k := 1; k <= 41; k++ {
		cut := dated(k).Add(-time.Minute)
		got, err := c.FirstPostedSince(ctx, group, 1, 40, cut)
		if err != nil || got != want(cut) {
			t.Errorf("first posted since article %d's date: %d, %v; want %d", k, got, err, want(cut))
		}
	}
	if got, err := c.FirstPostedSince(ctx, group, 1, 40, now.Add(time.Hour)); err != nil || got != 41 {
		t.Errorf("first posted after every article: %d, %v; want 41 (nothing)", got, err)
	}
	for _, c2 := range []struct {
		start string
		want  int64
	}{
		{"low", 1}, {"last:5", 36}, {"last:40", 1}, {"last:1000", 1},
		{"days:1", 40}, {"days:2", 35}, {"days:3", 30}, {"days:6", 16}, {"days:8", 6}, {"days:9", 1}, {"days:30", 1},
	} {
		st, err := nntp.ParseStart(c2.start)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.StartOf(ctx, gi, st, now)
		if err != nil || got != c2.want {
			t.Errorf("--start %s: article %d, %v; want %d", c2.start, got, err, c2.want)
		}
	}
	empty := nntp.GroupInfo{Name: group, Count: 0, Low: 41, High: 40}
	if got, err := c.StartOf(ctx, empty, nntp.Start{Days: 1}, now); err != nil || got != 41 {
		t.Errorf("an empty group: %d, %v; want its low mark", got, err)
	}
}
