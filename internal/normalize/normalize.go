// Package normalize turns the many spellings of a Git repository URL into one
// canonical key, the unit that repolock locks per tenant.
//
// This is security code. If two spellings of one repository produced two keys,
// two tenants could own the same repository (under-blocking); if junk mapped to
// a shared key, everyone would be blocked. Every rule here therefore errs on
// the side of one key per repository, and rejects what it cannot read without
// ambiguity. The rules, and the reasoning behind each, are in
// docs/normalization.md; keep the two in step.
//
// A key has the form host[+port]/path: no scheme, no user info, lower case,
// ASCII only; a non-default port follows a '+' (not a ':', which would make
// the key an scp-like spelling of another repository to git). Keys are
// canonical and checkable: ParseKey(string(k)) and RepoURL(string(k)) both
// return k for every key k that RepoURL returns.
package normalize

import (
	"errors"
	"strings"

	"github.com/repolock/repolock"
)

// Version identifies the current rule set, the one Default and the
// package-level functions key under. It is stored next to every key (column
// normalizer_version) and must be bumped whenever a change to this package,
// or to a dependency it relies on (git-urls, golang.org/x/net/idna, the Go
// Unicode tables), can change the key of some input or start or stop
// rejecting some input. Stored keys with an older version are re-checked by
// re-normalizing the stored URL.
//
// Older versions stay supported (Supported, ForVersion, Rules.Version):
// claims must compute the key a URL had under every version still stored,
// and a version keys exactly as it did when it was current, forever
// (testdata/v2_keys.txt holds version 2 to that).
//
// Version 3 keys scp-like paths as git sends them, verbatim: a literal '%'
// is "%25" in the key (version 2 decoded "%XX", so "git@h:o/te%73t" and
// "ssh://git@h/o/te%2573t", which git sends as one path, got two keys).
const Version = 3

// MaxLength is the longest input, and the longest key, accepted (in bytes).
// The cap is applied before any parsing: git-urls' scp regexp has a published
// ReDoS report, and nothing legitimate comes close.
const MaxLength = 2048

// Key is a canonical repository key: host[+port]/path.
type Key string

// String returns the key as a string.
func (k Key) String() string { return string(k) }

// Host returns the authority of the key in URL syntax: the host and, when it
// is not the scheme default, ":port" (as net/url's URL.Host does; the key
// itself writes "+port"). IPv6 hosts keep their brackets.
func (k Key) Host() string {
	s := string(k)
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '+'); i >= 0 {
		return s[:i] + ":" + s[i+1:]
	}
	return s
}

// Path returns the repository path of the key, without a leading slash.
func (k Key) Path() string {
	s := string(k)
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

// ErrInvalidURL is matched (errors.Is) by every error this package returns.
var ErrInvalidURL = errors.New("invalid repository URL")

// Error is the error type returned for every rejected input. Reason names the
// problem; it is a fixed text and never contains any part of the input, so
// the message is safe to log and to return to API callers (it cannot leak a
// token that was in the URL).
//
// errors.Is(err, ErrInvalidURL) holds, and the error unwraps to a
// *repolock.Error with code repolock.EInvalid so the HTTP layer maps it to 400.
type Error struct {
	Reason string
}

func (e *Error) Error() string { return ErrInvalidURL.Error() + ": " + e.Reason }

// Is reports whether target is ErrInvalidURL.
func (e *Error) Is(target error) bool { return target == ErrInvalidURL }

// Unwrap returns the domain error carrying code repolock.EInvalid.
func (e *Error) Unwrap() error {
	return &repolock.Error{Code: repolock.EInvalid, Message: e.Error()}
}

// Rejection reasons. They are fixed strings on purpose: see Error.
const (
	reasonEmpty          = "URL is empty"
	reasonTooLong        = "URL is longer than 2048 bytes"
	reasonKeyTooLong     = "normalized URL is longer than 2048 bytes"
	reasonUTF8           = "URL is not valid UTF-8"
	reasonBOM            = "URL contains a byte-order mark"
	reasonControl        = "URL contains a control character"
	reasonSpace          = "URL contains whitespace"
	reasonFormat         = "URL contains an invisible formatting character"
	reasonHelper         = "remote-helper syntax (transport::address) is not allowed"
	reasonQuery          = "query strings are not allowed"
	reasonFragment       = "fragments are not allowed"
	reasonBackslash      = "backslashes are not allowed"
	reasonLocal          = "local paths are not repository URLs"
	reasonFileScheme     = "file:// URLs are local paths, not repository URLs"
	reasonScheme         = "scheme is not allowed (use https, http, ssh, git, git+ssh or ssh+git)"
	reasonNoSlashes      = "malformed URL: a scheme must be followed by \"://\""
	reasonMalformed      = "malformed URL"
	reasonMalformedScp   = "malformed scp-like URL"
	reasonScpChar        = "invalid character in scp-like URL (use the ssh:// form)"
	reasonScpIPv6        = "brackets (IPv6 literals, [user@host:port]) are not supported in scp-like syntax (use the ssh:// form)"
	reasonUserAt         = "user info contains more than one '@'"
	reasonUserInfo       = "invalid user info"
	reasonNoHost         = "URL has an empty host"
	reasonHost           = "invalid host"
	reasonHostTooLong    = "host name is too long"
	reasonHostPercent    = "percent-encoding is not allowed in the host"
	reasonIDNA           = "host is not a valid internationalized domain name"
	reasonIPv4           = "invalid or non-canonical IPv4 address"
	reasonIPv6           = "invalid IPv6 address"
	reasonIPv6Zone       = "IPv6 zone identifiers are not allowed"
	reasonPortNaN        = "port is not a number"
	reasonPortRange      = "port is out of range"
	reasonNoPath         = "URL has an empty path"
	reasonPercent        = "invalid percent-encoding in path"
	reasonEncodedSlash   = "encoded slash or backslash in path is not allowed"
	reasonEncodedControl = "path contains an encoded control, formatting or whitespace character"
	reasonPathUTF8       = "decoded path is not valid UTF-8"
	reasonDotDot         = "path contains a '..' segment (git resolves it differently per transport)"
	reasonKeySyntax      = "not in key syntax host[+port]/path"
	reasonAliasEndpoint  = "alias endpoint is empty or too long"
	reasonAliasCanonical = "alias endpoint is not in canonical form"
	reasonAliasSame      = "alias maps an endpoint to itself"
	reasonAliasBuiltin   = "alias endpoint is a host of the built-in alias table"
	reasonAliasOverlap   = "alias source lies under another alias source"
	reasonAliasChain     = "alias target lies under an alias source (aliases do not chain)"
	reasonGitUser        = "git:// URLs cannot carry user info (git would take it as part of the host name)"
	reasonSSHPassword    = "ssh URLs cannot carry a password (git would misread the port)"
	reasonTildeUser      = "'~user' paths are not allowed (another user's home directory)"
	reasonRepoName       = "invalid repository name"
	reasonVersion        = "unsupported rules version"
	reasonAzurePercent   = "'%' in an Azure DevOps SSH path is not allowed (its SSH server decodes the path once more)"
	reasonPathAt         = "'@' in the path is not allowed (percent-encode it; a password containing '/' must be percent-encoded too)"
)

func invalid(reason string) error { return &Error{Reason: reason} }
