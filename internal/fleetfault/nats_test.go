package fleetfault

import (
	"slices"
	"strings"
	"testing"
)

// TestExternalArgs: in the external mode a node is given every NATS
// server of the cluster apart (client port, route network) and runs no
// embedded server, and each namespace's natsd routes to the others on
// the token the nodes present.
func TestExternalArgs(t *testing.T) {
	t.Parallel()
	cfg := ShortConfig()
	cfg.Bin, cfg.NATSBin, cfg.Out, cfg.secretFile = "/bin/leasehold", "/bin/natsd", t.TempDir(), "/run/secret"
	nodes := []NetNode{
		{Name: "node-a", NS: "lhfa", HTTPIP: "10.77.0.11", RouteIP: "10.77.1.11"},
		{Name: "node-b", NS: "lhfb", HTTPIP: "10.77.0.12", RouteIP: "10.77.1.12"},
	}
	routes := []string{nodes[0].RouteURL(), nodes[1].RouteURL()}
	n, err := newNode(&cfg, nil, nodes[0], routes)
	if err != nil {
		t.Fatal(err)
	}
	defer n.log.Close()
	args := strings.Join(n.args, " ")
	if !strings.Contains(args, "--nats nats://10.77.1.11:4222,nats://10.77.1.12:4222 ") || strings.Contains(args, "--nats-routes") || strings.Contains(args, "--nats-cluster-listen") {
		t.Errorf("node args in the external mode: %s", args)
	}
	if i := slices.Index(n.args, "--nats-secret-file"); i < 0 || n.args[i+1] != cfg.secretFile {
		t.Errorf("node args without the token: %s", args)
	}
	s, err := newNATS(&cfg, nodes[1], routes)
	if err != nil {
		t.Fatal(err)
	}
	defer s.log.Close()
	want := "/bin/natsd -name nats-b -dir " + cfg.Out + "/nats-b -listen 10.77.1.12:4222 -cluster 10.77.1.12:6222 -routes " + strings.Join(routes, ",") + " -token-file /run/secret"
	if got := s.bin + " " + strings.Join(s.args, " "); got != want {
		t.Errorf("natsd args\n got %s\nwant %s", got, want)
	}

	cfg.NATSBin = ""
	e, err := newNode(&cfg, nil, nodes[0], routes)
	if err != nil {
		t.Fatal(err)
	}
	defer e.log.Close()
	if args := strings.Join(e.args, " "); strings.Contains(args, "--nats ") || !strings.Contains(args, "--nats-routes") {
		t.Errorf("node args in the embedded mode: %s", args)
	}
}
