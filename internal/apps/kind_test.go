package apps

import (
	"strings"
	"testing"
)

// TestKindStatements checks that every template placeholder of both kinds'
// statements was filled and that the parameters are numbered as the flow
// passes them (create: the lock after the own columns; update: the lock
// after the own columns).
func TestKindStatements(t *testing.T) {
	for _, k := range []*kind{applications, credentials} {
		for name, q := range map[string]string{
			"get": k.sql.get, "locked": k.sql.locked, "list": k.sql.list, "create": k.sql.create,
			"createWithNewLock": k.sql.createWithNewLock, "update": k.sql.update, "lockRow": k.sql.lockRow,
			"setRef": k.sql.setRef, "delete": k.sql.delete,
		} {
			if strings.ContainsAny(q, "{}") {
				t.Errorf("%s %s: a placeholder is left: %s", k.noun, name, q)
			}
			if !strings.Contains(q, k.table) && !strings.Contains(q, k.refTable) {
				t.Errorf("%s %s names neither %s nor %s", k.noun, name, k.table, k.refTable)
			}
		}
		own := k.own[0].name + ", " + k.own[1].name
		for _, want := range []struct{ stmt, part string }{
			{k.sql.create, "VALUES ($1, $2, $3, $4, $5, $6)"},
			{k.sql.create, "SELECT a.id, $7::uuid FROM a"},
			{k.sql.update, k.own[0].name + " = $6, " + k.own[1].name + " = $7, updated_at = now()"},
			{k.sql.update, "$8::text AS lock_id"},
			{k.sql.createWithNewLock, "$5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[])"},
			{k.sql.createWithNewLock, "AS i(key, rules, tenant, shadows, gen, name, repo_url, " + own + ")"},
			{k.sql.get, "a.normalized_url, a." + k.own[0].name + ", a." + k.own[1].name + ", a.created_at"},
		} {
			if !strings.Contains(want.stmt, want.part) {
				t.Errorf("%s: statement lacks %q:\n%s", k.noun, want.part, want.stmt)
			}
		}
	}
}
