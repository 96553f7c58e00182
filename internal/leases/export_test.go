package leases

// ListPrefixSQL is List's statement for a prefix with an end.
const ListPrefixSQL = listPrefixSQL
