package web_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehold/leasehold/internal/nodetest"
)

// chromium finds the headless browser. CI installs it through
// scripts/test.sh, so there a missing browser fails the test; elsewhere
// the browser tests are skipped with a note on how to get it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "chromium is not installed: run scripts/test.sh, which installs the Debian packages chromium and chromium-driver"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// artifacts is where screenshots go: $LEASEHOLD_ARTIFACTS, else the
// repository's artifacts/ (ignored by git).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LEASEHOLD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	return ctx
}

// TestDashboardInBrowser drives the dashboard in real headless Chromium:
// sign in, watch a group's progress move when its worker finishes a range
// (the page updates itself, no reload), pause a node and see it marked,
// save a screenshot of the overview, open the fleet page of a node that
// runs alone, sign out.
func TestDashboardInBrowser(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, nodetest.Options{})
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	str := func(what string, a chromedp.Action[string]) string {
		t.Helper()
		v, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	do("open the dashboard", chromedp.Navigate(w.node.URL+"/"), chromedp.WaitVisible(css(`#token`)))
	if loc := str("location", chromedp.Location()); !strings.HasSuffix(loc, "/signin") {
		t.Fatalf("without a session the dashboard is at %s, want /signin", loc)
	}
	do("sign in with a wrong token",
		chromedp.SendKeys(css(`#token`), "lha_wrong"),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#signin-error`)))
	do("sign in",
		chromedp.SendKeys(css(`#token`), w.admin),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`#count-groups`)))

	done := `document.querySelector('tr[data-group="g"] .counts').dataset.done`
	do("open the groups page", chromedp.Navigate(w.node.URL+"/groups"), chromedp.WaitVisible(css(`tr[data-group="g"]`)))
	if before := str("read g's progress", chromedp.Evaluate[string](done)); before != "0" {
		t.Fatalf("g shows %s ranges done before any finished", before)
	}
	if a := w.j("POST", fmt.Sprintf("/ranges/%d/finish", w.rangeID), w.w1, fmt.Sprintf(`{"fence":%d,"headers":90}`, w.fence)); a.status != 200 {
		t.Fatalf("finish: %d %s", a.status, a.body)
	}
	do("see g's progress change without a reload",
		chromedp.Poll[chromedp.Void](done+` === "1"`, chromedp.WithPollingTimeout(30*time.Second)))

	do("open g's page", chromedp.Navigate(w.node.URL+"/groups/g"), chromedp.WaitVisible(css(`#ranges`)))
	drawn := str("count g's drawn ranges", chromedp.Evaluate[string](
		`document.querySelectorAll('#ranges rect.st-done').length + "/" + document.querySelectorAll('#ranges rect').length`))
	if drawn != "1/10" {
		t.Errorf("g's page draws %s done ranges of all, want 1/10", drawn)
	}
	if holder := str("read g's holder", chromedp.Text(css(`#holder`))); holder != "w1" {
		t.Errorf("g's holder shows %q, want w1", holder)
	}

	do("open the overview", chromedp.Navigate(w.node.URL+"/"), chromedp.WaitVisible(css(`#throughput`)))
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifacts(t), "dashboard-overview.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("overview screenshot: %s (%d bytes)", path, len(shot))
	if total := str("read the throughput", chromedp.Text(css(`#tp-total`))); !strings.HasPrefix(total, "1 ranges, 90 headers") {
		t.Errorf("throughput says %q, want the finished range and its 90 headers", total)
	}

	do("pause w2",
		chromedp.Navigate(w.node.URL+"/nodes"),
		chromedp.Click(css(`tr[data-node="w2"] button.pause`)),
		chromedp.WaitVisible(css(`tr[data-node="w2"] .paused`)))
	if !w.paused(t, "w2") || w.paused(t, "w1") {
		t.Fatal("after the click w2 should be paused and w1 not")
	}

	do("open the fleet page from the nav",
		chromedp.Click(css(`nav a[href="/fleet"]`)),
		chromedp.WaitVisible(css(`#alone`)))
	if alone := str("read the fleet page", chromedp.Text(css(`#alone`))); !strings.Contains(alone, "--nats off") {
		t.Errorf("the fleet page of a lone node says %q, want that it runs alone (--nats off)", alone)
	}

	do("sign out",
		chromedp.Click(css(`#signout`)),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.Navigate(w.node.URL+"/nodes"),
		chromedp.WaitVisible(css(`#token`)))
	if loc := str("location", chromedp.Location()); !strings.HasSuffix(loc, "/signin") {
		t.Fatalf("after sign-out /nodes is at %s, want /signin", loc)
	}
}
