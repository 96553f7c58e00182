package console

import (
	"context"
	"net/http"
	"testing"
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
