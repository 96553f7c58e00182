package repostate

import (
	"context"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/pagetoken"
)

// The pages of the HTTP lists. Each takes the list's opaque page token
// ("" for the first page) and returns the token of the next page ("" after
// the last): the tokens are decoded and encoded here, in the one
// internal/pagetoken format, bound to the tenant and the repository (and
// branch). List, ListBranches, ListTags and Log are the same lists by name.

// ListPage is a page of List.
func (s *Service) ListPage(ctx context.Context, tenantID string, pageSize int, pageToken string) (_ []Repository, _ string, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.ListPage")
	return namePage(pagetoken.KindRepositories, tenantID, pageToken, func(after string) ([]Repository, bool, error) {
		return s.List(ctx, tenantID, after, pageSize)
	}, func(r Repository) string { return r.Name })
}

// ListBranchesPage is a page of ListBranches.
func (s *Service) ListBranchesPage(ctx context.Context, tenantID, repo string, pageSize int, pageToken string) (_ []Branch, _ string, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.ListBranchesPage")
	return namePage(pagetoken.KindBranches, pagetoken.Scope(tenantID, repo), pageToken, func(after string) ([]Branch, bool, error) {
		return s.ListBranches(ctx, tenantID, repo, after, pageSize)
	}, func(b Branch) string { return b.Name })
}

// ListTagsPage is a page of ListTags.
func (s *Service) ListTagsPage(ctx context.Context, tenantID, repo string, pageSize int, pageToken string) (_ []Tag, _ string, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.ListTagsPage")
	return namePage(pagetoken.KindTags, pagetoken.Scope(tenantID, repo), pageToken, func(after string) ([]Tag, bool, error) {
		return s.ListTags(ctx, tenantID, repo, after, pageSize)
	}, func(t Tag) string { return t.Name })
}

// LogPage is a page of Log; its token carries the commit to continue from.
func (s *Service) LogPage(ctx context.Context, tenantID, repo, branch string, pageSize int, pageToken string) (_ []Commit, _ string, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.LogPage")
	kind, scope := pagetoken.KindCommits, pagetoken.Scope(tenantID, repo, branch)
	from, _, err := pagetoken.Decode[pagetoken.Name](kind, scope, pageToken)
	if err != nil {
		return nil, "", err
	}
	items, next, err := s.Log(ctx, tenantID, repo, branch, from.Name, pageSize)
	if err != nil || next == "" {
		return items, "", err
	}
	return items, pagetoken.Encode(kind, scope, pagetoken.Name{Name: next}), nil
}

// namePage is a page of a list by name (list returns up to the page size
// items after the given name, and whether more follow): it decodes token
// in the list kind/scope and encodes the next token after the page's last
// name.
func namePage[T any](kind, scope, token string, list func(after string) ([]T, bool, error), name func(T) string) ([]T, string, error) {
	cur, _, err := pagetoken.Decode[pagetoken.Name](kind, scope, token)
	if err != nil {
		return nil, "", err
	}
	items, more, err := list(cur.Name)
	if err != nil || !more || len(items) == 0 {
		return items, "", err
	}
	return items, pagetoken.Encode(kind, scope, pagetoken.Name{Name: name(items[len(items)-1])}), nil
}
