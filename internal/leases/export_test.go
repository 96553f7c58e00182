package leases

// ListPrefixSQL is List's statement for a prefix with an end.
const ListPrefixSQL = listPrefixSQL

// The batch statements of releases and keepalives.
const (
	ReleaseSQL   = releaseSQL
	KeepaliveSQL = keepaliveSQL
)
