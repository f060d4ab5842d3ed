package web_test

import (
	"context"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/nodetest"
)

// TestNodesPageWorkerAgent: the nodes page shows each worker's last
// User-Agent and address (the Go client's own by default; a caller's
// header cut to a bound and without control characters), a node never
// heard from as unknown, the default band as "all", and the footer names
// the build.
func TestNodesPageWorkerAgent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nodetest.Options{})
	c := client.New(w.node.URL, w.w1)
	if _, err := c.Watermarks(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	b := signedIn(t, w.node.URL, w.admin)
	row := func(body, name string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<tr data-node="` + name + `".*?</tr>`).FindString(body)
		if m == "" {
			t.Fatalf("no row for %s in %s", name, body)
		}
		return m
	}
	_, _, body := b.get("/nodes")
	if r := row(body, "w1"); !strings.Contains(r, "leasehold-go-client/dev") || !strings.Contains(r, "from 127.0.0.1") || !strings.Contains(r, ">all<") {
		t.Errorf("w1's row does not show the Go client's agent, its address and band all: %s", r)
	}
	if r := row(body, "w2"); strings.Contains(r, "user-agent") {
		t.Errorf("w2 never called, yet shows an agent: %s", r)
	}
	if !strings.Contains(body, `<footer id="build">leasehold dev`) || !strings.Contains(body, runtime.Version()) {
		t.Errorf("the footer does not name the build: %s", body)
	}

	// A caller's header: control characters dropped, cut to 128 bytes.
	req, _ := http.NewRequest("GET", w.node.URL+"/api/v1/watermarks", nil)
	req.Header.Set("Authorization", "Bearer "+w.w2)
	req.Header.Set("User-Agent", "odd\t<b>"+strings.Repeat("x", 500))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, _, body = b.get("/nodes")
	r := row(body, "w2")
	if !strings.Contains(r, "odd&lt;b&gt;"+strings.Repeat("x", 122)+"</span>") {
		t.Errorf("w2's agent is not cut to 128 bytes without control characters: %s", r)
	}
}

// TestNodesPageInBrowser: in headless Chromium, at desktop and phone
// width, the nodes page shows a worker's program and address and the
// footer the build; screenshots nodes-desktop.png and nodes-phone.png.
func TestNodesPageInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, nodetest.Options{})
	if _, err := client.New(w.node.URL, w.w1).Watermarks(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	p := signIn(t, ctx, w.node)
	p.open("/nodes", `#node-w1 .user-agent`)
	p.until("the footer names the build", `document.querySelector("footer#build").innerText.includes("leasehold dev")`)
	p.until("w1's worker and address are shown", `document.querySelector("#node-w1 .agent").innerText.includes("leasehold-go-client/dev") && document.querySelector("#node-w1 .agent").innerText.includes("from 127.0.0.1")`)
	p.shot("nodes-desktop.png")
	p.do("a phone's screen", chromedp.EmulateViewport(390, 844))
	p.open("/nodes", `#node-w1 .user-agent`)
	p.until("nothing wider than the phone", `document.documentElement.scrollWidth <= 390`)
	p.shot("nodes-phone.png")
}
