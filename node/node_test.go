package node_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/appliance"
	"github.com/leasehold/leasehold/node"
	"github.com/leasehold/leasehold/service"
	"github.com/leasehold/leasehold/web"
)

// assemble is a node alone on a loopback port, not started, and its URL.
func assemble(t *testing.T) (*node.Parts, string) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	var url string
	p, err := node.Assemble(node.Config{
		Appliance:       appliance.Config{DataDir: t.TempDir(), Logger: log},
		ShutdownTimeout: time.Second,
		Web: func() (web.Options, net.Listener, error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return web.Options{}, nil, err
			}
			url = "http://" + ln.Addr().String()
			return web.Options{AdminToken: strings.Repeat("a", 32), Logger: log}, ln, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, url
}

// TestAssembleServes: an assembled node serves once started; stopped, its
// port refuses and its catalog is closed, with no error.
func TestAssembleServes(t *testing.T) {
	t.Parallel()
	p, url := assemble(t)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(url + "/healthz")
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %s", res.Status)
	}
	p.Stop()
	if err := p.Err(); err != nil {
		t.Errorf("Err after Stop: %v", err)
	}
	if err := p.Closed(); err != nil {
		t.Errorf("the catalog's close: %v", err)
	}
	if _, err := p.App.Coordinator.Nodes(context.Background()); err == nil {
		t.Error("the catalog still answers after Stop")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("the port still answers after Stop")
	}
}

// TestAssembleRefusedStart: a node whose start a part refuses (its web
// server started already, here) lets go of what it was made with: the
// listener and the catalog, with no Stop from its owner.
func TestAssembleRefusedStart(t *testing.T) {
	t.Parallel()
	p, url := assemble(t)
	if err := p.Web.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := p.Start(context.Background())
	if !errors.Is(err, service.ErrStarted) || !strings.Contains(err.Error(), "web") {
		p.Stop()
		t.Fatalf("Start with its web server started already: %v, want the web part's refusal", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("the listener still answers after a refused start")
	}
	if _, err := p.App.Coordinator.Nodes(context.Background()); err == nil {
		t.Error("the catalog is still open after a refused start")
	}
}

// TestAssembleWebRefused: a web server that cannot be made (its listener
// refused) fails the assembly with its error.
func TestAssembleWebRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	refused := errors.New("no port")
	_, err := node.Assemble(node.Config{
		Appliance: appliance.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)},
		Web:       func() (web.Options, net.Listener, error) { return web.Options{}, nil, refused },
	})
	if !errors.Is(err, refused) {
		t.Fatalf("Assemble with its listener refused: %v, want %v", err, refused)
	}
}
