// Command worker is a leasehold worker written in its own Go module, as an
// indexer's authors would write theirs: it imports the node's Go client
// (github.com/leasehold/leasehold/client), leases groups from a node,
// and "indexes" each range by counting its ids into a window that the
// client's pull loop carries from range to range and uploads to the node,
// where a real indexer would keep its article headers.
//
//	LEASEHOLD_URL=http://127.0.0.1:8080 LEASEHOLD_TOKEN=... go run . -idle 5s
//
// It stops on SIGINT or SIGTERM, or, with -idle, once it has held no group
// for that long; the pull loop then uploads its windows and releases its
// groups before it returns.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client"
)

// window is what this worker keeps of a group: how many ids it has
// indexed, and the next id it has not. Ids below next are in it already,
// so a range that comes again after a takeover adds nothing twice.
type window struct {
	Group string `json:"group"`
	Next  int64  `json:"next"`
	IDs   int64  `json:"ids"`
}

func (w *window) Load(r io.Reader) error   { return json.NewDecoder(r).Decode(w) }
func (w *window) Save(out io.Writer) error { return json.NewEncoder(out).Encode(w) }

// index counts the ids of r the window does not hold yet, reporting
// progress as it goes.
func index(ctx context.Context, _ *client.Grant, r leasehold.Range, win client.Window, progress client.ProgressFunc) error {
	w := win.(*window)
	var headers int64 // of this range: the node checks it against the range, not the window
	for id := max(r.Next, w.Next); id <= r.End; id++ {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		w.IDs++
		w.Next = id + 1
		headers++
		progress(id+1, headers)
	}
	return nil
}

func main() {
	url := flag.String("url", os.Getenv("LEASEHOLD_URL"), "the node's URL (default $LEASEHOLD_URL)")
	idle := flag.Duration("idle", 0, "stop once no group has been held for this long (0: run until a signal)")
	capacity := flag.Int("capacity", 2, "groups held at once")
	flag.Parse()
	// Never a flag: argument lists are public. LEASEHOLD_TOKEN is the name
	// every leasehold worker reads; the older LEASEHOLD_NODE_TOKEN is still
	// read, with a warning, and will go.
	token := os.Getenv("LEASEHOLD_TOKEN")
	if old := os.Getenv("LEASEHOLD_NODE_TOKEN"); token == "" && old != "" {
		fmt.Fprintln(os.Stderr, "worker: LEASEHOLD_NODE_TOKEN is deprecated; set LEASEHOLD_TOKEN")
		token = old
	}
	if *url == "" || token == "" {
		fmt.Fprintln(os.Stderr, "worker: set LEASEHOLD_URL (or -url) and LEASEHOLD_TOKEN, the worker node's token")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	c := client.New(*url, token)
	c.UserAgent = "leasehold-example-worker " + c.UserAgent
	if ca := os.Getenv("LEASEHOLD_CA_FILE"); ca != "" { // a node serving HTTPS with its own CA's certificate
		cfg, err := client.LoadTLS(ca, "", "")
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker: LEASEHOLD_CA_FILE:", err)
			os.Exit(2)
		}
		c.TLSConfig = cfg
	}
	w := &client.Worker{
		Client:           c,
		CapacityFunc:     func() int { return *capacity },
		NewWindowFunc:    func(g leasehold.Group) client.Window { return &window{Group: g.Name} },
		IndexFunc:        index,
		Logger:           log,
		SnapshotInterval: -1, // windows go up when a group is caught up, and at the stop
		Poll:             client.Backoff{Min: 200 * time.Millisecond, Max: time.Second},
	}
	if *idle > 0 {
		go func() {
			last := time.Now()
			for ctx.Err() == nil {
				if w.Held() > 0 {
					last = time.Now()
				} else if time.Since(last) > *idle {
					log.Info("worker: idle, stopping", "for", *idle)
					cancel()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
