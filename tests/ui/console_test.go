package ui

// The console's browser tests: headless Chromium (driven with chromedp)
// against the real `repolock serve` binary and a real database, through the same
// harness as every end-to-end test. They run only when REPOLOCK_UI_TEST=1
// (make test-ui sets it after scripts/ensure-chromium.sh found or installed
// a Chromium), so a plain `go test ./...` needs no browser.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath is $CHROMIUM or Debian's /usr/bin/chromium.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// artifactsDir is $ARTIFACTS/ui or .artifacts/ui at the repository root.
func artifactsDir(t *testing.T) string {
	dir := filepath.Join(repoRoot, ".artifacts", "ui")
	if a := os.Getenv("ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "ui")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pageErrors collects what the browser reports as errors: uncaught
// exceptions, console.error/assert calls and error log entries (CSP
// violations and failed loads are logged there).
type pageErrors struct {
	mu   sync.Mutex
	list []string
}

func (p *pageErrors) add(s string) { p.mu.Lock(); p.list = append(p.list, s); p.mu.Unlock() }

func (p *pageErrors) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.list
	p.list = nil
	return l
}

// listen must return fast: it runs in the loop that reads the tab's messages.
func (p *pageErrors) listen(ctx context.Context) error {
	return chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			desc := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				desc += " " + ev.ExceptionDetails.Exception.Description
			}
			p.add("exception: " + desc)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				p.add("console." + string(ev.Type) + ": " + strings.Join(parts, " "))
			}
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				p.add("log (" + string(ev.Entry.Source) + "): " + ev.Entry.Text + " " + ev.Entry.URL)
			}
		}
	})
}

func TestConsoleInBrowser(t *testing.T) {
	if os.Getenv("REPOLOCK_UI_TEST") != "1" {
		t.Skip("set REPOLOCK_UI_TEST=1 (make test-ui) to run the browser tests")
	}
	chromium := chromiumPath()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("REPOLOCK_UI_TEST=1 but no Chromium at %s (scripts/ensure-chromium.sh installs it)", chromium)
	}
	srv := startServer(t)
	art := artifactsDir(t)

	// Data through the real API: alice owns a repository (an Application
	// and a Credential hold it), a sync host with two repositories that
	// were never indexed.
	alice := srv.createTenant(t, "alice")
	bob := srv.createTenant(t, "bob")
	srv.createTenant(t, "carol")
	// A display name makes a two-line row on the Tenants page.
	if st, out := srv.do(t, http.MethodPost, "/v1/admin/users", srv.AdminToken, map[string]any{"name": "dave", "display_name": "Dave's platform team"}); st != http.StatusCreated {
		t.Fatalf("dave: %d %v", st, out)
	}
	if st, out := srv.do(t, http.MethodPost, "/v1/applications", alice, map[string]any{"name": "web", "repo_url": "https://github.com/Org/Repo.git"}); st != http.StatusCreated {
		t.Fatalf("alice's application: %d %v", st, out)
	}
	if st, out := srv.do(t, http.MethodPost, "/v1/repository-credentials", alice, map[string]any{"name": "deploy", "repo_url": "git@github.com:org/repo.git", "secret_ref": "vault:kv/deploy"}); st != http.StatusCreated {
		t.Fatalf("alice's credential: %d %v", st, out)
	}
	if st, out := srv.do(t, http.MethodPut, "/v1/sync/hosts/pds.example", alice, nil); st != http.StatusCreated {
		t.Fatalf("sync host: %d %v", st, out)
	}
	if st, out := srv.do(t, http.MethodPost, "/v1/sync/hosts/pds.example/events", alice, map[string]any{"events": []map[string]any{
		{"cursor": 1, "repo": "did:plc:one", "rev": "rev-1"}, {"cursor": 2, "repo": "did:plc:two", "rev": "rev-1"},
	}}); st != http.StatusOK {
		t.Fatalf("sync events: %d %v", st, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a loaded machine: make test-ui gives 10m
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
	eval := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
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
	width := func(w int64) chromedp.Action[chromedp.Void] {
		if w < 600 {
			return chromedp.EmulateViewport(w, 844, chromedp.EmulateMobile)
		}
		return chromedp.EmulateViewport(w, 900)
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	do("viewport", width(1280))

	// The error listener works and the CSP is enforced: an inline script
	// added to the page is refused and reported.
	do("probe page", chromedp.Navigate(srv.URL+"/ui/login"), visible("#token"))
	eval(`(function(){var s=document.createElement("script");s.textContent="window.inlineRan=1";document.body.appendChild(s);return true})()`)
	if ran := eval(`window.inlineRan === 1`); ran != false {
		t.Fatalf("an inline script ran (%v): the Content-Security-Policy is not enforced", ran)
	}
	waitForError(t, errs, "Content Security Policy")

	// Sign in.
	do("sign in",
		chromedp.Navigate(srv.URL+"/ui/"),
		visible("#token"),
		shot("login"),
		chromedp.SendKeys(chromedp.CSS("#token"), srv.AdminToken),
		chromedp.Click(chromedp.CSS("#signin")),
		visible("#count-tenants"),
	)
	if n := text("#count-tenants"); n != "4" {
		t.Errorf("overview shows %q tenants, want 4", n)
	}

	// One owner whatever the spelling.
	for i, spelling := range []string{"https://github.com/Org/Repo.git", "git@github.com:org/repo", "HTTPS://GITHUB.COM/org/repo/"} {
		do("ownership "+spelling,
			chromedp.Navigate(srv.URL+"/ui/ownership"),
			visible("#q-url"),
			chromedp.SendKeys(chromedp.CSS("#q-url"), spelling),
			chromedp.Click(chromedp.CSS("#search")),
			visible("#owner"),
		)
		if owner, key := text("#owner"), text("#lock-key"); owner != "alice" || key != "github.com/org/repo" {
			t.Errorf("%s: owner %q key %q, want alice github.com/org/repo", spelling, owner, key)
		}
		if i == 0 {
			do("ownership shot", shot("ownership"))
		}
	}

	// A refused API call shows up as a denial.
	do("denials before", chromedp.Navigate(srv.URL+"/ui/denials"), visible("#denials"))
	if before := text("#denials tbody"); !strings.Contains(before, "No denials match.") {
		t.Fatalf("denials before any refusal: %q", before)
	}
	if st, out := srv.do(t, http.MethodPost, "/v1/applications", bob, map[string]any{"name": "mine", "repo_url": "ssh://git@github.com/ORG/repo"}); st != http.StatusConflict {
		t.Fatalf("bob's claim: %d %v", st, out)
	}
	do("denials after", chromedp.Reload(), visible("#denials"), shot("denials"))
	if after := text("#denials tbody"); !strings.Contains(after, "bob") || !strings.Contains(after, "github.com/org/repo") || !strings.Contains(after, "alice") {
		t.Errorf("the denial does not show: %q", after)
	}
	// The "Times" cell is a table cell of its own style (issue 30: it
	// wore the overview's card: border, radius, block padding).
	if style := eval(`(function(){var td=document.querySelector("#denials tbody td.times");if(!td)return "missing";var c=getComputedStyle(td);return [c.display,c.textAlign,c.borderTopLeftRadius,c.borderLeftWidth].join(" ")})()`); style != "table-cell right 0px 0px" {
		t.Errorf("the Times cell: display, text-align, radius, left border = %q, want table-cell right 0px 0px", style)
	}
	if n := eval(`document.querySelectorAll("#denials td.count").length`); n != float64(0) {
		t.Errorf("%v denial cells still use the overview's .count style", n)
	}

	// Dry run.
	do("gc dry run", chromedp.Navigate(srv.URL+"/ui/gc"), visible("#dry-run"),
		chromedp.Click(chromedp.CSS("#dry-run")), visible("#result"), shot("gc"))
	if result := text("#result"); !strings.Contains(result, "dry run") || !strings.Contains(result, "would collect 0 lock(s)") {
		t.Errorf("dry run result: %q", result)
	}

	// The overview now has a denial and a GC run.
	// "Last GC run" is the last real run, and says a dry run came after
	// it (issue 30: it showed the dry run as the last run).
	do("overview after a dry run", chromedp.Navigate(srv.URL+"/ui/"), visible("#count-tenants"))
	if last, later := text("#last-gc-run"), text("#later-dry-run"); !strings.Contains(last, "No GC run is recorded yet (only dry runs)") || !strings.Contains(later, "A dry run came after it") {
		t.Errorf("overview after a dry run: last %q, later %q", last, later)
	}
	do("gc run", chromedp.Navigate(srv.URL+"/ui/gc"), visible("#run-now"), chromedp.Click(chromedp.CSS("#run-now")), visible("#result"))
	do("overview after a run", chromedp.Navigate(srv.URL+"/ui/"), visible("#count-tenants"))
	if last := text("#last-gc-run"); !strings.Contains(last, "succeeded") || strings.Contains(last, "dry run") {
		t.Errorf("overview's last GC run after a real one: %q", last)
	}
	if n := eval(`document.querySelectorAll("#later-dry-run").length`); n != float64(0) {
		t.Errorf("a dry run is said to follow the newest real run")
	}
	do("gc dry run again", chromedp.Navigate(srv.URL+"/ui/gc"), visible("#dry-run"), chromedp.Click(chromedp.CSS("#dry-run")), visible("#result"))
	do("overview", chromedp.Navigate(srv.URL+"/ui/"), visible("#count-tenants"), shot("overview"))
	if last, later := text("#last-gc-run"), text("#later-dry-run"); !strings.Contains(last, "succeeded") || !strings.Contains(later, "A dry run came after it") {
		t.Errorf("overview after run + dry run: last %q, later %q", last, later)
	}

	// Reading works with JavaScript disabled: the pages are server-rendered.
	if _, err := chromedp.Call(bctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ path, want string }{
		{"/ui/", `id="count-tenants">4</span>`},
		{"/ui/denials", "<td>bob</td>"},
		{"/ui/ownership?url=HTTPS%3A%2F%2FGITHUB.COM%2Forg%2Frepo%2F", `<strong id="owner">alice</strong>`},
	} {
		do("no-js "+p.path, chromedp.Navigate(srv.URL+p.path))
		html, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
		if err != nil {
			t.Fatalf("no-js %s: %v", p.path, err)
		}
		if !strings.Contains(html, p.want) {
			t.Errorf("with JavaScript disabled %s lacks %q", p.path, p.want)
		}
	}
	if _, err := chromedp.Call(bctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}

	// Sync and tenants.
	do("sync", chromedp.Navigate(srv.URL+"/ui/sync"), visible("#hosts"), shot("sync"),
		chromedp.Click(chromedp.CSS(`a[href="/ui/sync/alice/pds.example"]`)), visible("#needs-index"), shot("sync-host"))
	if needs := text("#needs-index tbody"); strings.Count(needs, "never_indexed") != 2 {
		t.Errorf("needs-index list: %q", needs)
	}
	do("tenants", chromedp.Navigate(srv.URL+"/ui/tenants"), visible("#tenants"), shot("tenants"))
	// The action cell is a table cell (issue 30: display:flex broke the
	// row's borders): on every row, dave's two-line one included, it ends
	// where its row ends.
	if style := eval(`getComputedStyle(document.querySelector("#tenants td.row-actions")).display`); style != "table-cell" {
		t.Errorf("the Tenants action cell: display %v, want table-cell", style)
	}
	if bad := eval(`Array.from(document.querySelectorAll("#tenants tbody tr")).filter(function(r){var c=r.querySelector("td.row-actions");return c && Math.abs(c.getBoundingClientRect().bottom-r.getBoundingClientRect().bottom)>0.5 || c && Math.abs(c.getBoundingClientRect().top-r.getBoundingClientRect().top)>0.5}).length`); bad != float64(0) {
		t.Errorf("%v Tenants rows whose action cell does not line up with the row", bad)
	}
	if h := eval(`(function(){var rows=document.querySelectorAll("#tenants tbody tr");var hs=Array.from(rows).map(function(r){return r.getBoundingClientRect().height});return Math.max.apply(null,hs)>Math.min.apply(null,hs)})()`); h != true {
		t.Errorf("no two-line row on the Tenants page to check the borders with")
	}

	// "Revoke tokens" asks for the tenant's name, as delete does (issue 30:
	// one click revoked every token).
	do("revoke confirmation", chromedp.Click(chromedp.CSS(`a[href="/ui/tenants/bob/revoke"]`)), visible("#confirm"), shot("tenant-revoke"))
	// A wrong name is answered 400 (the browser logs that load as an
	// error: expected here, and only here).
	if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.CSS("#confirm"), "bo"), chromedp.Click(chromedp.CSS("#confirm-revoke")), visible(".error")); err != nil {
		t.Fatalf("revoke, wrong name: %v", err)
	}
	for _, e := range errs.take() {
		if !strings.Contains(e, "status of 400") || !strings.Contains(e, "/ui/tenants/bob/revoke") {
			t.Errorf("revoke, wrong name: browser error: %s", e)
		}
	}
	if st, _ := srv.do(t, http.MethodGet, "/v1/me", bob, nil); st != http.StatusOK {
		t.Fatalf("bob's token after an unconfirmed revoke: %d", st)
	}
	do("revoke, confirmed", chromedp.SendKeys(chromedp.CSS("#confirm"), "bob"), chromedp.Click(chromedp.CSS("#confirm-revoke")), visible(".notice"))
	if notice := text(".notice"); !strings.Contains(notice, "Revoked 1 token(s) of bob.") {
		t.Errorf("revoke notice: %q", notice)
	}
	if st, _ := srv.do(t, http.MethodGet, "/v1/me", bob, nil); st != http.StatusUnauthorized {
		t.Errorf("bob's token after the revoke: %d, want 401", st)
	}
	do("delete confirmation", chromedp.Navigate(srv.URL+"/ui/tenants/alice/delete"), visible("#confirm"), shot("tenant-delete"))

	// Every page at 1280 and 390 px: no horizontal overflow.
	pages := []struct{ name, path, ready string }{
		{"overview", "/ui/", "#count-tenants"},
		{"ownership", "/ui/ownership?url=git%40github.com%3Aorg%2Frepo", "#owner"},
		{"denials", "/ui/denials", "#denials"},
		{"gc", "/ui/gc", "#runs"},
		{"sync", "/ui/sync", "#hosts"},
		{"sync-host", "/ui/sync/alice/pds.example", "#needs-index"},
		{"tenants", "/ui/tenants", "#tenants"},
		{"tenant-delete", "/ui/tenants/alice/delete", "#confirm"},
	}
	for _, w := range []int64{1280, 390} {
		for _, p := range pages {
			do(fmt.Sprintf("%s at %d px", p.name, w), width(w), chromedp.Navigate(srv.URL+p.path), visible(p.ready))
			sw, iw := eval(`document.documentElement.scrollWidth`), eval(`window.innerWidth`)
			if fits := eval(`document.documentElement.scrollWidth <= window.innerWidth`); fits != true {
				t.Errorf("%s at %d px: scrollWidth %v > innerWidth %v (horizontal overflow)", p.name, w, sw, iw)
			}
			if w == 390 {
				do("shot", shot(p.name+"-390"))
			}
			// Charts readable (issue 30): the chart shown has its labels
			// drawn at 10 px or more at this width.
			if p.name == "overview" {
				sizes := eval(`Array.from(document.querySelectorAll(".chartbox svg")).filter(function(s){return getComputedStyle(s).display!=="none"}).map(function(s){var l=s.querySelector("text.label");return s.getBoundingClientRect().width/s.viewBox.baseVal.width*parseFloat(getComputedStyle(l).fontSize)})`)
				list, _ := sizes.([]any)
				if len(list) != 2 {
					t.Errorf("overview at %d px: %d charts shown, want 2", w, len(list))
				}
				for _, v := range list {
					if f, _ := v.(float64); f < 10 {
						t.Errorf("overview at %d px: chart labels drawn at %.1f px, want 10 or more", w, f)
					}
				}
			}
		}
	}
	do("back to 1280", width(1280))

	// The filter script works.
	do("filter", chromedp.Navigate(srv.URL+"/ui/tenants"), visible("#tenants"),
		chromedp.SendKeys(chromedp.CSS(`input[data-filter="tenants"]`), "car"))
	if n := eval(`Array.from(document.querySelectorAll("#tenants tbody tr")).filter(function(r){return !r.hidden}).length`); n != float64(1) {
		t.Errorf("filtering tenants by 'car' left %v rows, want 1", n)
	}

	// Sign out: back to the sign-in page, and the pages are closed.
	do("sign out", chromedp.Click(chromedp.CSS("#signout")), visible("#token"),
		chromedp.Navigate(srv.URL+"/ui/tenants"), visible("#token"))
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loc, "/ui/login?next=") {
		t.Errorf("after sign-out /ui/tenants went to %s", loc)
	}
	for _, e := range errs.take() {
		t.Errorf("browser error: %s", e)
	}
}

// waitForError waits until the listener reports an error containing s
// (the browser reports asynchronously), then drops the collected errors.
func waitForError(t *testing.T, errs *pageErrors, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	var seen []string
	for {
		for _, e := range errs.take() {
			seen = append(seen, e)
			if strings.Contains(e, s) {
				return
			}
		}
		select {
		case <-deadline:
			t.Fatalf("the browser reported no error containing %q (saw %q): the error listener does not work", s, seen)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
