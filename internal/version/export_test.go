package version

// Stamped is get for tests: what Get answers in a binary stamped with v and r.
var Stamped = get
