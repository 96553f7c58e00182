package ui

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"
)

// TestConsoleInBrowserDisputes: the console's forms of issue 25 in a real
// browser (make test-ui): the Reservations page's dry run lists the other
// tenant's live lock, Reserve is refused until "existing: keep", Remove
// deletes the reservation; the ownership page's Withdraw ends a pending
// handover offer. Every form posts the session's CSRF token (a refused
// token would answer 403); no page reports a browser error (the strict
// Content-Security-Policy: no inline script). A separate function from
// TestConsoleInBrowser so that it can move with it.
func TestConsoleInBrowserDisputes(t *testing.T) {
	if os.Getenv("REPOLOCK_UI_TEST") != "1" {
		t.Skip("set REPOLOCK_UI_TEST=1 (make test-ui) to run the browser tests")
	}
	chromium := chromiumPath()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("REPOLOCK_UI_TEST=1 but no Chromium at %s (scripts/ensure-chromium.sh installs it)", chromium)
	}
	srv := startServer(t)
	art := artifactsDir(t)

	// eve holds a lock under github.com/acme; alice offers a lock to bob.
	srv.createTenant(t, "acme")
	eve := srv.createTenant(t, "eve")
	alice := srv.createTenant(t, "alice")
	bob := srv.createTenant(t, "bob")
	if st, out := srv.do(t, http.MethodPost, "/v1/locks/acquire", eve, map[string]any{"repo_url": "https://github.com/acme/old"}); st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("eve's lock: %d %v", st, out)
	}
	st, acq := srv.do(t, http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "git@github.com:org/offered.git"})
	if st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("alice's lock: %d %v", st, acq)
	}
	lockID, _ := acq["lock_id"].(string)
	if st, out := srv.do(t, http.MethodPost, "/v1/locks/"+lockID+"/handover", alice, map[string]any{"to": "bob"}); st != http.StatusCreated {
		t.Fatalf("alice's offer: %d %v", st, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	errs := &pageErrors{}
	if err := errs.listen(bctx); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		for _, e := range errs.take() {
			t.Errorf("%s: browser error: %s", step, e)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	// waitText waits until sel's text contains want: after a form's
	// submit the old page may still be shown for a moment.
	waitText := func(step, sel, want string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel), chromedp.AtLeast(0)))
			if err == nil && strings.Contains(s, want) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s never showed %q (last %q, %v)", step, sel, want, s, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.CaptureScreenshot()(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(art, name+".png"), buf, 0o644)
		})
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }

	do("sign in",
		chromedp.Navigate(srv.URL+"/ui/"),
		visible("#token"),
		chromedp.SendKeys(chromedp.CSS("#token"), srv.AdminToken),
		chromedp.Click(chromedp.CSS("#signin")),
		visible("#count-tenants"),
	)

	// Dry run: eve's lock is listed, nothing is reserved.
	do("reservations", chromedp.Navigate(srv.URL+"/ui/reservations"), visible("#reserve-form"),
		chromedp.SendKeys(chromedp.CSS("#reserve-prefix"), "https://GitHub.com/Acme/"),
		chromedp.SendKeys(chromedp.CSS("#reserve-tenant"), "acme"),
		chromedp.Click(chromedp.CSS("#reserve-check")),
		visible("#reserve-conflicts"), shot("reservations-dry-run"))
	if got := text("#reserve-conflicts tbody"); !strings.Contains(got, "github.com/acme/old") || !strings.Contains(got, "eve") {
		t.Errorf("dry run's conflicts: %q", got)
	}
	if got := text("#reserve-normalized"); got != "github.com/acme" {
		t.Errorf("dry run's prefix %q, want github.com/acme", got)
	}
	if got := text("#reservations tbody"); !strings.Contains(got, "No reservations.") {
		t.Errorf("a dry run reserved: %q", got)
	}

	// Reserve with the default (refuse): refused, the lock listed.
	do("reserve refused", chromedp.Click(chromedp.CSS("#reserve-submit")))
	waitText("reserve refused", "p.error", "other users hold live locks under github.com/acme")
	// The browser reports the page's 409 as a failed load: expected here.
	waitForError(t, errs, "status of 409")
	if got := text("#reserve-conflicts tbody"); !strings.Contains(got, "github.com/acme/old") {
		t.Errorf("refusal's conflicts: %q", got)
	}

	// existing: keep.
	do("reserve keep", chromedp.SetValue(chromedp.CSS("#reserve-existing"), "keep"), chromedp.Click(chromedp.CSS("#reserve-submit")))
	waitText("reserve keep", "p.notice", "Reserved github.com/acme for acme")
	do("reserved shot", shot("reservations"))
	if got := text("#reservations tbody"); !strings.Contains(got, "github.com/acme") || !strings.Contains(got, "acme") {
		t.Errorf("the reservation is not listed: %q", got)
	}
	if st, out := srv.do(t, http.MethodPost, "/v1/locks/acquire", eve, map[string]any{"repo_url": "https://github.com/acme/new"}); st != http.StatusConflict {
		t.Errorf("eve's claim under the reservation: %d %v", st, out)
	}

	// Remove.
	do("remove", chromedp.Click(chromedp.CSS("#reservations .remove-reservation button")))
	waitText("remove", "p.notice", "Removed the reservation github.com/acme")
	if got := text("#reservations tbody"); !strings.Contains(got, "No reservations.") {
		t.Errorf("after Remove: %q", got)
	}

	// Withdraw alice's offer from the lock's ownership page.
	do("ownership", chromedp.Navigate(srv.URL+"/ui/ownership?url=github.com/org/offered"), visible("#withdraw-handover"),
		shot("ownership-handover"), chromedp.Click(chromedp.CSS("#withdraw-handover button")))
	waitText("withdraw", "p.notice", "Withdrew the offer of github.com/org/offered from alice to bob")
	if st, out := srv.do(t, http.MethodGet, "/v1/handovers", bob, nil); st != http.StatusOK || len(out["items"].([]any)) != 0 {
		t.Errorf("bob's offers after the withdrawal: %d %v", st, out)
	}
	for _, e := range errs.take() {
		t.Errorf("browser error: %s", e)
	}
}
