package leases

// ListPrefixSQL is List's statement for a prefix with an end.
const ListPrefixSQL = listPrefixSQL

// The batch statements of acquisitions, releases and keepalives.
const (
	AcquireSQL   = acquireSQL
	ReleaseSQL   = releaseSQL
	KeepaliveSQL = keepaliveSQL
)
