package main

import (
	"log/slog"
	"time"
)

// durationsAsText is the JSON log's ReplaceAttr: a duration is written as
// the text log writes it ("1.5s", "10m0s"), not as slog's JSON default, a
// count of nanoseconds that a person reading the log has to divide.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	if d, ok := a.Value.Any().(time.Duration); ok && a.Value.Kind() == slog.KindAny {
		return slog.String(a.Key, d.String())
	}
	return a
}
