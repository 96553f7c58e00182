package normalize

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// Fingerprint identifies the configured alias set of n: "" when there is
// none (Default), else 16 hex digits of the SHA-256 of the sorted
// "from -> to" lines. Together with Version it is the effective rule set a
// key was made under; stored next to each lock (normalizer_rules), it marks
// the locks an alias change makes stale. The order in which aliases were
// given does not change it.
func (n *Normalizer) Fingerprint() string {
	if len(n.aliases) == 0 {
		return ""
	}
	lines := make([]string, len(n.aliases))
	for i, a := range n.aliases {
		lines[i] = a.From.String() + " -> " + a.To.String() + "\n"
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return hex.EncodeToString(sum[:8])
}
