package console

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
)

// TestReservationsPage: the signed-in operator sees the reservations, a
// page at a time; signed out it redirects to the sign-in page.
func TestReservationsPage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme, _ := e.tenant("acme")
	ops, _ := e.tenant("ops")
	for _, r := range []struct{ prefix, tenant string }{{"github.com/acme", acme.ID}, {"github.com/acme/shared", ops.ID}, {"gitlab.example.com", ops.ID}} {
		if _, err := e.db.ExecContext(ctx, `INSERT INTO reservations (prefix, cluster_user_id) VALUES ($1, $2)`, r.prefix, r.tenant); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser()
	if r := b.get("/ui/reservations"); r.Status != http.StatusSeeOther {
		t.Fatalf("signed out: %d", r.Status)
	}
	b.signIn()
	r := b.get("/ui/reservations?page_size=2")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `<td>github.com/acme</td><td>acme</td>`, `<td>github.com/acme/shared</td><td>ops</td>`, `aria-current="page">Reservations</a>`)
	wantNotContains(t, r, "gitlab.example.com</td>")
	r = b.get(nextLink(r))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `<td>gitlab.example.com</td><td>ops</td>`)
}

// TestReservationForms: the add form's dry run lists the other tenants'
// live locks under the prefix and changes nothing; Reserve is refused
// (409, the locks listed) until "existing: keep"; Remove deletes the
// reservation and leaves the locks; every form needs the session's CSRF
// token.
func TestReservationForms(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme, _ := e.tenant("acme")
	eve, _ := e.tenant("eve")
	e.mustApp(eve.ID, "old", "https://github.com/acme/old")
	e.mustApp(acme.ID, "own", "https://github.com/acme/own")
	b := e.browser()
	csrf := b.signIn()

	r := b.get("/ui/reservations")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `id="reserve-form"`, `value="check"`, `value="reserve"`, `<option value="keep"`)

	// Dry run: eve's lock is listed (acme's own is not), nothing changes.
	r = b.post("/ui/reservations", form(csrf, "prefix", "https://GitHub.com/Acme/", "tenant", "acme", "action", "check"))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "Dry run: nothing changed.", `<code id="reserve-normalized">github.com/acme</code>`,
		`<span id="conflict-total">1</span>`, "<code>github.com/acme/old</code></a></td><td>eve</td>", `value="https://GitHub.com/Acme/"`)
	wantNotContains(t, r, "github.com/acme/own</code>")
	if n := e.count(`SELECT count(*) FROM reservations`); n != 0 {
		t.Fatalf("a dry run reserved: %d rows", n)
	}
	// Reserve without keep: refused, listing the lock.
	r = b.post("/ui/reservations", form(csrf, "prefix", "github.com/acme", "tenant", "acme", "action", "reserve", "existing", "refuse"))
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, r, "other users hold live locks under github.com/acme", "<code>github.com/acme/old</code></a></td><td>eve</td>")
	// Bad input answers 4xx with the page.
	for _, f := range []url.Values{
		form(csrf, "prefix", "github.com/acme", "tenant", "acme", "action", "reserve", "existing", "maybe"),
		form(csrf, "prefix", "github.com/acme", "tenant", "acme", "action", "launch"),
		form(csrf, "prefix", "", "tenant", "acme", "action", "reserve"),
	} {
		wantStatus(t, b.post("/ui/reservations", f), http.StatusBadRequest)
	}
	wantStatus(t, b.post("/ui/reservations", form(csrf, "prefix", "github.com/acme", "tenant", "nobody", "action", "reserve")), http.StatusNotFound)
	// With keep: reserved, eve keeps her lock.
	r = b.post("/ui/reservations", form(csrf, "prefix", "github.com/acme", "tenant", "acme", "action", "reserve", "existing", "keep"))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "Reserved github.com/acme for acme (1 lock(s) of other tenants kept", "<td>github.com/acme</td><td>acme</td>")
	wantStatus(t, b.post("/ui/reservations", form(csrf, "prefix", "github.com/acme", "tenant", "acme", "action", "reserve", "existing", "keep")), http.StatusConflict)
	var id string
	if err := e.db.GetContext(ctx, &id, `SELECT id FROM reservations WHERE prefix = 'github.com/acme'`); err != nil {
		t.Fatal(err)
	}
	wantContains(t, b.get("/ui/reservations"), `action="/ui/reservations/`+id+`/delete"`)

	// CSRF: a missing or another session's token changes nothing.
	other := e.browser()
	otherCSRF := other.signIn()
	for _, p := range []struct {
		path string
		form url.Values
	}{
		{"/ui/reservations", url.Values{"prefix": {"github.com/x"}, "tenant": {"acme"}, "action": {"reserve"}}},
		{"/ui/reservations/" + id + "/delete", url.Values{}},
		{"/ui/handovers/" + id + "/withdraw", url.Values{}},
	} {
		for _, tok := range []string{"", otherCSRF} {
			f := url.Values{}
			for k, v := range p.form {
				f[k] = v
			}
			if tok != "" {
				f.Set("csrf", tok)
			}
			if r := b.post(p.path, f); r.Status != http.StatusForbidden {
				t.Errorf("%s with token %q: %d", p.path, tok, r.Status)
			}
		}
		if r := b.get(p.path); r.Status != http.StatusMethodNotAllowed && p.path != "/ui/reservations" {
			t.Errorf("GET %s: %d, want 405", p.path, r.Status)
		}
	}
	if n := e.count(`SELECT count(*) FROM reservations`); n != 1 {
		t.Fatalf("%d reservations after refused posts, want 1", n)
	}

	// A claim under it is refused and shown on the denials page with
	// its reason (report_denials' reason and reserved_prefix).
	if _, err := e.app(eve.ID, "new", "https://github.com/acme/new"); !repolock.IsCode(err, repolock.ERepositoryReserved) {
		t.Fatalf("eve's claim under the reservation: %v", err)
	}
	wantContains(t, b.get("/ui/denials?requester=eve"), `<td class="reason">reserved (under <code>github.com/acme</code>)</td><td>acme</td>`)
	wantContains(t, b.get("/ui/denials.csv?requester=eve"), ",github.com/acme/new,eve,acme,reserved,github.com/acme\n")

	// Remove: the reservation goes, the locks stay.
	r = b.post("/ui/reservations/"+id+"/delete", form(csrf, "prefix", "github.com/acme"))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "Removed the reservation github.com/acme ("+id+").", "No reservations.")
	wantStatus(t, b.post("/ui/reservations/"+id+"/delete", form(csrf)), http.StatusNotFound)
	if n := e.count(`SELECT count(*) FROM RepositoryLockOwner`); n != 2 {
		t.Errorf("%d locks after the removal, want 2", n)
	}
}

// TestWithdrawHandoverForm: the operator withdraws a pending offer from
// the lock's ownership page and from the tenant's; recorded with the
// admin's identity; a second withdrawal is 404.
func TestWithdrawHandoverForm(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, _ := e.tenant("alice")
	e.tenant("bob")
	acq, err := e.ui.cfg.Locks.Acquire(ctx, alice.ID, "github.com/org/offered")
	if err != nil {
		t.Fatal(err)
	}
	offer := func() locks.Handover {
		h, err := e.ui.cfg.Locks.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: acq.LockID, To: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	b := e.browser()
	csrf := b.signIn()
	h := offer()
	r := b.get("/ui/ownership?url=github.com/org/offered")
	wantContains(t, r, `action="/ui/handovers/`+h.ID+`/withdraw"`, `id="withdraw-handover"`)
	r = b.post("/ui/handovers/"+h.ID+"/withdraw", form(csrf))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "Withdrew the offer of github.com/org/offered from alice to bob: the lock is no longer pinned.")
	wantStatus(t, b.post("/ui/handovers/"+h.ID+"/withdraw", form(csrf)), http.StatusNotFound)
	if n := e.count(`SELECT count(*) FROM repository_lock_events WHERE event = 'handover_withdrawn' AND actor = $1 AND details->>'reason' = 'admin'`,
		locks.AdminActor(testAdminToken)); n != 1 {
		t.Errorf("%d handover_withdrawn events by the admin, want 1", n)
	}
	// From the tenant's page (both sides list it with the button).
	h = offer()
	for _, name := range []string{"alice", "bob"} {
		wantContains(t, b.get("/ui/ownership?tenant="+name), `action="/ui/handovers/`+h.ID+`/withdraw"`)
	}
	wantStatus(t, b.post("/ui/handovers/"+h.ID+"/withdraw", form(csrf)), http.StatusOK)
	wantContains(t, b.get("/ui/ownership?tenant=bob"), "No pending handovers.")
}
