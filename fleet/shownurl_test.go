package fleet

import "testing"

// TestShownURL holds that no credential in an external NATS's URL
// reaches what the node says of it (the second review found the join's
// "still waiting" line printing `nats://user:password@…` whole).
func TestShownURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://lhuser:lhpass@127.0.0.1:4222", "nats://***@127.0.0.1:4222"},
		{"nats://s3cr3t-token@nats.example:4222", "nats://***@nats.example:4222"},
		{"tls://u:p@a:1, nats://b:2,nats://t@c:3", "tls://***@a:1,nats://b:2,nats://***@c:3"},
		{"nats://u:p%40ss@h:1", "nats://***@h:1"},
		{"u:pa@ss@h:1", "***@h:1"},
		{"nats://u:p@ss@h:1", "nats://***@h:1"},
	} {
		if got := ShownURL(c.in); got != c.want {
			t.Errorf("ShownURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
