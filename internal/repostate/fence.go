package repostate

import (
	"context"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// The guarding keys of the fenced writes (docs/leases.md): the lease key a
// writer holds, in its tenant, to make the write with its fencing token.
//
//   - branch updates and commits of branch B of repository R:
//     "repositories/R/branches/B";
//   - tag creation and deletion in repository R: "repositories/R/tags".

// BranchGuard is the guarding key of the writes of a branch.
func BranchGuard(repo, branch string) string { return "repositories/" + repo + "/branches/" + branch }

// TagsGuard is the guarding key of the tag writes of a repository.
func TagsGuard(repo string) string { return "repositories/" + repo + "/tags" }

// fence is the Fence of a write with token (0: none) on guard.
func (s *Service) fence(tenantID, guard string, token int64) (kv.Fence, error) {
	if token < 0 {
		return kv.Fence{}, repolock.Errorf(repolock.EInvalid, "fencing token must be positive")
	}
	if token == 0 {
		return kv.Fence{}, nil
	}
	if _, ok := s.store.(kv.Fenced); !ok {
		return kv.Fence{}, repolock.Errorf(repolock.EInvalid, "this store does not enforce fencing tokens")
	}
	return kv.Fence{Tenant: tenantID, Guard: guard, Token: token}, nil
}

// setIfFenced is setIf guarded by f (unguarded when f is zero), with the
// same read-back of an ambiguous failure: bytes unique to the writer that
// landed were admitted by the fence.
func (s *Service) setIfFenced(ctx context.Context, f kv.Fence, pk, key, value []byte, pred kv.Predicate) (kv.Predicate, error) {
	if f.IsZero() {
		return s.setIf(ctx, pk, key, value, pred)
	}
	return s.setIfWith(ctx, func() (kv.Predicate, error) {
		return s.store.(kv.Fenced).SetIfFenced(ctx, pk, key, value, pred, f)
	}, pk, key, value, pred)
}

// deleteIfFenced is deleteIf guarded by f (unguarded when f is zero).
func (s *Service) deleteIfFenced(ctx context.Context, f kv.Fence, pk, key []byte, pred kv.Predicate) error {
	if f.IsZero() {
		return s.deleteIf(ctx, pk, key, pred)
	}
	return s.deleteIfWith(ctx, func() error { return s.store.(kv.Fenced).DeleteIfFenced(ctx, pk, key, pred, f) }, pk, key, pred)
}
