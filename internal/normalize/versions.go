package normalize

import (
	"slices"
	"strconv"
	"strings"
)

// supportedVersions are the rules versions this binary can key under,
// oldest first. A version leaves this list only when no database stores
// keys of it any more (every lock re-keyed).
var supportedVersions = []int{2, Version}

// Supported returns the rules versions this binary can key under, oldest
// first; the last is Version. Callers build the Normalizer of every stored
// version with ForVersion.
func Supported() []int { return slices.Clone(supportedVersions) }

// ForVersion returns the Normalizer of rules version v (one of Supported(),
// as stored in normalizer_version; 0 is not a version) with the given
// configured aliases. It is New(Rules{Version: v, Aliases: aliases}), except
// that v must be explicit.
func ForVersion(v int, aliases []Alias) (*Normalizer, error) {
	if v == 0 {
		return nil, invalid(reasonVersion)
	}
	return New(Rules{Version: v, Aliases: aliases})
}

// NextForTest returns rules one version newer than base, for tests of
// rules upgrades only: tests in other packages must show that replicas
// keying under version N and N+1 side by side, against one database, never
// give a repository two owners, and they cannot change the compiled
// Version. No production code may call it.
//
// The result's Version() is base.Version()+1, its keys are rewrite applied
// to base's keys (RepoURL, ParseKey, and StripUserInfo's check), it rejects
// what base rejects, and it has base's aliases (Rules, Fingerprint). Any
// rewrite works as long as it is idempotent, rewrite(rewrite(k)) ==
// rewrite(k), and returns keys base reads back as themselves
// (base.ParseKey(k) == k), so that the new keys stay canonical and
// checkable; a rewrite that breaks this makes the call that produced the
// key panic. For example, a version N+1 that merges two hosts:
//
//	next := normalize.NextForTest(n, func(k normalize.Key) normalize.Key {
//		if h, p, ok := strings.Cut(string(k), "/"); ok && h == "old.example" {
//			return normalize.Key("new.example/" + p)
//		}
//		return k
//	})
//
// base may itself come from NextForTest (N+2, ...). It panics if base or
// rewrite is nil.
//
// predecessors, when given, is the new version's Predecessors: the keys of
// base that rewrite maps to a key (for the example above, new.example/P ->
// [old.example/P]). Without it, Predecessors returns none.
func NextForTest(base *Normalizer, rewrite func(Key) Key, predecessors ...func(Key) []Key) *Normalizer {
	if base == nil || rewrite == nil {
		panic("normalize.NextForTest: nil base or rewrite")
	}
	s := &successor{base: base, rewrite: rewrite}
	if len(predecessors) > 0 {
		s.predecessors = predecessors[0]
	}
	return &Normalizer{
		version: base.Version() + 1,
		aliases: base.aliases,
		next:    s,
	}
}

// successor is the rule set of a NextForTest Normalizer.
type successor struct {
	base         *Normalizer
	rewrite      func(Key) Key
	predecessors func(Key) []Key
}

// Predecessors returns the keys that the rules of the version before n's
// (n.Version()-1, with the same aliases) can have given to a repository
// that n keys as k, other than k itself. A claim of k under n must find
// them held too: until re-keying moves it, a lock keyed under the older
// version may hold the repository under one of them, and the claimed URL
// alone does not say which (two spellings the older rules keyed apart can
// be one repository for n; the claimed spelling's own older key is then
// free). Every rules version declares its predecessors here; the list may
// hold more keys than needed (a claim is then refused while an older lock
// of another repository holds one of them, until re-keying), never fewer.
//
// Version 3 keys a literal '%' of an scp-like path as "%25", where version
// 2 decoded the escape: the predecessors of a key are the keys with some of
// its "%25XX" taken back to "%XX" or to the byte XX, read as version 2 keys.
func (n *Normalizer) Predecessors(k Key) []Key {
	if n.next != nil {
		if n.next.predecessors == nil {
			return nil
		}
		return n.next.predecessors(k)
	}
	if n.Version() != 3 || !strings.Contains(string(k), "%25") {
		return nil
	}
	prev, err := ForVersion(2, n.aliases)
	if err != nil {
		return nil
	}
	var out []Key
	for _, c := range unescape25(string(k)) {
		if pk, err := prev.ParseKey(c); err == nil && pk != k && !slices.Contains(out, pk) {
			out = append(out, pk)
		}
	}
	return out
}

// unescape25 returns s with every combination of its "%25XX" (XX two hex
// digits) left alone, taken back to "%XX", or decoded to the byte XX; with
// more than 4 of them, only all of them one way.
func unescape25(s string) []string {
	var at []int
	for i := 0; i+5 <= len(s); i++ {
		if s[i:i+3] == "%25" && isHex(s[i+3]) && isHex(s[i+4]) {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return nil
	}
	forms := func(i int) [3]string {
		xx := s[i+3 : i+5]
		b, _ := strconv.ParseUint(xx, 16, 8)
		return [3]string{s[i : i+5], "%" + xx, string(rune(b))}
	}
	var out []string
	if len(at) > 4 {
		for f := 1; f < 3; f++ {
			var b strings.Builder
			last := 0
			for _, i := range at {
				b.WriteString(s[last:i])
				b.WriteString(forms(i)[f])
				last = i + 5
			}
			b.WriteString(s[last:])
			out = append(out, b.String())
		}
		return out
	}
	total := 1
	for range at {
		total *= 3
	}
	for combo := 1; combo < total; combo++ {
		var b strings.Builder
		last, c := 0, combo
		for _, i := range at {
			b.WriteString(s[last:i])
			b.WriteString(forms(i)[c%3])
			c /= 3
			last = i + 5
		}
		b.WriteString(s[last:])
		out = append(out, b.String())
	}
	return out
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (s *successor) key(p *parsed) (Key, error) {
	k, err := s.base.key(p)
	if err != nil {
		return "", err
	}
	out := s.rewrite(k)
	if again := s.rewrite(out); again != out {
		panic("normalize.NextForTest: rewrite is not idempotent")
	}
	if c, err := s.base.ParseKey(string(out)); err != nil || c != out {
		panic("normalize.NextForTest: rewrite returned a key that is not canonical under the base rules")
	}
	return out, nil
}

// azureSSHHosts are the Azure DevOps SSH endpoints (the built-in alias
// table rewrites them). Their SSH server decodes the path it receives: the
// clone URLs Azure shows spell a space in a project name "%20".
var azureSSHHosts = map[string]bool{"ssh.dev.azure.com": true, "vs-ssh.visualstudio.com": true}

// pathV3 returns the path segments under rules v3.
//
//   - scp-like paths are keyed as git sends them: verbatim. A '%' is a
//     character of the path ("%25" in the key), so "git@h:o/te%73t" and
//     "ssh://git@h/o/te%2573t" (git decodes ssh:// paths once) get one key,
//     h/o/te%2573t. Which inputs are rejected does not change (p.segs, the
//     v2 reading, has been checked).
//   - the Azure DevOps SSH endpoints decode the path once more themselves,
//     so there an scp path keeps its v2 reading (decoded once, as Azure does:
//     "v3/org/My%20Project/repo" meets https://dev.azure.com/org/My%20Project/_git/repo),
//     and a path that still holds a '%' after that decoding (scp
//     "te%2573t", ssh:// "te%252573t") is rejected: Azure would decode it
//     again, and no reading of it is right for every spelling.
func pathV3(p *parsed) ([]string, error) {
	if p.ssh && p.port == 0 && azureSSHHosts[p.host] {
		for _, s := range p.segs {
			if strings.Contains(s, "%25") {
				return nil, invalid(reasonAzurePercent)
			}
		}
		return p.segs, nil
	}
	if p.form != formSCP {
		return p.segs, nil
	}
	return normalizePath(strings.ReplaceAll(p.scpPath, "%", "%25"), true)
}
