package normalize

import "strings"

// alias is one entry of the alias table: forge endpoints that name the same
// repositories as a canonical spelling.
type alias struct {
	// host is the (normalized) host the entry applies to; "*.example.com"
	// matches exactly one label in front of example.com.
	host string
	// ports, besides "no port" (the scheme default), under which the entry
	// applies. Under any other port the host is left alone.
	ports []int
	// rewrite returns the canonical host and segments, or ok=false to leave
	// the key unchanged. label is the label matched by '*' (else "").
	rewrite func(label string, segs []string) (host string, out []string, ok bool)
}

// aliases is THE alias table. Keep it small: each entry must be an endpoint
// the forge documents as an alternative spelling of the same repository, and
// each must be listed, with the reason, in docs/normalization.md. Adding,
// removing or changing an entry changes keys: bump Version.
//
// Rewrites yield keys the table maps to themselves (idempotency); entries
// are applied until none matches (at most a few rounds).
var aliases = []alias{
	// GitHub's SSH-over-HTTPS-port endpoint: ssh://git@ssh.github.com:443/o/r.
	{host: "ssh.github.com", ports: []int{443}, rewrite: toHost("github.com")},
	// GitHub redirects www.github.com to github.com, and git follows the
	// redirect, so https://www.github.com/o/r clones github.com/o/r.
	{host: "www.github.com", rewrite: toHost("github.com")},
	// GitLab.com's SSH-over-HTTPS-port endpoint.
	{host: "altssh.gitlab.com", ports: []int{443}, rewrite: toHost("gitlab.com")},
	// Bitbucket Cloud's SSH-over-HTTPS-port endpoint.
	{host: "altssh.bitbucket.org", ports: []int{443}, rewrite: toHost("bitbucket.org")},
	// Azure DevOps SSH: git@ssh.dev.azure.com:v3/ORG/PROJ/REPO.
	{host: "ssh.dev.azure.com", rewrite: azureSSH},
	// Azure DevOps legacy SSH: ORG@vs-ssh.visualstudio.com:v3/ORG/PROJ/REPO.
	{host: "vs-ssh.visualstudio.com", rewrite: azureSSH},
	// Azure DevOps legacy HTTPS: https://ORG.visualstudio.com/[DefaultCollection/]PROJ/_git/REPO.
	{host: "*.visualstudio.com", rewrite: azureLegacyHTTPS},
	// Azure DevOps HTTPS with the project omitted (project named like the
	// repository): https://dev.azure.com/ORG/_git/REPO.
	{host: "dev.azure.com", rewrite: azureShort},
}

const azureHost = "dev.azure.com"

func applyAliases(host string, port int, segs []string) (string, int, []string) {
	for range 4 {
		changed := false
		for _, a := range aliases {
			label, ok := a.match(host, port)
			if !ok {
				continue
			}
			h, out, ok := a.rewrite(label, segs)
			if !ok {
				continue
			}
			host, port, segs, changed = h, 0, out, true
			break
		}
		if !changed {
			break
		}
	}
	return host, port, segs
}

// builtinHost reports whether some built-in entry applies to host and port.
func builtinHost(host string, port int) bool {
	for i := range aliases {
		if _, ok := aliases[i].match(host, port); ok {
			return true
		}
	}
	return false
}

func (a *alias) match(host string, port int) (label string, ok bool) {
	if port != 0 && !containsInt(a.ports, port) {
		return "", false
	}
	if suffix, wild := strings.CutPrefix(a.host, "*"); wild {
		label, ok = strings.CutSuffix(host, suffix)
		return label, ok && label != "" && strings.IndexByte(label, '.') < 0
	}
	return "", host == a.host
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func toHost(h string) func(string, []string) (string, []string, bool) {
	return func(_ string, segs []string) (string, []string, bool) { return h, segs, true }
}

// azureSSH: v3/ORG/PROJ/REPO -> dev.azure.com/ORG/PROJ/_git/REPO.
func azureSSH(_ string, segs []string) (string, []string, bool) {
	if len(segs) != 4 || segs[0] != "v3" {
		return "", nil, false
	}
	return azureHost, []string{segs[1], segs[2], "_git", segs[3]}, true
}

// azureLegacyHTTPS: ORG.visualstudio.com/[DefaultCollection/]PROJ/_git/REPO
// -> dev.azure.com/ORG/PROJ/_git/REPO (and the project-less form likewise).
func azureLegacyHTTPS(org string, segs []string) (string, []string, bool) {
	if org == "vs-ssh" {
		return "", nil, false
	}
	if len(segs) > 0 && segs[0] == "defaultcollection" {
		segs = segs[1:]
	}
	switch {
	case len(segs) == 3 && segs[1] == "_git", len(segs) == 2 && segs[0] == "_git":
		return azureHost, append([]string{org}, segs...), true
	}
	return "", nil, false
}

// azureShort: dev.azure.com/ORG/_git/REPO -> dev.azure.com/ORG/REPO/_git/REPO.
func azureShort(_ string, segs []string) (string, []string, bool) {
	if len(segs) != 3 || segs[1] != "_git" {
		return "", nil, false
	}
	return azureHost, []string{segs[0], segs[2], "_git", segs[2]}, true
}
