package tests

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/repolock/repolock/client"
)

// TestReservationsEndToEnd: a reservation made through the CLI against the
// binary's database refuses another tenant's claims over HTTP at once (the
// check is in the claim's statement: no cache to refresh), grandfathers
// the lock it was told to keep, and the denial is in the denials report.
func TestReservationsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	acme := s.tenant(t, "acme")
	eve := s.tenant(t, "eve")
	if _, err := eve.AcquireLock(ctx, "https://github.com/acme/old"); err != nil {
		t.Fatal(err)
	}

	out, errOut, code := runCLI(t, s.DatabaseURL, "reservation", "add", "https://GitHub.com/Acme", "acme")
	if code != 3 || !strings.Contains(out, "github.com/acme/old") {
		t.Fatalf("reservation add over eve's lock: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, s.DatabaseURL, "reservation", "--keep", "add", "https://GitHub.com/Acme", "acme")
	if code != 0 || !strings.Contains(out, `"prefix": "github.com/acme"`) {
		t.Fatalf("reservation add --keep: %d %q %q", code, out, errOut)
	}

	_, err := eve.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "git@github.com:acme/web.git"})
	ce := wantAPIError(t, "eve's application", err, http.StatusConflict, client.CodeRepositoryReserved, "")
	if tenant, prefix, ok := client.Reserved(ce); !ok || tenant != "acme" || prefix != "github.com/acme" {
		t.Fatalf("eve's application: %v", ce)
	}
	if _, err := eve.AcquireLock(ctx, "https://github.com/acme/old"); err != nil {
		t.Fatalf("eve's grandfathered lock: %v", err)
	}
	if _, err := acme.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "git@github.com:acme/web.git"}); err != nil {
		t.Fatalf("acme's application: %v", err)
	}
	rs, err := s.admin(t).ListReservationsPage(ctx, client.ListOptions{})
	if err != nil || len(rs.Items) != 1 || rs.Items[0].Prefix != "github.com/acme" {
		t.Fatalf("list: %+v %v", rs, err)
	}
	out, errOut, code = runCLI(t, s.DatabaseURL, "report", "denials", "--format", "csv")
	if code != 0 || !strings.Contains(out, "github.com/acme/web") || !strings.Contains(out, "acme") {
		t.Fatalf("denials report: %d %q %q", code, out, errOut)
	}
	// The report says why: the CSV's last two columns are reason and
	// reserved_prefix (migration 000025), through the CLI and the API.
	if !strings.Contains(out, ",reason,reserved_prefix\n") || !strings.Contains(out, ",reserved,github.com/acme\n") {
		t.Errorf("denials report without the reason: %q", out)
	}
	rep, err := s.admin(t).GetReport(ctx, "denials", client.ReportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Columns, "reason") || !slices.Contains(rep.Columns, "reserved_prefix") {
		t.Errorf("report columns %v", rep.Columns)
	}
}
