package repostate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// CreateParams are the fields of a new repository.
type CreateParams struct {
	Name             string
	StorageNamespace string
	// DefaultBranch defaults to "main".
	DefaultBranch string
	// Bare creates the record straight in the active state, without an
	// initial commit or default branch (for restoring refs into it).
	Bare bool
}

// DefaultBranchName is the default branch of a repository created without
// one.
const DefaultBranchName = "main"

// InitialCommitMessage is the message of every repository's first commit.
const InitialCommitMessage = "Repository created"

// Reasons recorded in deleted-list entries.
const (
	reasonDeleted = "deleted"
	reasonFailed  = "failed"
	kindInstance  = "instance"
	kindStaging   = "staging"
)

// deletedEntry is a value of the deleted-repositories partition. An
// instance entry makes the Cleaner delete the instance partition and every
// staging partition its branches name; a staging entry lists staging
// partitions a branch delete could not remove itself.
type deletedEntry struct {
	Kind        string    `json:"kind"`
	TenantID    string    `json:"tenant_id"`
	Name        string    `json:"name"`
	InstanceUID string    `json:"instance_uid"`
	Reason      string    `json:"reason"`
	DeletedAt   time.Time `json:"deleted_at"`
	Partitions  []string  `json:"partitions,omitempty"`
}

// instance is a resolved, active repository instance.
type instance struct {
	tenantID string
	repo     Repository
	pk       []byte
}

func (in instance) stagingToken(branch string) string {
	return newStagingToken(in.tenantID, in.repo.Name, in.repo.InstanceUID, branch)
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("repostate: encode: " + err.Error())
	}
	return b
}

func decode(b []byte, v any, what string) error {
	if err := json.Unmarshal(b, v); err != nil {
		return repolock.Wrap(repolock.EInternal, err, "stored %s is corrupt", what)
	}
	return nil
}

// setIf is SetIf that resolves ambiguous failures: when the store reports
// an error other than a failed predicate (a lost reply, a dropped
// connection), it reads the key back and treats the write as done if the
// key holds exactly the bytes written. Every value written through it is
// unique to its writer (records carry a fresh instance uid, commits are
// content-addressed, branches carry a fresh staging token or commit id), so
// equal bytes mean the write landed. The key still absent (an insert) or
// still at the version the write was conditioned on means it did not; any
// other read (none, a newer version) returns the error as an
// *ambiguousError, which a flow's deciding write answers as outcome
// unknown (decidingErr).
func (s *Service) setIf(ctx context.Context, pk, key, value []byte, pred kv.Predicate) (kv.Predicate, error) {
	return s.setIfWith(ctx, func() (kv.Predicate, error) { return s.store.SetIf(ctx, pk, key, value, pred) }, pk, key, value, pred)
}

// setIfWith is setIf of the write write (a plain or a fenced SetIf). A
// refusal (a failed predicate, a stale fencing token, a domain error) is
// an answer, not an ambiguity.
func (s *Service) setIfWith(ctx context.Context, write func() (kv.Predicate, error), pk, key, value []byte, pred kv.Predicate) (kv.Predicate, error) {
	p, err := write()
	if err == nil || errors.Is(err, kv.ErrPredicateFailed) || kv.IsFenced(err) || isDomainError(err) {
		return p, err
	}
	if ctx.Err() != nil {
		return nil, &ambiguousError{err}
	}
	got, gp, gerr := s.store.Get(ctx, pk, key)
	switch {
	case gerr == nil && bytes.Equal(got, value):
		s.log.WarnContext(ctx, "repostate: write reported failure but landed", "partition", string(pk), "key", string(key), "error", err.Error())
		return gp, nil
	case pred == nil && errors.Is(gerr, kv.ErrNotFound), pred != nil && gerr == nil && reflect.DeepEqual(gp, pred):
		// Still absent, or still at the version the write was
		// conditioned on: it did not land.
		return nil, err
	}
	// Unreadable, or changed since (by this write, then another one, or
	// by another one alone): it may have landed.
	return nil, &ambiguousError{err}
}

// set is Set with the same read-back on failure.
func (s *Service) set(ctx context.Context, pk, key, value []byte) error {
	err := s.store.Set(ctx, pk, key, value)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return &ambiguousError{err}
	}
	if got, _, gerr := s.store.Get(ctx, pk, key); gerr == nil && bytes.Equal(got, value) {
		return nil
	}
	// Unreadable, absent or another value: it may have landed and been
	// overwritten or deleted since.
	return &ambiguousError{err}
}

// deleteIf is DeleteIf with a read-back on an ambiguous failure: the key
// gone means the delete landed; the key at the same version means it did
// not; anything else stays ambiguous.
func (s *Service) deleteIf(ctx context.Context, pk, key []byte, pred kv.Predicate) error {
	return s.deleteIfWith(ctx, func() error { return s.store.DeleteIf(ctx, pk, key, pred) }, pk, key, pred)
}

// deleteIfWith is deleteIf of the delete del (a plain or a fenced DeleteIf).
func (s *Service) deleteIfWith(ctx context.Context, del func() error, pk, key []byte, pred kv.Predicate) error {
	err := del()
	if err == nil || errors.Is(err, kv.ErrPredicateFailed) || kv.IsFenced(err) || isDomainError(err) {
		return err
	}
	if ctx.Err() != nil {
		return &ambiguousError{err}
	}
	_, gp, gerr := s.store.Get(ctx, pk, key)
	switch {
	case errors.Is(gerr, kv.ErrNotFound):
		return nil
	case gerr == nil && reflect.DeepEqual(gp, pred):
		return err
	}
	return &ambiguousError{err}
}

func (s *Service) getRecord(ctx context.Context, tenantID, name string) (Repository, kv.Predicate, error) {
	b, pred, err := s.store.Get(ctx, reposPartition(tenantID), repoKey(name))
	if err != nil {
		return Repository{}, nil, err
	}
	var rec Repository
	if err := decode(b, &rec, "repository record"); err != nil {
		return Repository{}, nil, err
	}
	return rec, pred, nil
}

func notFound(name string) error {
	return repolock.Errorf(repolock.ENotFound, "repository %q not found", name)
}

func gone(name string) error {
	return repolock.Errorf(repolock.EGone, "repository %q is being deleted", name)
}

func (s *Service) stale(rec Repository) bool {
	return rec.State == StateInitial && s.now().Sub(rec.CreatedAt) >= s.cfg.InitialTimeout
}

// ensureTenant records the tenant in the tenants partition, which the
// Cleaner scans to find every tenant's repository records.
func (s *Service) ensureTenant(ctx context.Context, tenantID string) error {
	if _, ok := s.tenants.Load(tenantID); ok {
		return nil
	}
	_, _, err := s.store.Get(ctx, []byte(tenantsPartition), []byte(tenantID))
	if errors.Is(err, kv.ErrNotFound) {
		_, err = s.setIf(ctx, []byte(tenantsPartition), []byte(tenantID), []byte("{}"), nil)
		if errors.Is(err, kv.ErrPredicateFailed) {
			err = nil
		}
	}
	if err != nil {
		return storeErr(err)
	}
	s.tenants.Store(tenantID, struct{}{})
	return nil
}

// Create creates a repository (Step 2): the record in state initial, the
// initial commit and the default branch in the new instance's partition,
// then the record promoted to active with SetIf on its predicate. Until the
// promotion the repository is invisible; a create that fails part way
// abandons its instance to the Cleaner (or, if even that fails, leaves an
// initial record that is declared failed after the initial timeout).
func (s *Service) Create(ctx context.Context, tenantID string, p CreateParams) (_ Repository, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.Create")
	if p.DefaultBranch == "" {
		p.DefaultBranch = DefaultBranchName
	}
	if err := validateTenant(tenantID); err != nil {
		return Repository{}, err
	}
	if err := ValidateRepositoryName(p.Name); err != nil {
		return Repository{}, err
	}
	if err := validateText("storage_namespace", p.StorageNamespace, maxStorageNamespace, true, false); err != nil {
		return Repository{}, err
	}
	if p.Bare {
		return s.createBare(ctx, tenantID, p)
	}
	if err := ValidateBranchName(p.DefaultBranch); err != nil {
		return Repository{}, err
	}
	if err := s.ensureTenant(ctx, tenantID); err != nil {
		return Repository{}, err
	}

	rec := Repository{
		Name:             p.Name,
		StorageNamespace: p.StorageNamespace,
		DefaultBranch:    p.DefaultBranch,
		State:            StateInitial,
		InstanceUID:      newUID(),
		CreatedAt:        s.now(),
	}
	// Step 1: the record, in state initial.
	pred, err := s.insertRecord(ctx, tenantID, rec)
	if err != nil {
		return Repository{}, err
	}
	in := instance{tenantID: tenantID, repo: rec, pk: instancePartition(tenantID, rec.Name, rec.InstanceUID)}
	fail := func(err error) (Repository, error) {
		s.abandon(ctx, tenantID, rec, pred)
		return Repository{}, storeErr(err)
	}

	// Step 2: the initial commit.
	commit := Commit{
		Version:      1,
		Message:      InitialCommitMessage,
		CreationDate: rec.CreatedAt,
		Parents:      []string{},
		Metadata:     map[string]string{},
		Generation:   1,
	}
	commit.ID = CommitID(commit)
	if _, err := s.setIf(ctx, in.pk, commitKey(commit.ID), encode(commit), nil); err != nil {
		return fail(err)
	}
	// Step 3: the default branch.
	branch := Branch{Name: rec.DefaultBranch, CommitID: commit.ID, StagingToken: in.stagingToken(rec.DefaultBranch), SealedTokens: []string{}}
	if _, err := s.setIf(ctx, in.pk, branchKey(branch.Name), encode(branch), nil); err != nil {
		return fail(err)
	}
	// Step 4: promote. A failed predicate means the record was changed
	// under us: this create took longer than the initial timeout and was
	// declared failed.
	active := rec
	active.State = StateActive
	if _, err := s.setIf(ctx, reposPartition(tenantID), repoKey(rec.Name), encode(active), pred); err != nil {
		if errors.Is(err, kv.ErrPredicateFailed) {
			s.abandonPartition(ctx, tenantID, rec)
			return Repository{}, repolock.Wrap(repolock.EConflict, err,
				"creating repository %q took longer than %s and was abandoned; try again", rec.Name, s.cfg.InitialTimeout)
		}
		if derr := decidingErr(err); IsUnknownOutcome(derr) {
			// The promotion may have landed (and the repository been
			// seen): abandoning it now does not make "not created" true
			// of the past, so the answer is outcome unknown.
			s.abandon(ctx, tenantID, rec, pred)
			return Repository{}, derr
		}
		return fail(err)
	}
	return active, nil
}

// createBare writes the record straight in the active state.
func (s *Service) createBare(ctx context.Context, tenantID string, p CreateParams) (Repository, error) {
	if err := ValidateBranchName(p.DefaultBranch); err != nil {
		return Repository{}, err
	}
	if err := s.ensureTenant(ctx, tenantID); err != nil {
		return Repository{}, err
	}
	rec := Repository{
		Name:             p.Name,
		StorageNamespace: p.StorageNamespace,
		DefaultBranch:    p.DefaultBranch,
		State:            StateActive,
		InstanceUID:      newUID(),
		CreatedAt:        s.now(),
	}
	if _, err := s.insertRecord(ctx, tenantID, rec); err != nil {
		return Repository{}, err
	}
	return rec, nil
}

// insertRecord writes a new record with SetIf(nil). When the name is taken
// by a stale initial record, that one is declared failed first.
func (s *Service) insertRecord(ctx context.Context, tenantID string, rec Repository) (kv.Predicate, error) {
	pk, key := reposPartition(tenantID), repoKey(rec.Name)
	for attempt := 0; ; attempt++ {
		pred, err := s.setIf(ctx, pk, key, encode(rec), nil)
		if err == nil {
			return pred, nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			// An initial record that may have landed holds the name
			// ("being created") until it is declared failed.
			return nil, decidingErr(err)
		}
		existing, epred, gerr := s.getRecord(ctx, tenantID, rec.Name)
		if errors.Is(gerr, kv.ErrNotFound) && attempt < 3 {
			continue // deleted meanwhile: try again
		}
		if gerr != nil {
			return nil, storeErr(gerr)
		}
		switch {
		case existing.State == StateActive:
			return nil, repolock.Errorf(repolock.EAlreadyExists, "a repository named %q already exists", rec.Name)
		case existing.State == StateDeleting:
			return nil, repolock.Errorf(repolock.EConflict, "a repository named %q is being deleted; try again shortly", rec.Name)
		case !s.stale(existing):
			return nil, repolock.Errorf(repolock.EAlreadyExists, "a repository named %q is being created", rec.Name)
		case attempt >= 3:
			return nil, repolock.Errorf(repolock.EConflict, "repository %q keeps changing; try again", rec.Name)
		}
		if err := s.deleteInstance(ctx, tenantID, existing, epred, reasonFailed); err != nil && !repolock.IsCode(err, repolock.ENotFound) {
			if isPendingDelete(err) {
				return nil, repolock.Errorf(repolock.EConflict, "a repository named %q is being deleted; try again shortly", rec.Name)
			}
			return nil, err
		}
	}
}

// abandon hands a failed create's instance to the Cleaner: the delete flow
// on the record the create wrote. It runs even if ctx was cancelled. If it
// fails too, the initial record stays and is declared failed after the
// initial timeout.
func (s *Service) abandon(ctx context.Context, tenantID string, rec Repository, pred kv.Predicate) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := s.deleteInstance(cctx, tenantID, rec, pred, reasonFailed); err != nil && !repolock.IsCode(err, repolock.ENotFound) && !isPendingDelete(err) {
		s.log.WarnContext(ctx, "repostate: could not abandon a failed create; it will be declared failed after the initial timeout",
			"tenant_id", tenantID, "repository", rec.Name, "instance_uid", rec.InstanceUID, "error", err.Error())
	}
}

// abandonPartition lists an instance whose record is no longer ours in the
// deleted partition, so whatever this create wrote into it is cleaned.
func (s *Service) abandonPartition(ctx context.Context, tenantID string, rec Repository) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	entry := deletedEntry{Kind: kindInstance, TenantID: tenantID, Name: rec.Name, InstanceUID: rec.InstanceUID, Reason: reasonFailed, DeletedAt: s.now()}
	if err := s.set(cctx, []byte(deletedPartition), deletedKey(tenantID, rec.Name, rec.InstanceUID), encode(entry)); err != nil {
		s.log.WarnContext(ctx, "repostate: could not list an abandoned instance for the Cleaner",
			"tenant_id", tenantID, "repository", rec.Name, "instance_uid", rec.InstanceUID, "error", err.Error())
	}
}

// Get returns an active repository. An initial record is invisible (404);
// one older than the initial timeout is declared failed first. A deleting
// record answers 410.
func (s *Service) Get(ctx context.Context, tenantID, name string) (_ Repository, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.Get")
	in, err := s.resolve(ctx, tenantID, name)
	return in.repo, err
}

// resolve is Get returning the instance.
func (s *Service) resolve(ctx context.Context, tenantID, name string) (instance, error) {
	if err := validateTenant(tenantID); err != nil {
		return instance{}, err
	}
	if err := ValidateRepositoryName(name); err != nil {
		return instance{}, notFound(name)
	}
	rec, pred, err := s.getRecord(ctx, tenantID, name)
	if errors.Is(err, kv.ErrNotFound) {
		return instance{}, notFound(name)
	}
	if err != nil {
		return instance{}, storeErr(err)
	}
	switch rec.State {
	case StateActive:
		return instance{tenantID: tenantID, repo: rec, pk: instancePartition(tenantID, rec.Name, rec.InstanceUID)}, nil
	case StateDeleting:
		return instance{}, gone(name)
	}
	if s.stale(rec) {
		if err := s.deleteInstance(ctx, tenantID, rec, pred, reasonFailed); err != nil && !repolock.IsCode(err, repolock.ENotFound) {
			s.log.WarnContext(ctx, "repostate: could not declare a stale repository failed",
				"tenant_id", tenantID, "repository", name, "instance_uid", rec.InstanceUID, "error", err.Error())
		} else {
			s.log.InfoContext(ctx, "repostate: declared a stale repository failed",
				"tenant_id", tenantID, "repository", name, "instance_uid", rec.InstanceUID, "created_at", rec.CreatedAt)
		}
	}
	return instance{}, notFound(name)
}

// verifyLive checks, after a write into an instance, that the instance is
// still the active one. If it is not (it was deleted while the write was in
// flight, perhaps after the Cleaner already swept its partition), undo
// removes what the write left behind and the caller answers as if the
// repository had been gone from the start.
func (s *Service) verifyLive(ctx context.Context, in instance, undo func(ctx context.Context) error) error {
	rec, _, err := s.getRecord(ctx, in.tenantID, in.repo.Name)
	switch {
	case err == nil && rec.InstanceUID == in.repo.InstanceUID && rec.State == StateActive:
		return nil
	case err != nil && !errors.Is(err, kv.ErrNotFound):
		// The write landed; whether it counts depends on the instance
		// still being live, which could not be read.
		return unknownOutcome(err)
	}
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if uerr := undo(cctx); uerr != nil {
		s.log.WarnContext(ctx, "repostate: could not undo a write into a deleted repository instance",
			"tenant_id", in.tenantID, "repository", in.repo.Name, "instance_uid", in.repo.InstanceUID, "error", uerr.Error())
	}
	if err == nil && rec.InstanceUID == in.repo.InstanceUID {
		return gone(in.repo.Name)
	}
	return notFound(in.repo.Name)
}

// List returns up to limit active repositories of the tenant with names
// after after, in name order, and whether there are more.
func (s *Service) List(ctx context.Context, tenantID, afterName string, limit int) (_ []Repository, _ bool, err error) {
	defer repolock.WrapOp(&err, "repostate.Service.List")
	if err := validateTenant(tenantID); err != nil {
		return nil, false, err
	}
	out := []Repository{}
	for e, err := range s.store.Scan(ctx, reposPartition(tenantID), after(repoPrefix, afterName), limit+1) {
		if err != nil {
			return nil, false, storeErr(err)
		}
		if !bytes.HasPrefix(e.Key, []byte(repoPrefix)) {
			break
		}
		var rec Repository
		if err := decode(e.Value, &rec, "repository record"); err != nil {
			return nil, false, err
		}
		if rec.State != StateActive {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, rec)
	}
	return out, false, nil
}

// Delete deletes a repository (Step 2): SetIf the record to deleting on the
// predicate read, list the instance in the deleted partition, DeleteIf the
// record. The name is reusable as soon as Delete returns, unless a step
// after the mark failed: the mark is the deciding write, so Delete then
// answers success all the same, the repository answers 410 (and its name
// 409 "being deleted") until the Cleaner completes the deletion. A mark
// whose outcome cannot be read back answers outcome unknown. Deleting a
// repository already in the deleting state completes that deletion.
func (s *Service) Delete(ctx context.Context, tenantID, name string) (err error) {
	defer repolock.WrapOp(&err, "repostate.Service.Delete")
	if err := validateTenant(tenantID); err != nil {
		return err
	}
	if err := ValidateRepositoryName(name); err != nil {
		return notFound(name)
	}
	rec, pred, err := s.getRecord(ctx, tenantID, name)
	if errors.Is(err, kv.ErrNotFound) {
		return notFound(name)
	}
	if err != nil {
		return storeErr(err)
	}
	reason := reasonDeleted
	if rec.State == StateInitial {
		if !s.stale(rec) {
			return notFound(name)
		}
		reason = reasonFailed
	}
	err = s.deleteInstance(ctx, tenantID, rec, pred, reason)
	if isPendingDelete(err) {
		s.log.WarnContext(ctx, "repostate: delete marked the repository but could not finish; the Cleaner completes it",
			"tenant_id", tenantID, "repository", name, "instance_uid", rec.InstanceUID, "error", err.Error())
		return nil
	}
	return err
}

// pendingDelete is the failure of a delete step after the record of the
// instance was marked deleting: the instance is invisible and the Cleaner
// completes the deletion (it retires every record in the deleting state).
type pendingDelete struct{ err error }

func (e *pendingDelete) Error() string { return "deletion left to the Cleaner: " + e.err.Error() }
func (e *pendingDelete) Unwrap() error { return e.err }

func isPendingDelete(err error) bool {
	var p *pendingDelete
	return errors.As(err, &p)
}

// deleteInstance runs the delete flow for the instance rec (read with pred).
// It never touches another instance of the same name: every change of the
// record is conditional on a predicate of a read that showed this instance.
// It returns nil once the record of this instance is gone (by this call or
// a concurrent one that this call took part in), ENotFound if the instance
// was gone before this call could mark it, outcome unknown when the mark
// may have landed and could not be read back, and a *pendingDelete (a
// domain error underneath) when a step after the mark failed.
func (s *Service) deleteInstance(ctx context.Context, tenantID string, rec Repository, pred kv.Predicate, reason string) error {
	pk, key := reposPartition(tenantID), repoKey(rec.Name)
	uid := rec.InstanceUID
	// marked: the record of this instance is (known to be) in the deleting
	// state; from then on every failure is a pending delete.
	marked := false
	failed := func(err error) error {
		if marked {
			return &pendingDelete{storeErr(err)}
		}
		return storeErr(err)
	}
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			var err error
			rec, pred, err = s.getRecord(ctx, tenantID, rec.Name)
			if errors.Is(err, kv.ErrNotFound) || (err == nil && rec.InstanceUID != uid) {
				if marked {
					return nil
				}
				return notFound(rec.Name)
			}
			if err != nil {
				return failed(err)
			}
		}
		if rec.State != StateDeleting {
			deleting := rec
			deleting.State = StateDeleting
			p, err := s.setIf(ctx, pk, key, encode(deleting), pred)
			if errors.Is(err, kv.ErrPredicateFailed) {
				continue
			}
			if err != nil {
				return decidingErr(err)
			}
			rec, pred = deleting, p
		}
		marked = true
		entry := deletedEntry{Kind: kindInstance, TenantID: tenantID, Name: rec.Name, InstanceUID: uid, Reason: reason, DeletedAt: s.now()}
		if err := s.set(ctx, []byte(deletedPartition), deletedKey(tenantID, rec.Name, uid), encode(entry)); err != nil {
			return failed(err)
		}
		err := s.deleteIf(ctx, pk, key, pred)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, kv.ErrPredicateFailed):
			continue // changed: the next round reads how
		default:
			return failed(err)
		}
	}
	return failed(repolock.Errorf(repolock.EConflict, "repository %q changed concurrently while being deleted; try again", rec.Name))
}

// isDomainError reports whether err is one of the domain's answers (a
// refusal decided by the store), not a failure to reach it.
func isDomainError(err error) bool {
	var de *repolock.Error
	return errors.As(err, &de)
}
