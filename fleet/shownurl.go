package fleet

import (
	"net/url"
	"strings"
)

// ShownURL is urls (one NATS URL, or several comma-separated) as a log
// line or an answer may show them: a URL's user information (a user
// and password, or a token written as the user) is replaced by "***", so
// `nats://leasehold:s3cret@host:4222` shows as `nats://***@host:4222`.
// The node connects with the URLs as given; only what it says of them
// is hidden. A part that does not parse as a URL is shown up to its
// last '@' hidden the same way, never whole.
func ShownURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		parts[i] = shownOne(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func shownOne(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		if u.User == nil {
			return s
		}
		u.User = nil
		scheme, rest, _ := strings.Cut(u.String(), "://")
		return scheme + "://***@" + rest
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		start := 0
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			start = i + 3
		}
		return s[:start] + "***" + s[at:]
	}
	return s
}
