package database

// Test hooks for the package's own tests (package database_test).

// Discards reports how often DiscardIdle ran.
func (db *DB) Discards() int64 { return db.flushes.Load() }
