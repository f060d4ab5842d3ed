package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestAdminSlips: a singular noun is answered with the plural command, and
// a bad flag value's error is printed once, after the usage.
func TestAdminSlips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "group", "list"}, `did you mean "admin groups list"?`},
		{[]string{"admin", "node", "pause", "w1"}, `did you mean "admin nodes pause"?`},
		{[]string{"admin", "finding"}, `did you mean "admin findings"?`},
	} {
		var out bytes.Buffer
		if code := exitCode(run(context.Background(), tc.args, &out, &out), &out); code != 2 || !strings.Contains(out.String(), tc.want) {
			t.Errorf("leasehold %s: exit %d, want 2 and %q in %q", strings.Join(tc.args, " "), code, tc.want, out.String())
		}
	}
	var out bytes.Buffer
	code := exitCode(run(context.Background(), []string{"admin", "groups", "list", "--output", "yaml"}, &out, &out), &out)
	if n := strings.Count(out.String(), `invalid value "yaml"`); code != 2 || n != 1 {
		t.Errorf("--output yaml: exit %d, the error %d times, want 2 and once: %s", code, n, out.String())
	}
}
