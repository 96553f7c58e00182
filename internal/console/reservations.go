package console

// The reservations page (add, dry run, remove) and the operator's end of
// a handover offer (issue 25). The console is the admin's: a tenant acts
// on its offers through the API (accept, decline, withdraw); the operator
// sees every pending offer on the ownership page and may withdraw one for
// its owner (locks.Service.CancelHandover, recorded as handover_withdrawn
// with the admin's identity), or transfer the lock outright.

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
)

type reservationsView struct {
	Reservations []locks.Reservation
	Pager        pager
	// The add form's values, kept after a dry run or a refusal.
	Prefix, Tenant, Existing string
	// Checked is set after a dry run or a refused add: the prefix as
	// normalized (a dry run only) and the other tenants' live locks under
	// it (Total of them in all; at most locks.MaxConflictsListed listed).
	Checked    bool
	Normalized string
	Conflicts  []locks.CoveredLock
	Total      int
}

// reservationsPage lists the reservations, a page at a time, under the
// add form.
func (c *Console) reservationsPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderReservations(w, r, s, http.StatusOK, view{}, reservationsView{Existing: "refuse"})
}

// renderReservations renders the page with v's form state and notices
// and the first (or the address's) page of the reservations.
func (c *Console) renderReservations(w http.ResponseWriter, r *http.Request, s *session, status int, page view, v reservationsView) {
	size, err := c.pageSize(r)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	rows, next, err := c.data.reservations(r.Context(), size, r.URL.Query().Get("after"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v.Reservations, v.Pager = rows, newPager(r, "after", next)
	page.Title, page.Nav, page.Body = "Reservations", "reservations", v
	c.render(w, r, status, "reservations", s, page)
}

// addReservation is the add form (POST, CSRF-checked by auth):
// action=check is a dry run (locks.ReserveRequest.DryRun: the other
// tenants' live locks the prefix covers, nothing changed), action=reserve
// reserves, refused with reservation_conflict listing those locks unless
// existing=keep grandfathers them.
func (c *Console) addReservation(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	v := reservationsView{
		Prefix:   strings.TrimSpace(r.PostFormValue("prefix")),
		Tenant:   strings.TrimSpace(r.PostFormValue("tenant")),
		Existing: r.PostFormValue("existing"),
	}
	var keep bool
	switch v.Existing {
	case "", "refuse":
		v.Existing = "refuse"
	case "keep":
		keep = true
	default:
		c.renderReservations(w, r, s, http.StatusBadRequest, view{Error: `Existing locks: choose "refuse" or "keep".`}, v)
		return
	}
	var dryRun bool
	switch r.PostFormValue("action") {
	case "check":
		dryRun = true
	case "reserve":
	default:
		c.renderReservations(w, r, s, http.StatusBadRequest, view{Error: "Choose Check or Reserve."}, v)
		return
	}
	res, covered, err := c.data.reserve(ctx, locks.ReserveRequest{Prefix: v.Prefix, Tenant: v.Tenant, Keep: keep, DryRun: dryRun})
	if err != nil {
		msg, safe := userMessage(err)
		if !safe {
			c.fail(w, r, s, err)
			return
		}
		if repolock.IsCode(err, repolock.EReservationConflict) {
			d := repolock.ErrorDetails(err)
			v.Checked = true
			v.Conflicts, _ = d["locks"].([]locks.CoveredLock)
			v.Total, _ = d["total"].(int)
		}
		c.renderReservations(w, r, s, statusOf(err), view{Error: msg}, v)
		return
	}
	if dryRun {
		v.Checked, v.Normalized, v.Conflicts, v.Total = true, string(res.Prefix), covered, len(covered)
		if len(v.Conflicts) > locks.MaxConflictsListed {
			v.Conflicts = v.Conflicts[:locks.MaxConflictsListed]
		}
		notice := "Dry run: nothing changed. " + string(res.Prefix) + " for " + res.TenantName + " covers " +
			strconv.Itoa(len(covered)) + " live lock(s) of other tenants."
		if len(covered) > 0 {
			notice += ` Reserve with "existing: keep" to let their owners keep them until released.`
		}
		c.renderReservations(w, r, s, http.StatusOK, view{Notice: notice}, v)
		return
	}
	c.cfg.Logger.InfoContext(ctx, "console: prefix reserved", "prefix", res.Prefix, "tenant", res.TenantName,
		"grandfathered", len(covered))
	c.renderReservations(w, r, s, http.StatusOK, view{Notice: "Reserved " + string(res.Prefix) + " for " + res.TenantName +
		" (" + strconv.Itoa(len(covered)) + " lock(s) of other tenants kept by their owners until released)."},
		reservationsView{Existing: "refuse"})
}

// removeReservation is a row's Remove button (POST, CSRF-checked by auth):
// locks.Service.Unreserve. Locks are not touched.
func (c *Console) removeReservation(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	id := r.PathValue("id")
	if err := c.data.unreserve(ctx, id); err != nil {
		msg, safe := userMessage(err)
		if !safe {
			c.fail(w, r, s, err)
			return
		}
		c.renderReservations(w, r, s, statusOf(err), view{Error: msg}, reservationsView{Existing: "refuse"})
		return
	}
	prefix := strings.TrimSpace(r.PostFormValue("prefix")) // for the notice only
	c.cfg.Logger.InfoContext(ctx, "console: reservation removed", "reservation_id", id, "prefix", prefix)
	c.renderReservations(w, r, s, http.StatusOK, view{Notice: "Removed the reservation " + prefix + " (" + id + ")."},
		reservationsView{Existing: "refuse"})
}

// withdrawHandover is the Withdraw button of a pending offer on the
// ownership page (POST, CSRF-checked by auth): locks.Service.CancelHandover
// with the console's admin identity, then the ownership page of the key.
func (c *Console) withdrawHandover(w http.ResponseWriter, r *http.Request, s *session) {
	ctx := r.Context()
	h, err := c.data.cancelHandover(ctx, r.PathValue("id"), locks.AdminActor(c.cfg.AdminToken))
	page := view{Title: "Ownership", Nav: "ownership", Events: c.eventsURL()}
	if err != nil {
		msg, safe := userMessage(err)
		if !safe {
			c.fail(w, r, s, err)
			return
		}
		page.Error, page.Body = msg, &ownershipView{}
		c.render(w, r, statusOf(err), "ownership", s, page)
		return
	}
	c.cfg.Logger.InfoContext(ctx, "console: handover withdrawn", "handover_id", h.ID, "lock_id", h.LockID,
		"from", h.From, "to", h.ToName)
	page.Notice = "Withdrew the offer of " + string(h.NormalizedURL) + " from " + h.From + " to " + h.ToName +
		": the lock is no longer pinned."
	page.Body = &ownershipView{URL: string(h.NormalizedURL)}
	c.render(w, r, http.StatusOK, "ownership", s, page)
}
