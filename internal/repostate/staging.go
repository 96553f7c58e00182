package repostate

import (
	"context"
	"slices"

	"github.com/repolock/repolock"
)

// StageObject writes an object into the branch's current staging partition
// (the partition named by its staging token). There is no HTTP route for it
// yet; it exists so staging partitions are real, and the Cleaner's deletion
// of them is tested against real data.
func (s *Service) StageObject(ctx context.Context, tenantID, repo, branch, path string, data []byte) (err error) {
	defer repolock.WrapOp(&err, "repostate.Service.StageObject")
	if err := ValidateBranchName(branch); err != nil {
		return err
	}
	if err := validateText("path", path, maxStagedPath, true, false); err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	if len(data) > maxStagedData {
		return repolock.Errorf(repolock.EInvalid, "staged data must be at most %d bytes", maxStagedData)
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return err
	}
	b, _, err := s.getBranch(ctx, in, branch)
	if err != nil {
		return err
	}
	pk := []byte(b.StagingToken)
	if err := s.set(ctx, pk, stagedKey(path), encode(StagedObject{Path: path, Data: data})); err != nil {
		return decidingErr(err)
	}
	undo := func(ctx context.Context) error { return s.store.Delete(ctx, pk, stagedKey(path)) }
	if err := s.verifyLive(ctx, in, undo); err != nil {
		return err
	}
	// The branch (or its staging partition) may have been deleted while
	// the write was in flight.
	now, _, err := s.getBranch(ctx, in, branch)
	if err == nil && (now.StagingToken == b.StagingToken || slices.Contains(now.SealedTokens, b.StagingToken)) {
		return nil
	}
	if err != nil && !repolock.IsCode(err, repolock.ENotFound) {
		return unknownOutcome(err) // the write landed; whether it counts could not be read
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if uerr := undo(cctx); uerr != nil {
		s.log.WarnContext(ctx, "repostate: could not undo a staged write into a deleted branch", "branch", branch, "error", uerr.Error())
	}
	return branchNotFound(in, branch)
}

// ListStaged returns up to limit objects of the branch's current staging
// partition with paths after afterPath, and whether there are more.
func (s *Service) ListStaged(ctx context.Context, tenantID, repo, branch, afterPath string, limit int) (_ []StagedObject, _ bool, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.ListStaged")
	if err := ValidateBranchName(branch); err != nil {
		return nil, false, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return nil, false, err
	}
	b, _, err := s.getBranch(ctx, in, branch)
	if err != nil {
		return nil, false, err
	}
	return scanPrefix(ctx, s.store, []byte(b.StagingToken), stagedPrefix, afterPath, limit, "staged object", func(o StagedObject) StagedObject { return o })
}
