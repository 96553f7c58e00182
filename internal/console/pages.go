package console

import (
	"encoding/csv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
)

// ---- sign-in ----

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	if s, err := c.sessionOf(r); err == nil && s != nil {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", nil, view{Title: "Sign in", Body: safeNext(r.URL.Query().Get("next"))})
}

// safeNext keeps a post-sign-in redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}

// login accepts only the admin token. A tenant token is recognised and
// refused with its own message (403), anything else is 401.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	addr := authguard.ClientAddr(r, c.cfg.TrustForwardedFor)
	tooMany := func(wait time.Duration) {
		w.Header().Set("Retry-After", strconv.Itoa(authguard.RetryAfter(wait)))
		c.render(w, r, http.StatusTooManyRequests, "login", nil, view{Title: "Sign in",
			Error: "Too many failed sign-ins. Wait a moment and try again.", Body: safeNext(r.PostFormValue("next"))})
	}
	// An address that has spent its budget of failures is refused before
	// the token is looked at (authguard).
	if wait, blocked := c.cfg.AuthGuard.Blocked(addr, c.now()); blocked {
		tooMany(wait)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	fail := func(status int, msg string) {
		c.render(w, r, status, "login", nil, view{Title: "Sign in", Error: msg, Body: next})
	}
	if token == "" || len(token) > 512 {
		fail(http.StatusUnauthorized, "Enter the admin token.")
		return
	}
	if !equalSecret(token, c.cfg.AdminToken) {
		// A failure: within the budgets 401 (or 403 for a tenant
		// token), beyond either 429. The correct token never gets here.
		if wait := c.cfg.AuthGuard.Failed(addr, c.now()); wait > 0 {
			tooMany(wait)
			return
		}
		if strings.HasPrefix(token, tenants.TokenPrefix) && c.data.tenantToken(r.Context(), token) {
			c.cfg.Logger.WarnContext(r.Context(), "console: a tenant token tried to sign in")
			fail(http.StatusForbidden, "That is a tenant token. Only the admin token can sign in to the console.")
			return
		}
		c.cfg.Logger.WarnContext(r.Context(), "console: failed sign-in")
		fail(http.StatusUnauthorized, "That token is not valid.")
		return
	}
	id, s, err := c.createSession(r.Context())
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	c.setSessionCookie(w, r, id, s.ExpiresAt)
	c.cfg.Logger.InfoContext(r.Context(), "console: operator signed in", "expires_at", s.ExpiresAt)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.deleteSession(r.Context(), s); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.clearSessionCookie(w, r)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// ---- overview ----

type overviewView struct {
	Counts counts
	// LastRun is the newest real GC run; LaterDryRun the newest dry run
	// when it came after it.
	LastRun, LaterDryRun *gc.Run
	Denials              chart
	Events               chart
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	now := c.now()
	cnt, err := c.data.counts(ctx)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	last, laterDry, err := c.data.lastRun(ctx)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	// Whole hours: the current hour and the 23 (or 167) before it.
	hourNow := now.Unix() / 3600
	den, err := c.data.eventsPerHour(ctx, []string{locks.EventDenied}, time.Unix((hourNow-23)*3600, 0))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	kinds := []string{locks.EventAcquired, locks.EventDenied, locks.EventReleased, locks.EventCollected}
	ev, err := c.data.eventsPerHour(ctx, kinds, time.Unix((hourNow-167)*3600, 0))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", s, view{Title: "Overview", Nav: "overview", Refresh: 30, Events: c.eventsURL(), Body: overviewView{
		Counts:      cnt,
		LastRun:     last,
		LaterDryRun: laterDry,
		Denials:     hourChart("Denials per hour, last 24 hours", hourNow, 24, []string{locks.EventDenied}, den),
		Events:      hourChart("Lock events per hour, last 7 days", hourNow, 168, kinds, ev),
	}})
}

// ---- ownership ----

type ownershipView struct {
	URL     string
	Key     string
	Tenant  string
	Owner   *locks.Owner
	Holders []holder
	// HoldersPager pages the holders (holders_after), Pager the events
	// (before) or a tenant's locks (page_token).
	HoldersPager pager
	Events       []lockEvent
	Pager        pager
	// Handover is the lock's open handover offer (nil for none).
	Handover *locks.Handover
	// Transferred is what the transfer form just did.
	Transferred *locks.Transfer
	// Tenant search.
	TenantRow *tenantRow
	Locks     []locks.Lock
	// The tenant's open handover offers, received and made (the first
	// maxListedLocks of each; MoreHandovers: there are more).
	Received, Offered []locks.Handover
	MoreHandovers     bool
}

func (c *Console) ownership(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	q := r.URL.Query()
	v := ownershipView{URL: strings.TrimSpace(q.Get("url")), Tenant: strings.TrimSpace(q.Get("tenant"))}
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	page := view{Title: "Ownership", Nav: "ownership", Events: c.eventsURL(), Body: &v}
	switch {
	case v.URL != "":
		key, err := c.data.normalizeURL(v.URL)
		if err != nil {
			msg, _ := userMessage(err)
			page.Error = msg
			c.render(w, r, http.StatusBadRequest, "ownership", s, page)
			return
		}
		v.Key = key.String()
		if v.Owner, err = c.data.owner(ctx, key); err != nil {
			c.fail(w, r, s, err)
			return
		}
		if v.Owner != nil {
			hs, next, err := c.data.holders(ctx, v.Owner.LockID, q.Get("holders_after"), size)
			if err != nil {
				c.fail(w, r, s, err)
				return
			}
			v.Holders, v.HoldersPager = hs, newPager(r, "holders_after", next)
			if v.Handover, err = c.data.handoverOfLock(ctx, v.Owner.LockID); err != nil {
				c.fail(w, r, s, err)
				return
			}
		}
		before, err := int64Param(r, "before")
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		evs, next, err := c.data.events(ctx, eventFilter{URL: key.String(), Before: before}, size)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		v.Events = evs
		v.Pager = newPager(r, "before", next)
	case v.Tenant != "":
		t, err := c.data.tenant(ctx, v.Tenant)
		if err != nil {
			if isNotFound(err) {
				page.Error = "No tenant named " + strconv.Quote(v.Tenant) + "."
				c.render(w, r, http.StatusNotFound, "ownership", s, page)
				return
			}
			c.fail(w, r, s, err)
			return
		}
		v.TenantRow = &t
		ls, next, err := c.data.tenantLocks(ctx, t.ID, size, q.Get("page_token"))
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		v.Locks = ls
		v.Pager = newPager(r, "page_token", next)
		if v.Received, v.Offered, v.MoreHandovers, err = c.data.tenantHandovers(ctx, t.ID, maxListedLocks); err != nil {
			c.fail(w, r, s, err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "ownership", s, page)
}

// transferLock is the ownership page's transfer form (POST, CSRF-checked by
// auth): locks.Service.Transfer with the console's admin identity, then the
// ownership page of the key, with what it did or why it was refused.
func (c *Console) transferLock(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	to := strings.TrimSpace(r.PostFormValue("to"))
	tr, err := c.data.transfer(ctx, r.PathValue("id"), to, r.PostFormValue("references"), locks.AdminActor(c.cfg.AdminToken))
	if err != nil {
		msg, safe := userMessage(err)
		if !safe {
			c.fail(w, r, s, err)
			return
		}
		if refs, ok := repolock.ErrorDetails(err)["references"].([]locks.Reference); ok {
			for _, ref := range refs {
				msg += " " + ref.Kind + " " + ref.Name + ";"
			}
		}
		c.render(w, r, statusOf(err), "ownership", s, view{Title: "Ownership", Nav: "ownership", Events: c.eventsURL(),
			Error: msg, Body: &ownershipView{}})
		return
	}
	c.cfg.Logger.InfoContext(ctx, "console: lock transferred", "lock_id", tr.LockID, "from", tr.From, "to", tr.To,
		"deleted_references", len(tr.DeletedReferences))
	c.render(w, r, http.StatusOK, "ownership", s, view{Title: "Ownership", Nav: "ownership", Events: c.eventsURL(),
		Notice: "Transferred " + string(tr.NormalizedURL) + " from " + tr.From + " to " + tr.To +
			" (" + strconv.Itoa(len(tr.DeletedReferences)) + " reference(s) deleted).",
		Body: &ownershipView{Transferred: &tr, URL: string(tr.NormalizedURL)}})
}

func int64Param(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, errBadRequest(name + " must be a positive integer")
	}
	return n, nil
}

// ---- denials ----

type denialsView struct {
	Requester string
	Owner     string
	URL       string
	Key       string
	Since     string
	Events    []lockEvent
	Pager     pager
	CSV       string
}

// sinceOptions are the time windows of the denials filter.
var sinceOptions = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// denialFilter reads the denials page's filters from the query string.
func (c *Console) denialFilter(r *http.Request) (denialsView, eventFilter, error) {
	q := r.URL.Query()
	v := denialsView{
		Requester: strings.TrimSpace(q.Get("requester")),
		Owner:     strings.TrimSpace(q.Get("owner")),
		URL:       strings.TrimSpace(q.Get("url")),
		Since:     q.Get("since"),
	}
	f := eventFilter{Event: locks.EventDenied, Requester: v.Requester, Owner: v.Owner}
	if v.URL != "" {
		key, err := c.data.normalizeURL(v.URL)
		if err != nil {
			return v, f, err
		}
		v.Key, f.URL = key.String(), key.String()
	}
	if v.Since != "" {
		d, ok := sinceOptions[v.Since]
		if !ok {
			return v, f, errBadRequest("since must be one of 1h, 24h, 7d, 30d")
		}
		f.Since = c.now().Add(-d)
	}
	before, err := int64Param(r, "before")
	f.Before = before
	return v, f, err
}

func (c *Console) denials(w http.ResponseWriter, r *http.Request, s *session) {
	v, f, err := c.denialFilter(r)
	page := view{Title: "Denials", Nav: "denials", Refresh: 30, Body: &v}
	if err != nil {
		msg, _ := userMessage(err)
		page.Error = msg
		c.render(w, r, statusOf(err), "denials", s, page)
		return
	}
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	evs, next, err := c.data.events(r.Context(), f, size)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v.Events = evs
	v.Pager = newPager(r, "before", next)
	csvURL := *r.URL
	csvURL.Path = "/ui/denials.csv"
	qq := csvURL.Query()
	qq.Del("before")
	qq.Del("page_size")
	csvURL.RawQuery = qq.Encode()
	v.CSV = csvURL.RequestURI()
	c.render(w, r, http.StatusOK, "denials", s, page)
}

// MaxCSVRows caps a denials download.
const MaxCSVRows = 100000

func (c *Console) denialsCSV(w http.ResponseWriter, r *http.Request, s *session) {
	_, f, err := c.denialFilter(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	f.Before = 0
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="denials.csv"`)
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"event_id", "denied_at", "last_denied_at", "denials", "git_repository_url", "requested_by", "owner", "reason", "reserved_prefix"})
	err = c.data.eachEvent(r.Context(), f, MaxCSVRows, func(e lockEvent) error {
		return cw.Write([]string{strconv.FormatInt(e.ID, 10), e.CreatedAt.UTC().Format(time.RFC3339),
			e.Last().UTC().Format(time.RFC3339), strconv.FormatInt(e.Count, 10),
			e.URL, derefString(e.Actor), derefString(e.Owner), e.DenialReason(), derefString(e.ReservedPrefix)})
	})
	cw.Flush()
	if err != nil {
		// The status is sent: log and cut the body short.
		c.cfg.Logger.ErrorContext(r.Context(), "console: denials csv", "error", err.Error())
	}
}

// ---- GC ----

type gcView struct {
	Runs   []gc.Run
	Pager  pager
	Result *gc.Run
}

func (c *Console) gcPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderGC(w, r, s, nil, http.StatusOK)
}

func (c *Console) renderGC(w http.ResponseWriter, r *http.Request, s *session, result *gc.Run, status int) {
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	tok := r.URL.Query().Get("page_token")
	if len(tok) > 1024 {
		c.fail(w, r, s, errBadRequest("page_token is not valid"))
		return
	}
	runs, next, err := c.data.gcRuns(r.Context(), size, tok)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v := gcView{Runs: runs, Pager: newPagerOn("/ui/gc", r, "page_token", next), Result: result}
	c.render(w, r, status, "gc", s, view{Title: "GC", Nav: "gc", Body: v})
}

func (c *Console) gcDryRun(w http.ResponseWriter, r *http.Request, s *session) {
	c.collect(w, r, s, true)
}
func (c *Console) gcRun(w http.ResponseWriter, r *http.Request, s *session) {
	c.collect(w, r, s, false)
}

// collect runs the GC like POST /v1/admin/gc and shows the result above the
// runs (a skipped run says so). The POST answers the page directly: a dry
// run's candidates exist only in this response.
func (c *Console) collect(w http.ResponseWriter, r *http.Request, s *session, dryRun bool) {
	run, err := c.data.collect(r.Context(), dryRun)
	if err != nil && run.ID == "" {
		c.fail(w, r, s, err)
		return
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: gc", "dry_run", dryRun, "status", string(run.Status), "run_id", run.ID)
	status := http.StatusOK
	if err != nil {
		status = statusOf(err)
	}
	c.renderGC(w, r, s, &run, status)
}

// ---- sync ----

type syncView struct {
	Hosts []syncHost
	Pager pager
	// One host's repositories that need a re-index.
	Tenant string
	Host   string
	Repos  []syncstate.Repository
}

func (c *Console) syncPage(w http.ResponseWriter, r *http.Request, s *session) {
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	hosts, next, err := c.data.syncHosts(r.Context(), r.URL.Query().Get("after"), size)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "sync", s, view{Title: "Sync", Nav: "sync", Refresh: 30,
		Body: syncView{Hosts: hosts, Pager: newPager(r, "after", next)}})
}

func (c *Console) syncHost(w http.ResponseWriter, r *http.Request, s *session) {
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	tenant, host := r.PathValue("tenant"), r.PathValue("host")
	repos, next, err := c.data.needsIndex(r.Context(), tenant, host, size, r.URL.Query().Get("page_token"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "synchost", s, view{Title: "Sync: " + host, Nav: "sync",
		Body: syncView{Tenant: tenant, Host: host, Repos: repos, Pager: newPager(r, "page_token", next)}})
}

// ---- leases ----

type leasesView struct {
	Leases []leaseRow
	Pager  pager
}

// leasesPage lists the valid leases of every tenant: holder, fencing
// token, TTL and time left, refreshed every 5 s.
func (c *Console) leasesPage(w http.ResponseWriter, r *http.Request, s *session) {
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	rows, next, err := c.data.leases(r.Context(), r.URL.Query().Get("after"), size)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "leases", s, view{Title: "Leases", Nav: "leases", Refresh: 5,
		Body: leasesView{Leases: rows, Pager: newPager(r, "after", next)}})
}

// ---- tenants ----

type tenantsView struct {
	Tenants []tenantRow
	Pager   pager
	Created *tenants.Tenant
	Token   string
	Deleted *apps.TenantDeletion
	Form    struct{ Name, DisplayName string }
}

// tenantsPage takes no notice from its address: a status notice is only
// ever written by the handler that did the work (revokeTokens), never by
// whoever wrote a link.
func (c *Console) tenantsPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderTenants(w, r, s, http.StatusOK, &tenantsView{}, view{})
}

func (c *Console) renderTenants(w http.ResponseWriter, r *http.Request, s *session, status int, v *tenantsView, page view) {
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	ts, next, err := c.data.listTenants(r.Context(), r.URL.Query().Get("after"), size)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v.Tenants = ts
	v.Pager = newPagerOn("/ui/tenants", r, "after", next)
	page.Title, page.Nav, page.Body = "Tenants", "tenants", v
	c.render(w, r, status, "tenants", s, page)
}

// createTenant answers with the page itself (not a redirect), so the new
// token is shown once and never lands in a URL or the history.
func (c *Console) createTenant(w http.ResponseWriter, r *http.Request, s *session) {
	v := &tenantsView{}
	v.Form.Name = strings.TrimSpace(r.PostFormValue("name"))
	v.Form.DisplayName = strings.TrimSpace(r.PostFormValue("display_name"))
	u, token, err := c.data.createTenant(r.Context(), v.Form.Name, v.Form.DisplayName)
	if err != nil {
		msg, safe := userMessage(err)
		if !safe {
			c.fail(w, r, s, err)
			return
		}
		c.renderTenants(w, r, s, statusOf(err), v, view{Error: msg})
		return
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: tenant created", "user", u.Name)
	v.Created, v.Token = &u, token
	v.Form.Name, v.Form.DisplayName = "", ""
	c.renderTenants(w, r, s, http.StatusCreated, v, view{})
}

// confirmRevoke asks for the tenant's name before its tokens are revoked,
// as delete does: revoking cuts off every client of the tenant at once.
func (c *Console) confirmRevoke(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderConfirmRevoke(w, r, s, http.StatusOK, view{})
}

func (c *Console) renderConfirmRevoke(w http.ResponseWriter, r *http.Request, s *session, status int, page view) {
	t, err := c.data.tenant(r.Context(), r.PathValue("name"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	page.Title, page.Nav, page.Body = "Revoke the tokens of "+t.Name, "tenants", t
	c.render(w, r, status, "revoke", s, page)
}

// revokeTokens needs the tenant's name typed again as confirmation.
func (c *Console) revokeTokens(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	if r.PostFormValue("confirm") != name {
		c.renderConfirmRevoke(w, r, s, http.StatusBadRequest, view{Error: "Type the tenant's name to confirm."})
		return
	}
	n, err := c.data.revokeTokens(r.Context(), name)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: tokens revoked", "user", name, "revoked", n)
	// The notice is the page's answer to the POST (as createTenant's),
	// not a redirect whose query would say what to print: the name is
	// the tenant's that was found, the count the one revoked.
	c.renderTenants(w, r, s, http.StatusOK, &tenantsView{},
		view{Notice: "Revoked " + strconv.FormatInt(n, 10) + " token(s) of " + name + "."})
}

type deleteView struct {
	Tenant tenantRow
	Locks  []locks.Lock
	More   bool
}

// maxListedLocks caps the locks the confirmation page names.
const maxListedLocks = 100

func (c *Console) confirmDelete(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderConfirm(w, r, s, http.StatusOK, view{})
}

func (c *Console) renderConfirm(w http.ResponseWriter, r *http.Request, s *session, status int, page view) {
	ctx := r.Context()
	t, err := c.data.tenant(ctx, r.PathValue("name"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	ls, next, err := c.data.tenantLocks(ctx, t.ID, maxListedLocks, "")
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	page.Title, page.Nav, page.Body = "Delete "+t.Name, "tenants", deleteView{Tenant: t, Locks: ls, More: next != ""}
	c.render(w, r, status, "delete", s, page)
}

// deleteTenant needs the tenant's name typed again as confirmation.
func (c *Console) deleteTenant(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	if r.PostFormValue("confirm") != name {
		c.renderConfirm(w, r, s, http.StatusBadRequest, view{Error: "Type the tenant's name to confirm."})
		return
	}
	d, err := c.data.deleteTenant(r.Context(), name)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.cfg.Logger.InfoContext(r.Context(), "console: tenant deleted", "tenant", d.Tenant,
		"applications", d.Applications, "repository_credentials", d.RepositoryCredentials, "locks_released", d.LocksReleased)
	c.renderTenants(w, r, s, http.StatusOK, &tenantsView{Deleted: &d}, view{})
}
