package repostate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/pagetoken"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// canonicalCommit is what a commit id hashes: every field but the id, in a
// fixed order, with the time in UTC RFC 3339 with nanoseconds and no nil
// slices or maps (encoding/json sorts map keys).
type canonicalCommit struct {
	Version      int               `json:"version"`
	Committer    string            `json:"committer"`
	Message      string            `json:"message"`
	MetaRangeID  string            `json:"meta_range_id"`
	CreationDate string            `json:"creation_date"`
	Parents      []string          `json:"parents"`
	Metadata     map[string]string `json:"metadata"`
	Generation   int               `json:"generation"`
}

// CommitID returns the content address of c: the hex SHA-256 of its
// canonical encoding. c.ID is ignored.
func CommitID(c Commit) string {
	cc := canonicalCommit{
		Version:      c.Version,
		Committer:    c.Committer,
		Message:      c.Message,
		MetaRangeID:  c.MetaRangeID,
		CreationDate: c.CreationDate.UTC().Format(time.RFC3339Nano),
		Parents:      c.Parents,
		Metadata:     c.Metadata,
		Generation:   c.Generation,
	}
	if cc.Parents == nil {
		cc.Parents = []string{}
	}
	if cc.Metadata == nil {
		cc.Metadata = map[string]string{}
	}
	sum := sha256.Sum256(encode(cc))
	return hex.EncodeToString(sum[:])
}

// CommitParams are the caller's fields of a new commit.
type CommitParams struct {
	Committer   string
	Message     string
	MetaRangeID string // default: the parent's
	Metadata    map[string]string
	// FencingToken guards the branch move with a lease's token on
	// BranchGuard(repo, branch); 0: unguarded.
	FencingToken int64
}

func (p CommitParams) validate() error {
	if err := validateText("message", p.Message, maxMessage, true, true); err != nil {
		return err
	}
	if err := validateText("committer", p.Committer, maxCommitter, false, false); err != nil {
		return err
	}
	if err := validateText("meta_range_id", p.MetaRangeID, maxMetaRangeID, false, false); err != nil {
		return err
	}
	if len(p.Metadata) > maxMetadataEntries {
		return repolock.Errorf(repolock.EInvalid, "metadata may hold at most %d entries", maxMetadataEntries)
	}
	for k, v := range p.Metadata {
		if err := validateText("metadata key", k, maxMetadataKey, true, false); err != nil {
			return err
		}
		if err := validateText("metadata value", v, maxMetadataValue, false, true); err != nil {
			return err
		}
	}
	return nil
}

// ConflictError details: the attempts a commit made before giving up.
const detailAttempts = "attempts"

// Commit writes a commit whose parent is the branch's head and moves the
// branch to it with SetIf on the branch's predicate. When another writer
// moved the branch first, it retries on the new head with capped, jittered
// exponential backoff, up to Config.CommitRetry.MaxAttempts attempts in
// all, and then fails with EConflict. A commit that lost a race stays in
// the instance partition, unreachable from any branch, until the
// repository is deleted.
func (s *Service) Commit(ctx context.Context, tenantID, repo, branch string, p CommitParams) (_ Commit, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.Commit")
	if err := ValidateBranchName(branch); err != nil {
		return Commit{}, err
	}
	if err := p.validate(); err != nil {
		return Commit{}, err
	}
	f, err := s.fence(tenantID, BranchGuard(repo, branch), p.FencingToken)
	if err != nil {
		return Commit{}, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Commit{}, err
	}
	policy := s.cfg.CommitRetry
	// Commits this call wrote. If the repository is deleted while the
	// commit is in flight, they are removed again (see verifyLive).
	var written []string
	undo := func(ctx context.Context) error {
		var errs []error
		for _, id := range written {
			errs = append(errs, s.store.Delete(ctx, in.pk, commitKey(id)))
		}
		return errors.Join(errs...)
	}
	// fail returns err, unless the repository is gone by now: then that.
	fail := func(err error) (Commit, error) {
		if len(written) > 0 {
			if verr := s.verifyLive(ctx, in, undo); repolock.IsCode(verr, repolock.ENotFound) || repolock.IsCode(verr, repolock.EGone) {
				return Commit{}, verr
			}
		}
		return Commit{}, err
	}
	for attempt := 1; ; attempt++ {
		c, wrote, done, err := s.tryCommit(ctx, in, branch, p, f)
		if wrote {
			written = append(written, c.ID)
		}
		if err != nil {
			return fail(err)
		}
		if done {
			if err := s.verifyLive(ctx, in, func(ctx context.Context) error {
				return errors.Join(s.store.Delete(ctx, in.pk, branchKey(branch)), undo(ctx))
			}); err != nil {
				return Commit{}, err
			}
			return c, nil
		}
		if attempt >= policy.MaxAttempts {
			e := repolock.Errorf(repolock.EConflict,
				"branch %q kept moving under concurrent commits; gave up after %d attempts, try again", branch, attempt)
			e.Details = map[string]any{detailAttempts: attempt}
			return fail(e)
		}
		if err := database.SleepContext(ctx, policy.Delay(attempt)); err != nil {
			return fail(err)
		}
	}
}

// tryCommit is one attempt. wrote says the commit was written (c holds it);
// done is false when the branch moved under the attempt.
func (s *Service) tryCommit(ctx context.Context, in instance, branch string, p CommitParams, f kv.Fence) (c Commit, wrote, done bool, err error) {
	b, pred, err := s.getBranch(ctx, in, branch)
	if err != nil {
		return Commit{}, false, false, err
	}
	parent, err := s.getCommit(ctx, in, b.CommitID)
	if err != nil {
		return Commit{}, false, false, err
	}
	c = Commit{
		Version:      1,
		Committer:    p.Committer,
		Message:      p.Message,
		MetaRangeID:  p.MetaRangeID,
		CreationDate: s.now(),
		Parents:      []string{parent.ID},
		Metadata:     p.Metadata,
		Generation:   parent.Generation + 1,
	}
	if c.MetaRangeID == "" {
		c.MetaRangeID = parent.MetaRangeID
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	c.ID = CommitID(c)
	// Content-addressed: if the key exists it holds this very commit.
	if _, err := s.setIf(ctx, in.pk, commitKey(c.ID), encode(c), nil); err != nil && !errors.Is(err, kv.ErrPredicateFailed) {
		return Commit{}, false, false, storeErr(err)
	}
	b.CommitID = c.ID
	if _, err := s.setIfFenced(ctx, f, in.pk, branchKey(branch), encode(b), pred); err != nil {
		if errors.Is(err, kv.ErrPredicateFailed) {
			return c, true, false, nil
		}
		return c, true, false, decidingErr(err)
	}
	return c, true, true, nil
}

func (s *Service) getCommit(ctx context.Context, in instance, id string) (Commit, error) {
	b, _, err := s.store.Get(ctx, in.pk, commitKey(id))
	if errors.Is(err, kv.ErrNotFound) {
		return Commit{}, repolock.Errorf(repolock.ENotFound, "commit %q not found in repository %q", clip(id), in.repo.Name)
	}
	if err != nil {
		return Commit{}, storeErr(err)
	}
	var c Commit
	if err := decode(b, &c, "commit"); err != nil {
		return Commit{}, err
	}
	return c, nil
}

// GetCommit returns a commit of the repository.
func (s *Service) GetCommit(ctx context.Context, tenantID, repo, id string) (_ Commit, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.GetCommit")
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Commit{}, err
	}
	if err := ValidateCommitID(id); err != nil {
		return Commit{}, repolock.Errorf(repolock.ENotFound, "commit %q not found in repository %q", clip(id), repo)
	}
	return s.getCommit(ctx, in, id)
}

// Log walks first parents from the branch's head (or from the commit
// fromID, to continue a previous page) and returns up to limit commits and
// the id to continue from ("" at the first commit).
func (s *Service) Log(ctx context.Context, tenantID, repo, branch, fromID string, limit int) (_ []Commit, _ string, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.Log")
	if err := ValidateBranchName(branch); err != nil {
		return nil, "", err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return nil, "", err
	}
	next := fromID
	if next == "" {
		b, _, err := s.getBranch(ctx, in, branch)
		if err != nil {
			return nil, "", err
		}
		next = b.CommitID
	} else if err := ValidateCommitID(next); err != nil {
		return nil, "", pagetoken.Invalid()
	}
	out := []Commit{}
	for next != "" && len(out) < limit {
		c, err := s.getCommit(ctx, in, next)
		if err != nil {
			return nil, "", err
		}
		out = append(out, c)
		next = ""
		if len(c.Parents) > 0 {
			next = c.Parents[0]
		}
	}
	return out, next, nil
}
