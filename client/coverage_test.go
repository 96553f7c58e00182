package client_test

import (
	"reflect"
	"sort"
	"testing"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/contracttest"
)

// operationMethods maps every operationId of api/openapi.yaml to the
// client method that calls it. (List operations also have an iterator:
// listLocks → ListLocksPage and ListLocks.)
var operationMethods = map[string][]string{
	"getHealthz": {"Healthz"}, "headHealthz": {"Healthz"}, "getReadyz": {"Readyz"}, "headReadyz": {"Readyz"},
	"getVersion": {"Version"}, "getMetrics": {"Metrics"}, "getOpenAPIYAML": {"OpenAPIYAML"}, "getOpenAPIJSON": {"OpenAPIJSON"},
	"getMe": {"Me"}, "normalizeURL": {"Normalize"},
	"createApplication": {"CreateApplication"}, "listApplications": {"ListApplicationsPage", "ListApplications"},
	"getApplication": {"GetApplication"}, "updateApplication": {"UpdateApplication"}, "deleteApplication": {"DeleteApplication"},
	"createRepositoryCredential": {"CreateRepositoryCredential"}, "listRepositoryCredentials": {"ListRepositoryCredentialsPage", "ListRepositoryCredentials"},
	"getRepositoryCredential": {"GetRepositoryCredential"}, "updateRepositoryCredential": {"UpdateRepositoryCredential"},
	"deleteRepositoryCredential": {"DeleteRepositoryCredential"},
	"listLocks":                  {"ListLocksPage", "ListLocks"}, "getLock": {"GetLock"}, "acquireLock": {"AcquireLock"},
	"createRepository": {"CreateRepository"}, "listRepositories": {"ListRepositoriesPage", "ListRepositories"},
	"getRepository": {"GetRepository"}, "deleteRepository": {"DeleteRepository"},
	"createBranch": {"CreateBranch"}, "listBranches": {"ListBranchesPage", "ListBranches"}, "getBranch": {"GetBranch"},
	"updateBranch": {"UpdateBranch"}, "deleteBranch": {"DeleteBranch"}, "createCommit": {"Commit"}, "listCommitLog": {"LogPage", "Log"},
	"getCommit": {"GetCommit"}, "createTag": {"CreateTag"}, "listTags": {"ListTagsPage", "ListTags"}, "getTag": {"GetTag"}, "deleteTag": {"DeleteTag"},
	"putSyncHost": {"PutSyncHost"}, "listSyncHosts": {"ListSyncHostsPage", "ListSyncHosts"}, "getSyncHost": {"GetSyncHost"},
	"connectSyncHost": {"ConnectSyncHost"}, "applySyncEvents": {"ApplySyncEvents"}, "recordSyncListing": {"RecordSyncListing"},
	"listSyncRepositories": {"ListSyncRepositoriesPage", "ListSyncRepositories"}, "getSyncRepository": {"GetSyncRepository"},
	"recordSyncIndexed": {"RecordSyncIndexed"},
	"createUser":        {"CreateUser"}, "listUsers": {"ListUsersPage", "ListUsers"}, "deleteUser": {"DeleteUser"}, "issueToken": {"IssueToken"},
	"revokeTokens": {"RevokeTokens"}, "runGC": {"RunGC"}, "listGCRuns": {"ListGCRunsPage", "ListGCRuns"}, "getGCRun": {"GetGCRun"},
	"listReports": {"ListReports"}, "getReport": {"GetReport", "GetReportCSV"}, "verifyOwnershipReport": {"VerifyOwnershipReport"},
	"runRekey": {"RunRekey"}, "listAliases": {"ListAliases"}, "createAlias": {"CreateAlias", "PlanCreateAlias"},
	"deleteAlias":  {"DeleteAlias", "PlanDeleteAlias"},
	"acquireLease": {"AcquireLease", "Lease"}, "keepaliveLease": {"KeepaliveLease"}, "releaseLease": {"ReleaseLease"},
	"listLeases":      {"ListLeasesPage", "ListLeases"},
	"watchEvents":     {"Events", "Watch"},
	"listLockDenials": {"ListLockDenialsPage", "ListLockDenials"}, "transferLock": {"TransferLock"}, "offerHandover": {"OfferHandover"},
	"listHandovers": {"ListHandoversPage", "ListHandovers"}, "acceptHandover": {"AcceptHandover"}, "declineHandover": {"DeclineHandover"},
	"withdrawHandover":     {"WithdrawHandover"},
	"adminListLockDenials": {"AdminListLockDenialsPage", "AdminListLockDenials"},
	"adminListHandovers":   {"AdminListHandoversPage", "AdminListHandovers"}, "cancelHandover": {"CancelHandover"},
	"listReservations": {"ListReservationsPage", "ListReservations"}, "createReservation": {"CreateReservation", "PlanCreateReservation"},
	"deleteReservation": {"DeleteReservation"},
}

// TestCoversEveryOperation: every operation of the document has a client
// method, and the table names no operation the document lacks.
func TestCoversEveryOperation(t *testing.T) {
	doc, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	ct := reflect.TypeFor[*client.Client]()
	inDoc := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			inDoc[op.OperationID] = true
			methods, ok := operationMethods[op.OperationID]
			if !ok {
				t.Errorf("%s %s (%s) has no client method: add one and list it in operationMethods", method, path, op.OperationID)
			}
			for _, m := range methods {
				if _, ok := ct.MethodByName(m); !ok {
					t.Errorf("%s: client.Client has no method %s", op.OperationID, m)
				}
			}
		}
	}
	var stale []string
	for id := range operationMethods {
		if !inDoc[id] {
			stale = append(stale, id)
		}
	}
	sort.Strings(stale)
	for _, id := range stale {
		t.Errorf("operationMethods lists %s, which the document does not have", id)
	}
}
