package repostate

import (
	"context"
	"errors"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// CreateTag tags an existing commit. An existing tag of that name is
// EAlreadyExists; tags never move.
func (s *Service) CreateTag(ctx context.Context, tenantID, repo, name, commitID string) (_ Tag, err error) {
	return s.CreateTagFenced(ctx, tenantID, repo, name, commitID, 0)
}

// CreateTagFenced is CreateTag guarded by a lease's fencing token (0:
// unguarded) on TagsGuard(repo).
func (s *Service) CreateTagFenced(ctx context.Context, tenantID, repo, name, commitID string, fencingToken int64) (_ Tag, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.CreateTag")
	if err := ValidateTagName(name); err != nil {
		return Tag{}, err
	}
	if err := ValidateCommitID(commitID); err != nil {
		return Tag{}, err
	}
	f, err := s.fence(tenantID, TagsGuard(repo), fencingToken)
	if err != nil {
		return Tag{}, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Tag{}, err
	}
	if _, err := s.getCommit(ctx, in, commitID); err != nil {
		return Tag{}, err
	}
	t := Tag{Name: name, CommitID: commitID}
	if _, err := s.setIfFenced(ctx, f, in.pk, tagKey(name), encode(t), nil); err != nil {
		if errors.Is(err, kv.ErrPredicateFailed) {
			return Tag{}, repolock.Errorf(repolock.EAlreadyExists, "tag %q already exists in repository %q", name, repo)
		}
		return Tag{}, decidingErr(err)
	}
	if err := s.verifyLive(ctx, in, func(ctx context.Context) error { return s.store.Delete(ctx, in.pk, tagKey(name)) }); err != nil {
		return Tag{}, err
	}
	return t, nil
}

func tagNotFound(repo, name string) error {
	return repolock.Errorf(repolock.ENotFound, "tag %q not found in repository %q", clip(name), repo)
}

// GetTag returns a tag.
func (s *Service) GetTag(ctx context.Context, tenantID, repo, name string) (_ Tag, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.GetTag")
	if err := ValidateTagName(name); err != nil {
		return Tag{}, err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return Tag{}, err
	}
	b, _, err := s.store.Get(ctx, in.pk, tagKey(name))
	if errors.Is(err, kv.ErrNotFound) {
		return Tag{}, tagNotFound(repo, name)
	}
	if err != nil {
		return Tag{}, storeErr(err)
	}
	var t Tag
	return t, decode(b, &t, "tag")
}

// ListTags returns up to limit tags with names after afterName, in byte
// order of their names, and whether there are more.
func (s *Service) ListTags(ctx context.Context, tenantID, repo, afterName string, limit int) (_ []Tag, _ bool, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.ListTags")
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return nil, false, err
	}
	return scanPrefix(ctx, s.store, in.pk, tagPrefix, afterName, limit, "tag", func(t Tag) Tag { return t })
}

// DeleteTag deletes a tag; a missing tag is ENotFound.
func (s *Service) DeleteTag(ctx context.Context, tenantID, repo, name string) (err error) {
	return s.DeleteTagFenced(ctx, tenantID, repo, name, 0)
}

// DeleteTagFenced is DeleteTag guarded by a lease's fencing token (0:
// unguarded) on TagsGuard(repo).
func (s *Service) DeleteTagFenced(ctx context.Context, tenantID, repo, name string, fencingToken int64) (err error) {
	defer repolock.WrapOp(&err, "repostate.Service.DeleteTag")
	if err := ValidateTagName(name); err != nil {
		return err
	}
	f, err := s.fence(tenantID, TagsGuard(repo), fencingToken)
	if err != nil {
		return err
	}
	in, err := s.resolve(ctx, tenantID, repo)
	if err != nil {
		return err
	}
	_, pred, err := s.store.Get(ctx, in.pk, tagKey(name))
	if errors.Is(err, kv.ErrNotFound) {
		return tagNotFound(repo, name)
	}
	if err != nil {
		return storeErr(err)
	}
	if err := s.deleteIfFenced(ctx, f, in.pk, tagKey(name), pred); err != nil {
		if errors.Is(err, kv.ErrPredicateFailed) {
			return tagNotFound(repo, name) // deleted (and perhaps recreated) concurrently
		}
		return decidingErr(err)
	}
	return nil
}
