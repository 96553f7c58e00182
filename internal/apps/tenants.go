package apps

import (
	"context"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// TenantDeletion is what deleting a tenant removed.
type TenantDeletion struct {
	Tenant                string `json:"user"`
	Applications          int64  `json:"applications"`
	RepositoryCredentials int64  `json:"repository_credentials"`
	LocksReleased         int64  `json:"locks_released"`
}

// DeleteTenant deletes the tenant name with its applications, credentials
// and tokens, and releases all its locks (recording a "released" event for
// each), in one transaction.
//
// The tenant row is locked first (FOR UPDATE): requests of the tenant that
// are already writing finish before (their rows are then deleted too), and
// later ones fail when their foreign key finds the tenant gone. Other
// tenants waiting for one of its URLs get it as soon as this commits.
func (s *Service) DeleteTenant(ctx context.Context, name string) (_ TenantDeletion, err error) {
	defer repolock.WrapOp(&err, "apps.DeleteTenant")
	var d TenantDeletion
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		d = TenantDeletion{Tenant: name}
		var id string
		err := tx.GetContext(ctx, &id, `SELECT id FROM cluster_users WHERE name = $1 FOR UPDATE`, name)
		if database.IsNoRows(err) {
			return repolock.Errorf(repolock.ENotFound, "user %q not found", name)
		}
		if err != nil {
			return err
		}
		// Deleting the rows cascades to their reference rows.
		res, err := tx.ExecContext(ctx, `DELETE FROM applications WHERE cluster_user_id = $1`, id)
		if err != nil {
			return err
		}
		if d.Applications, err = res.RowsAffected(); err != nil {
			return err
		}
		res, err = tx.ExecContext(ctx, `DELETE FROM repository_credentials WHERE cluster_user_id = $1`, id)
		if err != nil {
			return err
		}
		if d.RepositoryCredentials, err = res.RowsAffected(); err != nil {
			return err
		}
		d.LocksReleased, err = s.locks.ReleaseAllForTenant(ctx, tx, id, name)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM cluster_users WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return TenantDeletion{}, err
	}
	s.locks.Metrics().ReleasedWithTenant(d.LocksReleased)
	return d, nil
}
