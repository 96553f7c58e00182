package repostate

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/repolock/repolock"
)

var (
	repoNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,62}$`)
	commitIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Limits on free-form fields.
const (
	maxRefName          = 255
	maxStorageNamespace = 1024
	maxMessage          = 64 << 10
	maxCommitter        = 255
	maxMetaRangeID      = 255
	maxMetadataEntries  = 100
	maxMetadataKey      = 255
	maxMetadataValue    = 4096
	maxStagedPath       = 1024
	maxStagedData       = 256 << 10
	maxTenantID         = 128
)

// ValidateRepositoryName checks ^[a-z0-9][a-z0-9-]{2,62}$.
func ValidateRepositoryName(name string) error {
	if !repoNameRE.MatchString(name) {
		return repolock.Errorf(repolock.EInvalid,
			"repository name %q is not valid: 3-63 characters of lowercase letters, digits and '-', starting with a letter or digit", clip(name))
	}
	return nil
}

// ValidateBranchName checks a branch name against git's ref-name rules.
func ValidateBranchName(name string) error {
	return validateRefName("branch", name)
}

// ValidateTagName checks a tag name against git's ref-name rules.
func ValidateTagName(name string) error {
	return validateRefName("tag", name)
}

// validateRefName applies git check-ref-format's rules (with --branch's
// refusal of a leading '-'), plus: valid UTF-8, at most 255 bytes, not HEAD.
func validateRefName(kind, name string) error {
	bad := func(why string) error {
		return repolock.Errorf(repolock.EInvalid, "%s name %q is not valid: %s", kind, clip(name), why)
	}
	switch {
	case name == "":
		return repolock.Errorf(repolock.EInvalid, "%s name is required", kind)
	case len(name) > maxRefName:
		return bad("longer than 255 bytes")
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case name == "@":
		return bad(`it is "@"`)
	case name == "HEAD":
		return bad("HEAD is reserved")
	case strings.HasPrefix(name, "-"):
		return bad("it starts with '-'")
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return bad("it starts or ends with '/'")
	case strings.Contains(name, "//"):
		return bad("it contains '//'")
	case strings.Contains(name, ".."):
		return bad("it contains '..'")
	case strings.Contains(name, "@{"):
		return bad("it contains '@{'")
	case strings.HasSuffix(name, "."):
		return bad("it ends with '.'")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad("it contains a control character")
		}
		if strings.ContainsRune(" ~^:?*[\\", r) {
			return bad("it contains one of space ~ ^ : ? * [ \\")
		}
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return bad("a component starts with '.'")
		}
		if strings.HasSuffix(part, ".lock") {
			return bad("a component ends with '.lock'")
		}
	}
	return nil
}

// ValidateCommitID checks the form of a commit id: 64 lowercase hex digits.
func ValidateCommitID(id string) error {
	if !commitIDRE.MatchString(id) {
		return repolock.Errorf(repolock.EInvalid, "commit id %q is not valid: 64 lowercase hex digits", clip(id))
	}
	return nil
}

func validateTenant(tenantID string) error {
	if tenantID == "" || len(tenantID) > maxTenantID || strings.ContainsAny(tenantID, "/\x00") {
		return repolock.Errorf(repolock.EInvalid, "tenant id is not valid")
	}
	return nil
}

// validateText checks a free-form field: valid UTF-8, no control characters
// other than tab and newline (when multiline), at most max bytes.
func validateText(field, v string, max int, required, multiline bool) error {
	if v == "" {
		if required {
			return repolock.Errorf(repolock.EInvalid, "%s is required", field)
		}
		return nil
	}
	if len(v) > max {
		return repolock.Errorf(repolock.EInvalid, "%s must be at most %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return repolock.Errorf(repolock.EInvalid, "%s must be valid UTF-8", field)
	}
	for _, r := range v {
		if (r < 0x20 && !(multiline && (r == '\n' || r == '\t' || r == '\r'))) || r == 0x7f {
			return repolock.Errorf(repolock.EInvalid, "%s must not contain control characters", field)
		}
	}
	return nil
}

// clip shortens a user-supplied value for an error message.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
