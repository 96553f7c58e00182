package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"slices"
	"time"

	"github.com/repolock/repolock/client"
)

// The Examples run against the server TestMain starts (serverURL, with the
// admin token adminToken). Their HTTP client validates every exchange
// against api/openapi.yaml; in your code, leave WithHTTPClient out or pass
// your own *http.Client.
var exampleHTTP = &http.Client{Transport: lazyTransport{}}

type lazyTransport struct{}

func (lazyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return exampleTransport.RoundTrip(r)
}

// exampleTenant creates a tenant with the admin token and returns a client
// acting as it.
func exampleTenant(ctx context.Context, name string) *client.Client {
	admin := client.New(serverURL, client.WithToken(adminToken), client.WithHTTPClient(exampleHTTP))
	u, err := admin.CreateUser(ctx, client.CreateUserRequest{Name: name})
	if err != nil {
		log.Fatal(err)
	}
	return client.New(serverURL, client.WithToken(u.Token), client.WithHTTPClient(exampleHTTP))
}

// The main flow end to end, as README.md and docs/api.md show it: the
// admin creates a tenant; the tenant claims a repository by creating an
// Application; another tenant gets repository_claimed; the tenant lists its
// locks; the admin runs the GC and reads the ownership report.
func Example() {
	ctx := context.Background()
	admin := client.New(serverURL, client.WithToken(adminToken), client.WithHTTPClient(exampleHTTP))
	u, err := admin.CreateUser(ctx, client.CreateUserRequest{Name: "team-g"})
	if err != nil {
		log.Fatal(err)
	}
	c := client.New(serverURL, client.WithToken(u.Token), client.WithHTTPClient(exampleHTTP))

	// Claim a repository by creating an Application on it.
	app, err := c.CreateApplication(ctx, client.CreateApplicationRequest{
		Name: "guestbook", RepoURL: "git@github.com:example/team-g-apps.git", Path: "guestbook",
	})
	if owner, ok := client.ClaimedBy(err); ok {
		log.Fatalf("the repository belongs to %s", owner) // 409 repository_claimed
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", app.NormalizedURL)

	// Another tenant, another spelling of the same URL.
	other := exampleTenant(ctx, "team-h")
	_, err = other.CreateApplication(ctx, client.CreateApplicationRequest{Name: "mine", RepoURL: "https://github.com/example/team-g-apps"})
	if owner, ok := client.ClaimedBy(err); ok {
		fmt.Println("team-h: claimed by", owner)
	}

	// Every lock of the tenant, page after page.
	for lock, err := range c.ListLocks(ctx, client.ListOptions{PageSize: 100}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("lock", lock.NormalizedURL, "applications:", lock.Applications)
	}

	// Admin: collect locks nothing references, then who owns what.
	run, err := admin.RunGC(ctx, client.GCOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("gc:", run.Status)
	rows, err := admin.GetReport(ctx, "ownership", client.ReportOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, row := range rows.Items {
		if row["tenant_name"] == "team-g" {
			fmt.Println("team-g: locks", row["locks"], "applications", row["applications"])
		}
	}
	// Output:
	// claimed github.com/example/team-g-apps
	// team-h: claimed by team-g
	// lock github.com/example/team-g-apps applications: 1
	// gc: succeeded
	// team-g: locks 1 applications 1
}

// Claim a repository by creating an Application on it: any spelling of the
// URL names the same repository, and the tenant now holds its lock.
func Example_claimRepository() {
	ctx := context.Background()
	teamA := exampleTenant(ctx, "team-a")

	app, err := teamA.CreateApplication(ctx, client.CreateApplicationRequest{
		Name:    "guestbook",
		RepoURL: "git@github.com:argoproj/argocd-example-apps.git",
		Path:    "guestbook",
	})
	if err != nil {
		log.Fatal(err)
	}
	lock, err := teamA.GetLock(ctx, app.LockID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", app.NormalizedURL)
	fmt.Println("references:", lock.Applications, "application,", lock.RepositoryCredentials, "credentials")
	// Output:
	// claimed github.com/argoproj/argocd-example-apps
	// references: 1 application, 0 credentials
}

// Handle repository_claimed: another tenant owns the repository, whatever
// spelling of its URL is used.
func Example_repositoryClaimed() {
	ctx := context.Background()
	teamB, teamC := exampleTenant(ctx, "team-b"), exampleTenant(ctx, "team-c")
	if _, err := teamB.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "https://github.com/example/shared"}); err != nil {
		log.Fatal(err)
	}

	_, err := teamC.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: "git@github.com:example/shared.git"})
	if owner, ok := client.ClaimedBy(err); ok {
		fmt.Println("repository is claimed by", owner)
	}
	fmt.Println("IsClaimed:", client.IsClaimed(err))
	// Output:
	// repository is claimed by team-b
	// IsClaimed: true
}

// List locks: the iterator fetches page after page.
func ExampleClient_ListLocks() {
	ctx := context.Background()
	teamD := exampleTenant(ctx, "team-d")
	for _, u := range []string{"https://github.com/example/one", "https://github.com/example/two", "https://gitlab.com/example/three"} {
		if _, err := teamD.AcquireLock(ctx, u); err != nil {
			log.Fatal(err)
		}
	}

	var keys []string
	for lock, err := range teamD.ListLocks(ctx, client.ListOptions{PageSize: 2}) {
		if err != nil {
			log.Fatal(err)
		}
		keys = append(keys, lock.NormalizedURL)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Println(k)
	}
	// Output:
	// github.com/example/one
	// github.com/example/two
	// gitlab.com/example/three
}

// Run the GC (admin token): locks without references older than the
// minimum age are collected.
func ExampleClient_RunGC() {
	ctx := context.Background()
	teamE := exampleTenant(ctx, "team-e")
	bare, err := teamE.AcquireLock(ctx, "https://github.com/example/unused")
	if err != nil {
		log.Fatal(err)
	}

	admin := client.New(serverURL, client.WithToken(adminToken), client.WithHTTPClient(exampleHTTP))
	minAge := time.Duration(0) // collect even fresh locks (the default is GC_MIN_AGE)
	run, err := admin.RunGC(ctx, client.GCOptions{MinAge: &minAge})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", run.Status)
	_, err = teamE.GetLock(ctx, bare.LockID)
	fmt.Println("lock collected:", client.IsNotFound(err))
	// Output:
	// status: succeeded
	// lock collected: true
}

// Read a report (admin token): rows are column name → value.
func ExampleClient_GetReport() {
	ctx := context.Background()
	teamF := exampleTenant(ctx, "team-f")
	for _, name := range []string{"api", "worker"} {
		if _, err := teamF.CreateApplication(ctx, client.CreateApplicationRequest{Name: name, RepoURL: "https://github.com/example/team-f-" + name}); err != nil {
			log.Fatal(err)
		}
	}

	admin := client.New(serverURL, client.WithToken(adminToken), client.WithHTTPClient(exampleHTTP))
	rows, err := admin.GetReport(ctx, "ownership", client.ReportOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rows.Columns)
	for _, row := range rows.Items {
		if row["tenant_name"] == "team-f" {
			fmt.Println("team-f: locks", row["locks"], "applications", row["applications"])
		}
	}
	// Output:
	// [tenant_id tenant_name locks applications credentials unreferenced_locks]
	// team-f: locks 2 applications 2
}
