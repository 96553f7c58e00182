package repostate

// The partition and key schema. Partition keys are matched for equality, so
// one partition never sees another's keys even when one name is a prefix of
// the other.
//
//	partition graveler_tenants                    key <tenant_id>            every tenant that ever had a repository
//	partition graveler/<tenant_id>                key repos/<name>           repository records of one tenant
//	partition <tenant_id>/<name>-<instance_uid>   key branches/<branch>      one repository instance
//	                                              key commits/<commit_id>
//	                                              key tags/<tag>
//	partition <staging token>                     key key/<path>             one staging area
//	partition graveler_deleted                    key <tenant_id>/<name>/<instance_uid>
//	                                                                         deleted or failed instances, for the Cleaner
//
// A staging token is staging/<tenant_id>/<name>-<instance_uid>/<branch>/<random>,
// so it names the repository instance and branch it belongs to.

const (
	tenantsPartition = "graveler_tenants"
	deletedPartition = "graveler_deleted"

	repoPrefix   = "repos/"
	branchPrefix = "branches/"
	commitPrefix = "commits/"
	tagPrefix    = "tags/"
	stagedPrefix = "key/"
)

func reposPartition(tenantID string) []byte { return []byte("graveler/" + tenantID) }

func repoKey(name string) []byte { return []byte(repoPrefix + name) }

func instancePartition(tenantID, name, uid string) []byte {
	return []byte(tenantID + "/" + name + "-" + uid)
}

func branchKey(name string) []byte { return []byte(branchPrefix + name) }

func commitKey(id string) []byte { return []byte(commitPrefix + id) }

func tagKey(name string) []byte { return []byte(tagPrefix + name) }

func stagedKey(path string) []byte { return []byte(stagedPrefix + path) }

func newStagingToken(tenantID, name, uid, branch string) string {
	return "staging/" + tenantID + "/" + name + "-" + uid + "/" + branch + "/" + newUID()
}

func deletedKey(tenantID, name, uid string) []byte {
	return []byte(tenantID + "/" + name + "/" + uid)
}

// leftoverKey names a deleted-list entry for staging partitions that a
// branch delete could not remove itself.
func leftoverKey(tenantID, name, uid, branch, token string) []byte {
	return []byte(tenantID + "/" + name + "/" + uid + "/staging/" + branch + "/" + token)
}

// after returns the smallest key greater than prefix+name: where a listing
// resumes after name.
func after(prefix, name string) []byte {
	if name == "" {
		return []byte(prefix)
	}
	return []byte(prefix + name + "\x00")
}
