package repostate

import (
	"bytes"
	"context"
	"errors"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/repostate/kv"
)

func branchNotFound(in instance, name string) error {
	return repolock.Errorf(repolock.ENotFound, "branch %q not found in repository %q", clip(name), in.repo.Name)
}

func (s *Service) getBranch(ctx context.Context, in instance, name string) (Branch, kv.Predicate, error) {
	b, pred, err := s.store.Get(ctx, in.pk, branchKey(name))
	if errors.Is(err, kv.ErrNotFound) {
		return Branch{}, nil, branchNotFound(in, name)
	}
	if err != nil {
		return Branch{}, nil, storeErr(err)
	}
	var br Branch
	if err := decode(b, &br, "branch"); err != nil {
		return Branch{}, nil, err
	}
	return br, pred, nil
}

// resolveRef returns the commit a source names: a branch of that name if
// there is one, else a commit with that id.
func (s *Service) resolveRef(ctx context.Context, in instance, source string) (string, error) {
	if source == "" {
		return "", repolock.Errorf(repolock.EInvalid, "source is required: a branch name or a commit id")
	}
	if ValidateBranchName(source) == nil {
		b, _, err := s.getBranch(ctx, in, source)
		if err == nil {
			return b.CommitID, nil
		}
		if !repolock.IsCode(err, repolock.ENotFound) {
			return "", err
		}
	}
	if ValidateCommitID(source) == nil {
		if _, err := s.getCommit(ctx, in, source); err == nil {
			return source, nil
		} else if !repolock.IsCode(err, repolock.ENotFound) {
			return "", err
		}
	}
	return "", repolock.Errorf(repolock.ENotFound, "no branch or commit %q in repository %q", clip(source), in.repo.Name)
}

// CreateBranch creates a branch at the commit source names (a branch or a
// commit id). An existing branch of that name is EAlreadyExists.
func (s *Service) CreateBranch(ctx context.Context, tenantID, repo, name, source string) (_ Branch, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.CreateBranch")
	if err := ValidateBranchName(name); err != nil {
		return Branch{}, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Branch{}, err
	}
	commitID, err := s.resolveRef(ctx, in, source)
	if err != nil {
		return Branch{}, err
	}
	b := Branch{Name: name, CommitID: commitID, StagingToken: in.stagingToken(name), SealedTokens: []string{}}
	if _, err := s.setIf(ctx, in.pk, branchKey(name), encode(b), nil); err != nil {
		if errors.Is(err, kv.ErrPredicateFailed) {
			return Branch{}, repolock.Errorf(repolock.EAlreadyExists, "branch %q already exists in repository %q", name, repo)
		}
		return Branch{}, decidingErr(err)
	}
	if err := s.verifyLive(ctx, in, func(ctx context.Context) error { return s.store.Delete(ctx, in.pk, branchKey(name)) }); err != nil {
		return Branch{}, err
	}
	return b, nil
}

// GetBranch returns a branch.
func (s *Service) GetBranch(ctx context.Context, tenantID, repo, name string) (_ Branch, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.GetBranch")
	if err := ValidateBranchName(name); err != nil {
		return Branch{}, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Branch{}, err
	}
	b, _, err := s.getBranch(ctx, in, name)
	return b, err
}

// ListBranches returns up to limit branches with names after afterName, in
// byte order of their names, and whether there are more.
func (s *Service) ListBranches(ctx context.Context, tenantID, repo, afterName string, limit int) (_ []Branch, _ bool, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.ListBranches")
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return nil, false, err
	}
	return scanPrefix(ctx, s.store, in.pk, branchPrefix, afterName, limit, "branch", func(b Branch) Branch { return b })
}

// UpdateBranch points a branch at commitID. With expectedCommitID set, the
// branch must be at that commit (else EPrecondition); the write is a SetIf
// on the predicate read in any case, so a concurrent move is never lost.
func (s *Service) UpdateBranch(ctx context.Context, tenantID, repo, name, commitID, expectedCommitID string) (_ Branch, err error) {
	return s.UpdateBranchFenced(ctx, tenantID, repo, name, commitID, expectedCommitID, 0)
}

// UpdateBranchFenced is UpdateBranch guarded by a lease's fencing token
// (0: unguarded) on BranchGuard(repo, name): refused with fenced once a
// newer token was issued for it, in the statement of the write.
func (s *Service) UpdateBranchFenced(ctx context.Context, tenantID, repo, name, commitID, expectedCommitID string, fencingToken int64) (_ Branch, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.UpdateBranch")
	if err := ValidateBranchName(name); err != nil {
		return Branch{}, err
	}
	if err := ValidateCommitID(commitID); err != nil {
		return Branch{}, err
	}
	if expectedCommitID != "" {
		if err := ValidateCommitID(expectedCommitID); err != nil {
			return Branch{}, repolock.Errorf(repolock.EInvalid, "expected_commit_id %q is not valid: 64 lowercase hex digits", clip(expectedCommitID))
		}
	}
	f, err := s.fence(tenantID, BranchGuard(repo, name), fencingToken)
	if err != nil {
		return Branch{}, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Branch{}, err
	}
	if _, err := s.getCommit(ctx, in, commitID); err != nil {
		return Branch{}, err
	}
	policy := s.cfg.CommitRetry
	for attempt := 1; ; attempt++ {
		b, pred, err := s.getBranch(ctx, in, name)
		if err != nil {
			return Branch{}, err
		}
		if expectedCommitID != "" && b.CommitID != expectedCommitID {
			e := repolock.Errorf(repolock.EPrecondition, "branch %q is at commit %s, not the expected %s", name, b.CommitID, expectedCommitID)
			e.Details = map[string]any{"commit_id": b.CommitID}
			return Branch{}, e
		}
		b.CommitID = commitID
		if _, err := s.setIfFenced(ctx, f, in.pk, branchKey(name), encode(b), pred); err != nil {
			if !errors.Is(err, kv.ErrPredicateFailed) {
				return Branch{}, decidingErr(err)
			}
			if attempt >= policy.MaxAttempts {
				return Branch{}, repolock.Errorf(repolock.EConflict, "branch %q kept moving; gave up after %d attempts, try again", name, attempt)
			}
			if err := database.SleepContext(ctx, policy.Delay(attempt)); err != nil {
				return Branch{}, err
			}
			continue
		}
		if err := s.verifyLive(ctx, in, func(ctx context.Context) error { return s.store.Delete(ctx, in.pk, branchKey(name)) }); err != nil {
			return Branch{}, err
		}
		return b, nil
	}
}

// DeleteBranch deletes a branch (not the default one) and its staging
// partitions. If those cannot be deleted, they are listed for the Cleaner.
func (s *Service) DeleteBranch(ctx context.Context, tenantID, repo, name string) (err error) {
	defer repolock.WrapOp(&err, "repostate.Service.DeleteBranch")
	if err := ValidateBranchName(name); err != nil {
		return err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return err
	}
	if name == in.repo.DefaultBranch {
		return repolock.Errorf(repolock.EInvalid, "branch %q is the default branch of repository %q and cannot be deleted", name, repo)
	}
	var b Branch
	for attempt := 0; ; attempt++ {
		var pred kv.Predicate
		b, pred, err = s.getBranch(ctx, in, name)
		if err != nil {
			return err
		}
		err = s.deleteIf(ctx, in.pk, branchKey(name), pred)
		if err == nil {
			break
		}
		if !errors.Is(err, kv.ErrPredicateFailed) || attempt >= 10 {
			return decidingErr(err)
		}
	}
	tokens := append([]string{b.StagingToken}, b.SealedTokens...)
	var failed []string
	for _, t := range tokens {
		if _, err := s.store.DeletePartition(ctx, []byte(t), s.cfg.DeleteBatch); err != nil {
			failed = append(failed, t)
		}
	}
	if len(failed) > 0 {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		entry := deletedEntry{Kind: kindStaging, TenantID: in.tenantID, Name: in.repo.Name, InstanceUID: in.repo.InstanceUID,
			Reason: "branch " + name + " deleted", DeletedAt: s.now(), Partitions: failed}
		if err := s.set(cctx, []byte(deletedPartition), leftoverKey(in.tenantID, in.repo.Name, in.repo.InstanceUID, name, b.StagingToken), encode(entry)); err != nil {
			s.log.WarnContext(ctx, "repostate: staging partitions of a deleted branch are left behind",
				"tenant_id", in.tenantID, "repository", in.repo.Name, "branch", name, "partitions", failed, "error", err.Error())
		}
	}
	return nil
}

// scanPrefix lists the entries of pk whose keys start with prefix, after
// prefix+afterName, decoding each as T and mapping it to R.
func scanPrefix[T, R any](ctx context.Context, store kv.Store, pk []byte, prefix, afterName string, limit int, what string, mapFn func(T) R) ([]R, bool, error) {
	out := []R{}
	for e, err := range store.Scan(ctx, pk, after(prefix, afterName), limit+1) {
		if err != nil {
			return nil, false, storeErr(err)
		}
		if !bytes.HasPrefix(e.Key, []byte(prefix)) {
			break
		}
		if len(out) == limit {
			return out, true, nil
		}
		var v T
		if err := decode(e.Value, &v, what); err != nil {
			return nil, false, err
		}
		out = append(out, mapFn(v))
	}
	return out, false, nil
}
