// Package migrations embeds the SQL migrations so the binary carries them.
// Files follow golang-migrate's naming: NNNNNN_name.up.sql / .down.sql.
package migrations

import "embed"

// FS holds every *.sql migration file.
//
//go:embed *.sql
var FS embed.FS
