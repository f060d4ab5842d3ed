package web

import (
	"net"
	"strings"
	"sync"
	"time"
	"unicode"
)

// workerAgents remembers, for each worker node of this node, the program
// (User-Agent) and address of its last authenticated call, so the nodes
// page can say which version runs where. It is memory only: a restart
// forgets it until each worker calls again, which a live one does within a
// heartbeat. Both strings are the caller's, so they are cut to a bound
// and stripped of control characters, and the map holds at most
// maxAgents nodes.
type workerAgents struct {
	mu sync.Mutex
	m  map[int64]workerAgent
}

// workerAgent is one worker node's last call.
type workerAgent struct {
	UserAgent string
	Remote    string
	At        time.Time
}

const (
	maxAgentLen = 128
	maxAgents   = 4096
)

// seen records node id's call from userAgent at remoteAddr (host:port).
func (w *workerAgents) seen(id int64, userAgent, remoteAddr string, at time.Time) {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a := workerAgent{UserAgent: printable(userAgent, maxAgentLen), Remote: printable(host, maxAgentLen), At: at}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[int64]workerAgent)
	}
	if _, ok := w.m[id]; !ok && len(w.m) >= maxAgents {
		// Full: forget the longest silent, which is most likely deleted.
		var oldest int64
		var at time.Time
		for k, v := range w.m {
			if at.IsZero() || v.At.Before(at) {
				oldest, at = k, v.At
			}
		}
		delete(w.m, oldest)
	}
	w.m[id] = a
}

// get returns node id's last call, if this node has seen one.
func (w *workerAgents) get(id int64) (workerAgent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a, ok := w.m[id]
	return a, ok
}

// printable is s without control characters, at most n bytes (cut at a
// rune), so a caller's header cannot break a page or a log line.
func printable(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			continue
		}
		if b.Len()+len(string(r)) > n {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
