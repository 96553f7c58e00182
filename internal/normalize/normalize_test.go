package normalize

import (
	"errors"
	"strings"
	"testing"

	"github.com/repolock/repolock"
)

// acceptCases: every rule that produces a key. The name states the rule.
var acceptCases = []struct {
	name, in, want string
}{
	// Accepted syntaxes.
	{"scheme https", "https://github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme http", "http://github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme ssh", "ssh://git@github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme git", "git://github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme git+ssh", "git+ssh://git@github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme ssh+git", "ssh+git://git@github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme is case-insensitive (git refuses it; keyed as lower case, see docs)", "HTTPS://github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme SSH upper case keyed as ssh", "SSH://git@github.com/argoproj/test", "github.com/argoproj/test"},
	{"scheme mixed case keyed as lower case", "Git+Ssh://git@github.com:22/argoproj/test", "github.com/argoproj/test"},
	{"scheme upper case keeps the port rule", "SSH://git@h.example:2222/o/r", "h.example+2222/o/r"},
	{"scp-like with user", "git@github.com:argoproj/test", "github.com/argoproj/test"},
	{"scp-like without user", "github.com:argoproj/test", "github.com/argoproj/test"},
	{"scp-like with absolute path", "git@github.com:/argoproj/test", "github.com/argoproj/test"},
	{"scp-like user with dot and dash (git-urls alone rejects it)", "first.last-x@github.com:o/r", "github.com/o/r"},
	{"scp-like empty user", "@github.com:o/r", "github.com/o/r"},
	{"scp-like single-letter host", "git@h:o/r", "h/o/r"},

	// Whitespace.
	{"surrounding spaces trimmed", " https://github.com/argoproj/test/ ", "github.com/argoproj/test"},
	{"surrounding tab and newline trimmed", "\thttps://github.com/o/r\r\n", "github.com/o/r"},

	// User info.
	{"user info user dropped", "https://alice@github.com/o/r", "github.com/o/r"},
	{"user info user:token dropped", "https://user:ghp_SECRET@github.com/o/r", "github.com/o/r"},
	{"user info with escaped @ dropped", "https://u:p%40ss@github.com/o/r", "github.com/o/r"},
	{"user info git@ dropped", "ssh://git@github.com/o/r", "github.com/o/r"},
	{"user info in scp dropped", "alice@github.com:o/r", "github.com/o/r"},

	// Host.
	{"host lower-cased", "https://GitHub.COM/o/r", "github.com/o/r"},
	{"host trailing dot removed", "https://github.com./o/r", "github.com/o/r"},
	{"host trailing dot removed in scp", "git@github.com.:o/r", "github.com/o/r"},
	{"host with underscore accepted", "ssh://git@git_server/o/r", "git_server/o/r"},
	{"host single label accepted", "ssh://gitserver/o/r", "gitserver/o/r"},
	{"host IDN converted to punycode", "https://bücher.example/o/r", "xn--bcher-kva.example/o/r"},
	{"host punycode kept", "https://xn--bcher-kva.example/o/r", "xn--bcher-kva.example/o/r"},
	{"host upper-case punycode lower-cased", "https://XN--BCHER-KVA.EXAMPLE/o/r", "xn--bcher-kva.example/o/r"},
	{"host IDN upper case mapped", "https://BÜCHER.example/o/r", "xn--bcher-kva.example/o/r"},
	{"host IDN trailing dot removed", "https://bücher.example./o/r", "xn--bcher-kva.example/o/r"},
	{"host IDN ideographic full stop mapped", "https://bücher。example/o/r", "xn--bcher-kva.example/o/r"},
	{"host IDN non-transitional keeps sharp s", "https://straße.de/o/r", "xn--strae-oqa.de/o/r"},
	{"host fullwidth letters mapped by IDNA", "https://ｇｉｔｈｕｂ.com/o/r", "github.com/o/r"},
	{"host IDN in scp-like syntax", "git@bücher.example:o/r", "xn--bcher-kva.example/o/r"},
	{"host IPv4 literal", "https://192.0.2.1/o/r", "192.0.2.1/o/r"},
	{"host IPv6 kept in brackets", "ssh://[::1]/o/r", "[::1]/o/r"},
	{"host IPv6 canonicalized", "ssh://[0:0::1]/o/r", "[::1]/o/r"},
	{"host IPv6 lower-cased", "https://[2001:DB8::A]/o/r", "[2001:db8::a]/o/r"},
	{"host IPv6 leading zeros dropped", "https://[2001:0db8:0000::0001]/o/r", "[2001:db8::1]/o/r"},
	{"host IPv6 with port", "ssh://git@[2001:db8::1]:2222/o/r", "[2001:db8::1]+2222/o/r"},
	{"host IPv4-mapped IPv6 unmapped", "https://[::ffff:192.0.2.1]/o/r", "192.0.2.1/o/r"},

	// Port.
	{"port https default 443 dropped", "https://github.com:443/o/r", "github.com/o/r"},
	{"port http default 80 dropped", "http://github.com:80/o/r", "github.com/o/r"},
	{"port ssh default 22 dropped", "ssh://git@github.com:22/o/r", "github.com/o/r"},
	{"port git+ssh default 22 dropped", "git+ssh://git@github.com:22/o/r", "github.com/o/r"},
	{"port ssh+git default 22 dropped", "ssh+git://git@github.com:22/o/r", "github.com/o/r"},
	{"port git default 9418 dropped", "git://github.com:9418/o/r", "github.com/o/r"},
	{"port empty means default", "https://github.com:/o/r", "github.com/o/r"},
	{"port non-default kept", "https://h.example:8443/o/r", "h.example+8443/o/r"},
	{"port ssh non-default kept", "ssh://git@h.example:2222/o/r", "h.example+2222/o/r"},
	{"port default of another scheme kept", "https://h.example:22/o/r", "h.example+22/o/r"},
	{"port leading zeros dropped", "https://h.example:08443/o/r", "h.example+8443/o/r"},
	{"port highest", "https://h.example:65535/o/r", "h.example+65535/o/r"},
	{"scp has no port: digits are the first path segment", "git@h.example:2222/o/r", "h.example/2222/o/r"},
	{"scp has no port: digits-only path", "git@h.example:2222", "h.example/2222"},
	{"scp has no port: digits with trailing slash", "git@h.example:2222/", "h.example/2222"},

	// Path.
	{"path lower-cased", "https://github.com/ArgoProj/Test", "github.com/argoproj/test"},
	{"path unreserved escapes decoded", "https://github.com/%61rgoproj/te%73t", "github.com/argoproj/test"},
	{"path lower-case hex escape decoded", "https://h.example/o/%7euser", "h.example/o/~user"},
	{"path sub-delim escape decoded", "https://h.example/o/r%21", "h.example/o/r!"},
	{"path sub-delim literal", "https://h.example/o/r!", "h.example/o/r!"},
	{"path space kept encoded", "https://dev.azure.com/org/My%20Project/_git/repo", "dev.azure.com/org/my%20project/_git/repo"},
	{"path encoded question mark stays encoded", "https://h.example/o/r%3Fx", "h.example/o/r%3Fx"},
	{"path encoded hash stays encoded", "https://h.example/o/r%23x", "h.example/o/r%23x"},
	{"path encoded @ stays encoded", "https://h.example/o/r%40v1", "h.example/o/r%40v1"},
	{"path encoded percent stays encoded", "https://h.example/o/100%25", "h.example/o/100%25"},
	{"path non-ASCII percent-encoded in key", "https://h.example/o/bücher", "h.example/o/b%C3%BCcher"},
	{"path encoded non-ASCII lower-cased", "https://h.example/o/B%C3%9Ccher", "h.example/o/b%C3%BCcher"},
	{"path decomposed form put in NFC", "https://h.example/o/bu%CC%88cher", "h.example/o/b%C3%BCcher"},
	{"path dot segment removed", "https://github.com/o/./r", "github.com/o/r"},
	{"path repeated slashes collapsed", "https://github.com//o///r", "github.com/o/r"},
	{"path trailing slashes stripped", "https://github.com/o/r///", "github.com/o/r"},
	{"path .git stripped", "https://github.com/o/r.git", "github.com/o/r"},
	{"path .git then trailing slash stripped", "https://github.com/o/r.git/", "github.com/o/r"},
	{"path upper-case .GIT stripped", "https://github.com/o/r.GIT", "github.com/o/r"},
	{"path repeated .git stripped (idempotency)", "https://github.com/o/r.git.git", "github.com/o/r"},
	{"path /.git directory is the repository", "https://github.com/o/r/.git", "github.com/o/r"},
	{"path .git inside name kept", "https://github.com/o/r.github.io", "github.com/o/r.github.io"},
	{"path nested groups kept", "https://gitlab.com/g/sub/r", "gitlab.com/g/sub/r"},
	{"path single segment", "https://h.example/r", "h.example/r"},
	{"path tilde kept over https (a literal directory there)", "https://h.example/~user/r", "h.example/~user/r"},
	{"path leading ~ dropped over ssh (home-relative = absolute)", "ssh://git@h.example/~/o/r", "h.example/o/r"},
	{"path leading ~ dropped in scp", "git@h.example:~/o/r", "h.example/o/r"},
	{"path leading /~ dropped in scp", "h.example:/~/o/r", "h.example/o/r"},
	{"path encoded leading ~ dropped over ssh", "ssh://h.example/%7E/o/r", "h.example/o/r"},
	{"path ~ not leading kept over ssh", "ssh://h.example/o/~/r", "h.example/o/~/r"},
	{"scp user-less digits are a path, as git reads them (v1: port)", "github.com:1234/repo", "github.com/1234/repo"},
	{"scp user-less digits equal the user form", "git@github.com:1234/repo", "github.com/1234/repo"},
	{"scp digits keep leading zeros (git sends 022)", "github.com:022/repo", "github.com/022/repo"},
	{"scp digits 22 differ from 022", "github.com:22/repo", "github.com/22/repo"},
	{"scp ssh.github.com:443 is a path, not the port 443 alias (v1: github.com/o/r)", "ssh.github.com:443/o/r", "github.com/443/o/r"},
	{"scp percent-escape kept as git sends it (v3; v2: decoded)", "git@h.example:o/r%41", "h.example/o/r%2541"},
	{"scp %73 with user kept (v3)", "git@h.example:/o/te%73t", "h.example/o/te%2573t"},
	{"scp %73 without user kept (v3)", "h.example:/o/te%73t", "h.example/o/te%2573t"},
	{"scp %73 with ~/ kept (v3)", "git@h.example:~/o/te%73t", "h.example/o/te%2573t"},
	{"scp %73 without user, with ~/ kept (v3)", "h.example:~/o/te%73t", "h.example/o/te%2573t"},
	{"ssh %2573 decoded once, as git sends it", "ssh://git@h.example/o/te%2573t", "h.example/o/te%2573t"},
	{"ssh %2573 without user", "ssh://h.example/o/te%2573t", "h.example/o/te%2573t"},
	{"ssh %2573 with ~/", "ssh://git@h.example/~/o/te%2573t", "h.example/o/te%2573t"},
	{"ssh %73 decoded once", "ssh://git@h.example/o/te%73t", "h.example/o/test"},
	{"scp %2573 kept (v3)", "git@h.example:/o/te%2573t", "h.example/o/te%252573t"},
	{"scp %2573 without user kept (v3)", "h.example:o/te%2573t", "h.example/o/te%252573t"},
	{"scp %2573 with ~/ kept (v3)", "git@h.example:~/o/te%2573t", "h.example/o/te%252573t"},
	{"scp %20 with user kept (v3)", "git@h.example:o/te%20t", "h.example/o/te%2520t"},
	{"scp %20 without user kept (v3)", "h.example:/o/te%20t", "h.example/o/te%2520t"},
	{"scp %20 with ~/ kept (v3)", "h.example:~/o/te%20t", "h.example/o/te%2520t"},
	{"ssh %2520 decoded once", "ssh://git@h.example/o/te%2520t", "h.example/o/te%2520t"},
	{"ssh %2520 without user, with ~/", "ssh://h.example/~/o/te%2520t", "h.example/o/te%2520t"},
	{"ssh %20 decoded once", "ssh://git@h.example/o/te%20t", "h.example/o/te%20t"},
	{"scp %2520 kept (v3)", "git@h.example:o/te%2520t", "h.example/o/te%252520t"},
	{"scp escaped .git is not a .git suffix (v3)", "git@h.example:o/r%2Egit", "h.example/o/r%252egit"},
	{"scp escaped ~ is not home (v3)", "git@h.example:%7e/o/r", "h.example/%257e/o/r"},
	{"scp escaped @ kept (v3)", "git@h.example:o/r%40v1", "h.example/o/r%2540v1"},
	{"scp Azure DevOps with encoded space in the project", "git@ssh.dev.azure.com:v3/org/My%20Project/repo", "dev.azure.com/org/my%20project/_git/repo"},
	{"scp Azure DevOps escapes decoded (Azure's SSH server decodes them)", "git@ssh.dev.azure.com:v3/org/te%73t/repo", "dev.azure.com/org/test/_git/repo"},
	{"scp Azure DevOps other path shape decoded too", "git@ssh.dev.azure.com:other/te%73t", "ssh.dev.azure.com/other/test"},
	{"ssh Azure DevOps on another port is another server: no Azure rule", "ssh://git@ssh.dev.azure.com:2222/v3/org/te%2573t/repo", "ssh.dev.azure.com+2222/v3/org/te%2573t/repo"},

	// Aliases.
	{"alias Azure DevOps https", "https://dev.azure.com/ORG/PROJ/_git/REPO", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps https with org user", "https://ORG@dev.azure.com/ORG/PROJ/_git/REPO", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps legacy visualstudio.com", "https://ORG.visualstudio.com/PROJ/_git/REPO", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps legacy DefaultCollection", "https://org.visualstudio.com/DefaultCollection/proj/_git/repo", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps ssh scp-like", "git@ssh.dev.azure.com:v3/ORG/PROJ/REPO", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps ssh URL", "ssh://git@ssh.dev.azure.com/v3/org/proj/repo", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps legacy ssh", "ORG@vs-ssh.visualstudio.com:v3/ORG/PROJ/REPO", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps project omitted", "https://dev.azure.com/org/_git/repo", "dev.azure.com/org/repo/_git/repo"},
	{"alias Azure DevOps legacy project omitted", "https://org.visualstudio.com/_git/repo", "dev.azure.com/org/repo/_git/repo"},
	{"alias Azure DevOps ssh with .git", "git@ssh.dev.azure.com:v3/org/proj/repo.git", "dev.azure.com/org/proj/_git/repo"},
	{"alias Azure DevOps ssh URL with space in project", "ssh://git@ssh.dev.azure.com/v3/org/My%20Project/repo", "dev.azure.com/org/my%20project/_git/repo"},
	{"alias Azure DevOps not applied on other port", "https://dev.azure.com:8443/org/_git/repo", "dev.azure.com+8443/org/_git/repo"},
	{"alias Azure DevOps ssh other path shape kept", "git@ssh.dev.azure.com:v2/org/repo", "ssh.dev.azure.com/v2/org/repo"},
	{"alias visualstudio.com non-repo path kept", "https://org.visualstudio.com/proj/_apis/x", "org.visualstudio.com/proj/_apis/x"},
	{"alias GitHub ssh over port 443", "ssh://git@ssh.github.com:443/o/r", "github.com/o/r"},
	{"alias GitHub ssh.github.com on port 22", "git@ssh.github.com:o/r", "github.com/o/r"},
	{"alias GitHub ssh.github.com other port kept", "ssh://git@ssh.github.com:2222/o/r", "ssh.github.com+2222/o/r"},
	{"alias GitHub www redirect", "https://www.github.com/o/r", "github.com/o/r"},
	{"alias GitHub www on other port kept", "https://www.github.com:8443/o/r", "www.github.com+8443/o/r"},
	{"alias GitLab altssh over port 443", "ssh://git@altssh.gitlab.com:443/g/r", "gitlab.com/g/r"},
	{"alias Bitbucket altssh over port 443", "ssh://git@altssh.bitbucket.org:443/w/r", "bitbucket.org/w/r"},

	// The key form parses back to itself.
	{"key form", "github.com/o/r", "github.com/o/r"},
	{"key form with port", "h.example+8443/o/r", "h.example+8443/o/r"},
	{"key form with port, leading zeros", "H.example+08443/o/r", "h.example+8443/o/r"},
	{"v1 ported key is scp to git (path 8443/o/r)", "h.example:8443/o/r", "h.example/8443/o/r"},
	{"key form of an scp path starting with digits", "h.example/2222/o/r", "h.example/2222/o/r"},
	{"key form IPv6", "[::1]/o/r", "[::1]/o/r"},
	{"key form IPv6 with port", "[::1]+8443/o/r", "[::1]+8443/o/r"},
	{"key form with escapes", "h.example/o/b%C3%BCcher", "h.example/o/b%C3%BCcher"},
	{"key form is normalized too", "GitHub.com/O/R.git/", "github.com/o/r"},
}

// rejectCases: every rule that rejects. want is a substring of the message.
var rejectCases = []struct {
	name, in, want string
}{
	{"empty", "", reasonEmpty},
	{"whitespace only", " \t\n", reasonEmpty},
	{"too long before parsing", "https://github.com/o/" + strings.Repeat("a", 2030), reasonTooLong},
	{"too long scp (ReDoS cap)", "git@github.com:" + strings.Repeat("a/", 1020), reasonTooLong},
	{"key too long after percent-encoding", "https://h.example/o/" + strings.Repeat("ü", 1000), reasonKeyTooLong},
	{"invalid UTF-8", "https://github.com/o/r\xff", reasonUTF8},
	{"byte-order mark leading", "\uFEFFhttps://github.com/o/r", reasonBOM},
	{"byte-order mark inside", "https://github.com/o/\uFEFFr", reasonBOM},
	{"byte-order mark before whitespace", " \uFEFF https://github.com/o/r", reasonBOM},
	{"control NUL", "https://github.com/o/r\x00", reasonControl},
	{"control NUL in host", "https://github.com\x00.evil/o/r", reasonControl},
	{"control ESC", "https://github.com/o/\x1br", reasonControl},
	{"control DEL", "https://github.com/o/r\x7f", reasonControl},
	{"control C1", "https://github.com/o/\u009br", reasonControl},
	{"whitespace space inside", "git@github.com:o/r name", reasonSpace},
	{"whitespace tab inside", "https://github.com/o/r\tx", reasonSpace},
	{"whitespace newline inside", "https://github.com/o/r\nhttps://evil.example/o/r", reasonSpace},
	{"whitespace no-break space inside", "https://github.com/o/r\u00a0x", reasonSpace},
	{"whitespace line separator inside", "https://github.com/o/r\u2028x", reasonSpace},
	{"format zero-width space", "https://github.com/o/r\u200b", reasonFormat},
	{"format right-to-left override", "https://github.com/o/\u202er", reasonFormat},
	{"format soft hyphen in host", "https://git\u00adhub.com/o/r", reasonFormat},
	{"format zero-width joiner in host", "https://a\u200db.example/o/r", reasonFormat},
	{"remote helper ext::", "ext::sh -c x", reasonHelper},
	{"remote helper fd::", "fd::17", reasonHelper},
	{"remote helper wrapping a URL", "https::https://github.com/o/r", reasonHelper},
	{"file scheme", "file:///tmp/r", reasonFileScheme},
	{"file scheme upper case", "FILE:///tmp/r", reasonFileScheme},
	{"file scheme with host", "file://server/tmp/r", reasonFileScheme},
	{"file without slashes", "file:/tmp/r", reasonLocal},
	{"local absolute path", "/tmp/r", reasonLocal},
	{"local relative path ./", "./r", reasonLocal},
	{"local relative path ../", "../r", reasonLocal},
	{"local dot", ".", reasonLocal},
	{"local home path", "~/r", reasonLocal},
	{"local other user's home", "~alice/r", reasonLocal},
	{"local Windows drive backslash", `C:\r`, reasonLocal},
	{"local Windows drive slash", "C:/r", reasonLocal},
	{"local Windows drive alone", "C:", reasonLocal},
	{"local UNC path", `\\server\share\r`, reasonLocal},
	{"local protocol-relative looks like a path", "//github.com/o/r", reasonLocal},
	{"local single word", "repo", reasonLocal},
	{"local drive-like scp with user", "git@c:/o/r", reasonLocal},
	{"scheme ftp", "ftp://h.example/o/r", reasonScheme},
	{"scheme rsync", "rsync://h.example/o/r", reasonScheme},
	{"scheme git+https", "git+https://h.example/o/r", reasonScheme},
	{"scheme made up", "foo://h.example/o/r", reasonScheme},
	{"scheme with invalid characters", "tok_en://h.example/o/r", reasonMalformed},
	{"scheme separator inside scp-like path", "git@h.example:o/r://x", reasonMalformed},
	{"scheme without slashes", "https:github.com/o/r", reasonNoSlashes},
	{"scheme with one slash", "https:/github.com/o/r", reasonNoSlashes},
	{"scheme ssh without slashes", "ssh:git@github.com/o/r", reasonNoSlashes},
	{"query string", "https://github.com/o/r?x=1", reasonQuery},
	{"query string empty", "https://github.com/o/r?", reasonQuery},
	{"query string in scp-like", "git@github.com:o/r?x", reasonQuery},
	{"fragment", "https://github.com/o/r#main", reasonFragment},
	{"fragment in scp-like", "git@github.com:o/r#main", reasonFragment},
	{"backslash in path", `https://github.com/o\r`, reasonBackslash},
	{"backslash in authority (WHATWG reads it as /)", `https://evil.example\@github.com/o/r`, reasonBackslash},
	{"empty host", "https:///o/r", reasonNoHost},
	{"empty host after user", "ssh://git@/o/r", reasonNoHost},
	{"empty host with port", "https://:443/o/r", reasonNoHost},
	{"empty host scp-like", "git@:o/r", reasonNoHost},
	{"empty path no slash", "https://github.com", reasonNoPath},
	{"empty path slash", "https://github.com/", reasonNoPath},
	{"empty path only slashes", "https://github.com///", reasonNoPath},
	{"empty path only .git", "https://github.com/.git", reasonNoPath},
	{"empty path dot segments", "https://github.com/./.", reasonNoPath},
	{"empty path scp-like", "git@github.com:", reasonNoPath},
	{"empty path scp-like .git", "git@github.com:.git", reasonNoPath},
	{"empty path key form", "github.com/", reasonNoPath},
	{"empty path key form with port", "h.example+8443/", reasonNoPath},
	{"empty path IPv6 key form", "[::1]", reasonNoPath},
	{"port not a number", "https://github.com:abc/o/r", reasonPortNaN},
	{"port negative", "https://github.com:-1/o/r", reasonPortNaN},
	{"port scp-like inside ssh URL", "ssh://git@github.com:o/r", reasonPortNaN},
	{"port zero", "https://github.com:0/o/r", reasonPortRange},
	{"port above 65535", "https://github.com:65536/o/r", reasonPortRange},
	{"port huge", "https://github.com:99999999999999999999/o/r", reasonPortRange},
	{"port zero in key form", "h.example+0/o/r", reasonPortRange},
	{"port empty in key form", "h.example+/o/r", reasonPortNaN},
	{"port not a number in key form", "h.example+x/o/r", reasonPortNaN},
	{"port not a number in IPv6 key form", "[::1]+x/o/r", reasonPortNaN},
	{"v1 IPv6 ported key is bracketed scp to git", "[::1]:8443/o/r", reasonScpIPv6},
	{"bracketed scp with port (git: port 2222)", "[git@h.example:2222]:o/r", reasonScpIPv6},
	{"bracketed host after user", "git@[h.example]:o/r", reasonScpIPv6},
	{"host invalid character", "https://git*hub.com/o/r", reasonHost},
	{"host label starts with hyphen (ssh option injection)", "git@-oProxyCommand.example:o/r", reasonHost},
	{"host label ends with hyphen", "https://github-.com/o/r", reasonHost},
	{"host empty label", "https://github..com/o/r", reasonHost},
	{"host two trailing dots", "https://github.com../o/r", reasonHost},
	{"host label too long", "https://" + strings.Repeat("a", 64) + ".example/o/r", reasonHostTooLong},
	{"host name too long", "https://" + strings.Repeat("a.", 127) + "example/o/r", reasonHostTooLong},
	{"host percent-encoded", "https://git%68ub.com/o/r", reasonHostPercent},
	{"host bad punycode", "https://xn--zz.example/o/r", reasonIDNA},
	{"host IDNA disallowed character", "https://ex\u2488ample.com/o/r", reasonIDNA},
	{"host IDNA fullwidth solidus", "https://github.com\uff0fo/r", reasonIDNA},
	{"host user info in key form", "git@github.com/o/r", reasonHost},
	{"host IPv4 decimal integer", "https://2130706433/o/r", reasonIPv4},
	{"host IPv4 short form", "https://127.1/o/r", reasonIPv4},
	{"host IPv4 hex", "https://0x7f.0.0.1/o/r", reasonIPv4},
	{"host IPv4 leading zeros", "https://127.000.0.1/o/r", reasonIPv4},
	{"host IPv4 octet out of range", "https://256.1.1.1/o/r", reasonIPv4},
	{"host IPv6 zone", "ssh://[fe80::1%25eth0]/o/r", reasonIPv6Zone},
	{"host IPv6 invalid", "ssh://[::g]/o/r", reasonIPv6},
	{"host IPv6 brackets around IPv4", "ssh://[192.0.2.1]/o/r", reasonIPv6},
	{"host IPv6 unclosed", "ssh://[::1/o/r", reasonIPv6},
	{"host IPv6 garbage after bracket", "ssh://[::1]x/o/r", reasonHost},
	{"scp-like IPv6", "git@[::1]:o/r", reasonScpIPv6},
	{"scp-like bracket in path", "git@h.example:o]", reasonScpChar},
	{"scp-like malformed percent in path", "git@github.com:o/r%2x", reasonPercent},
	{"scp-like non-ASCII in path", "git@github.com:o/r\u00fc", reasonScpChar},
	{"scp-like ~user path", "git@github.com:~user/r", reasonTildeUser},
	{"scp-like /~user path", "github.com:/~user/r", reasonTildeUser},
	{"ssh ~user path", "ssh://h.example/~user/r", reasonTildeUser},
	{"ssh encoded ~user path", "ssh://h.example/%7Euser/r", reasonTildeUser},
	{"scp-like second colon", "git@github.com:o/r:x", reasonScpChar},
	{"user info in git:// (git resolves user@host as the host)", "git://user@github.com/o/r", reasonGitUser},
	{"password in ssh:// (git passes user:pw@host:port to ssh, port lost)", "ssh://u:t@h.example:2222/o/r", reasonSSHPassword},
	{"password in git+ssh://", "git+ssh://u:@h.example/o/r", reasonSSHPassword},
	{"user info with two @", "https://a@b@github.com/o/r", reasonUserAt},
	{"user info with two @ scp-like", "a@b@github.com:o/r", reasonUserAt},
	{"user info invalid character", "https://us\"er@github.com/o/r", reasonUserInfo},
	{"percent-encoding truncated", "https://github.com/o/r%", reasonPercent},
	{"percent-encoding one digit", "https://github.com/o/r%4", reasonPercent},
	{"percent-encoding not hex", "https://github.com/o/r%zz", reasonPercent},
	{"percent-encoding bad in key form", "github.com/o/r%zz", reasonPercent},
	{"encoded slash", "https://github.com/o%2Fr", reasonEncodedSlash},
	{"encoded slash lower-case", "https://github.com/o%2fr", reasonEncodedSlash},
	{"encoded backslash", "https://github.com/o%5Cr", reasonEncodedSlash},
	{"encoded NUL", "https://github.com/o/r%00", reasonEncodedControl},
	{"encoded newline", "https://github.com/o/r%0A", reasonEncodedControl},
	{"encoded tab", "https://github.com/o/r%09", reasonEncodedControl},
	{"encoded byte-order mark", "https://github.com/o/r%EF%BB%BF", reasonEncodedControl},
	{"encoded zero-width space", "https://github.com/o/r%E2%80%8B", reasonEncodedControl},
	{"encoded invalid UTF-8", "https://github.com/o/r%FF", reasonPathUTF8},
	{"literal @ in path", "https://h.example/o/r@v1", reasonPathAt},
	{"literal @ in path from a password containing a slash", "https://user:1234/ken@github.com/o/r", reasonPathAt},
	{"literal @ in key-form path", "h.example/o/r@v1", reasonPathAt},
	{"dot-dot resolvable", "https://github.com/o/x/../r", reasonDotDot},
	{"dot-dot encoded", "https://github.com/o/x/%2E%2e/r", reasonDotDot},
	{"dot-dot half encoded", "https://github.com/o/x/.%2E/r", reasonDotDot},
	{"dot-dot other half encoded", "https://github.com/o/x/%2e./r", reasonDotDot},
	{"dot-dot after empty segment (curl removes the empty one)", "https://github.com/o/r//..", reasonDotDot},
	{"dot-dot taking a foreign key space", "https://github.com/x//../o/r", reasonDotDot},
	{"dot-dot over ssh", "ssh://git@github.com/o/x/../r", reasonDotDot},
	{"dot-dot over git://", "git://github.com/o/x/../r", reasonDotDot},
	{"dot-dot scp-like", "git@github.com:o/x/../r.git", reasonDotDot},
	{"dot-dot scp-like encoded", "git@github.com:o/x/%2e%2E/r", reasonDotDot},
	{"scp encoded slash still rejected (v3 rejects what v2 rejects)", "git@h.example:o%2Fr", reasonEncodedSlash},
	{"scp encoded newline still rejected", "git@h.example:o/r%0A", reasonEncodedControl},
	{"scp encoded ~user still rejected", "git@h.example:%7euser/r", reasonTildeUser},
	{"scp Azure DevOps: '%' left after Azure decodes", "git@ssh.dev.azure.com:v3/org/te%2573t/repo", reasonAzurePercent},
	{"scp Azure DevOps: %2520", "git@ssh.dev.azure.com:v3/org/My%2520Project/repo", reasonAzurePercent},
	{"ssh Azure DevOps: git sends '%', Azure decodes again", "ssh://git@ssh.dev.azure.com/v3/org/te%2573t/repo", reasonAzurePercent},
	{"ssh Azure DevOps legacy: %2520", "ssh://org@vs-ssh.visualstudio.com/v3/org/My%2520Project/repo", reasonAzurePercent},
	{"upper-case FILE scheme", "FILE:///tmp/r", reasonFileScheme},
	{"dot-dot key form", "github.com/o/x/../r", reasonDotDot},
	{"dot-dot above root", "https://github.com/../r", reasonDotDot},
	{"dot-dot above root later", "https://github.com/o/../../r", reasonDotDot},
	{"dot-dot encoded above root", "https://github.com/%2e%2e/r", reasonDotDot},
	{"dot-dot above root scp-like", "git@github.com:../r", reasonDotDot},
	{"dot-dot left after .git", "https://github.com/o/...git", reasonRepoName},
}

func TestRepoURLAccepts(t *testing.T) {
	for _, tc := range acceptCases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := RepoURL(tc.in)
			if err != nil {
				t.Fatalf("RepoURL(%q): %v", tc.in, err)
			}
			if string(k) != tc.want {
				t.Fatalf("RepoURL(%q) = %q, want %q", tc.in, k, tc.want)
			}
			checkKey(t, tc.in, k)
		})
	}
}

func TestRepoURLRejects(t *testing.T) {
	for _, tc := range rejectCases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := RepoURL(tc.in)
			if err == nil {
				t.Fatalf("RepoURL(%q) = %q, want error %q", tc.in, k, tc.want)
			}
			if k != "" {
				t.Errorf("RepoURL(%q) returned key %q with error", tc.in, k)
			}
			checkError(t, tc.in, err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RepoURL(%q) error %q, want it to contain %q", tc.in, err, tc.want)
			}
			if _, err2 := StripUserInfo(tc.in); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("StripUserInfo(%q) error %v, want %v", tc.in, err2, err)
			}
		})
	}
}

// The examples of the contract.
func TestContractSameKey(t *testing.T) {
	groups := []struct {
		name string
		want string
		in   []string
	}{
		{"github spellings", "github.com/argoproj/test", []string{
			"git@GITHUB.com:argoproj/test",
			"https://github.com/argoproj/test.git",
			"ssh://git@github.com:22/argoproj/test",
			"git://github.com/argoproj/test",
			" https://github.com/argoproj/test/ ",
			"https://user:tok@github.com:443/argoproj/test.git/",
			"github.com/argoproj/test",
		}},
		{"azure devops spellings", "dev.azure.com/org/proj/_git/repo", []string{
			"https://dev.azure.com/ORG/PROJ/_git/REPO",
			"https://ORG@dev.azure.com/ORG/PROJ/_git/REPO",
			"https://ORG.visualstudio.com/PROJ/_git/REPO",
			"git@ssh.dev.azure.com:v3/ORG/PROJ/REPO",
			"ORG@vs-ssh.visualstudio.com:v3/ORG/PROJ/REPO",
		}},
		{"IDN spellings", "xn--bcher-kva.example/o/r", []string{
			"https://bücher.example/o/r",
			"https://xn--bcher-kva.example/o/r",
			"git@BÜCHER.example:o/r",
		}},
		{"IPv6 spellings", "[::1]/o/r", []string{
			"ssh://[::1]/o/r",
			"ssh://[0:0::1]:22/o/r",
			"https://[0000::1]/o/r",
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, in := range g.in {
				k, err := RepoURL(in)
				if err != nil || string(k) != g.want {
					t.Errorf("RepoURL(%q) = %q, %v; want %q", in, k, err, g.want)
				}
			}
		})
	}
}

func TestContractDifferentKeys(t *testing.T) {
	pairs := []struct{ name, a, b string }{
		{"non-default port is part of the key", "https://h:8443/o/r", "https://h/o/r"},
		{"ssh URL port vs scp path starting with digits", "ssh://git@h:2222/o/r", "git@h:2222/o/r"},
		{"subgroup is part of the path", "https://gitlab.com/g/sub/r", "https://gitlab.com/g/r"},
		{"different ports", "https://h:8443/o/r", "https://h:8444/o/r"},
		{"different hosts", "https://a.example/o/r", "https://b.example/o/r"},
		{"ssh.github.com on a custom port is not github.com", "ssh://git@ssh.github.com:2222/o/r", "https://github.com/o/r"},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			ka, err := RepoURL(p.a)
			if err != nil {
				t.Fatalf("RepoURL(%q): %v", p.a, err)
			}
			kb, err := RepoURL(p.b)
			if err != nil {
				t.Fatalf("RepoURL(%q): %v", p.b, err)
			}
			if ka == kb {
				t.Fatalf("RepoURL(%q) == RepoURL(%q) == %q, want different keys", p.a, p.b, ka)
			}
		})
	}
}

func TestContractErrors(t *testing.T) {
	for _, in := range []string{"", "file:///tmp/r", "/tmp/r", "ext::sh -c x", "https://github.com/o/r?x=1", "git@github.com:o/r name"} {
		if k, err := RepoURL(in); !errors.Is(err, ErrInvalidURL) {
			t.Errorf("RepoURL(%q) = %q, %v; want ErrInvalidURL", in, k, err)
		}
	}
}

// Tokens in the input never appear in an error, whatever the failure.
func TestErrorsNeverContainUserInfo(t *testing.T) {
	const tok = "ghp_S3CR3TT0K3N"
	inputs := []string{
		"https://user:" + tok + "@github.com/o/r?x=1",
		"https://user:" + tok + "@github.com/o/r#f",
		"https://user:" + tok + "@github.com:bad/o/r",
		"https://user:" + tok + "@github.com:0/o/r",
		"https://user:" + tok + "@/o/r",
		"https://user:" + tok + "@github.com",
		"https://user:" + tok + "@github.com/o/r%zz",
		"https://user:" + tok + "@github.com/o%2Fr",
		"https://user:" + tok + "@github.com/../r",
		"https://user:" + tok + "@git*hub.com/o/r",
		"https://a@user:" + tok + "@github.com/o/r",
		"https://us\"er:" + tok + "@github.com/o/r",
		"https://user:" + tok + "@github.com/o/r\tx",
		"https://user:" + tok + "@github.com/o/r\x00",
		"ftp://user:" + tok + "@github.com/o/r",
		"file://user:" + tok + "@github.com/o/r",
		tok + "://github.com/o/r",
		tok + "@github.com:o/r x",
		tok + "@github.com:o/r%2",
		tok + "@[::1]:o/r",
		"https://user:" + tok + "@github.com/" + strings.Repeat("a", 2048),
		"https://user:ghp_/S3CR3T@github.com/o/r",
		"ext::" + tok,
	}
	for _, in := range inputs {
		_, err := RepoURL(in)
		if err == nil {
			t.Errorf("RepoURL(%q) succeeded, want an error", in)
			continue
		}
		checkError(t, in, err)
		if strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), "S3CR3T") {
			t.Errorf("RepoURL(%q) error leaks the token: %q", in, err)
		}
		if _, err := StripUserInfo(in); err == nil || strings.Contains(err.Error(), tok) {
			t.Errorf("StripUserInfo(%q) error %v", in, err)
		}
	}
}

func TestStripUserInfo(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"scp-like user removed", "git@host.example:o/r", "host.example:o/r"},
		{"https user and token removed", "https://user:tok@h.example/o/r", "https://h.example/o/r"},
		{"https user removed", "https://ORG@dev.azure.com/ORG/PROJ/_git/REPO", "https://dev.azure.com/ORG/PROJ/_git/REPO"},
		{"ssh user removed, port kept", "ssh://git@h.example:2222/o/r", "ssh://h.example:2222/o/r"},
		{"rest kept as given", "HTTPS://U:P@GitHub.com:443/O/R.git/", "HTTPS://GitHub.com:443/O/R.git/"},
		{"surrounding whitespace trimmed", "  https://h.example/o/r \n", "https://h.example/o/r"},
		{"no user info unchanged", "https://h.example/o/r", "https://h.example/o/r"},
		{"scp without user unchanged", "h.example:o/r", "h.example:o/r"},
		{"key form unchanged", "h.example+8443/o/r", "h.example+8443/o/r"},
		{"scp path starting with digits stays scp (v1: became an ssh URL)", "git@h.example:2222/o/r", "h.example:2222/o/r"},
		{"scp empty user removed", "@h.example:o/r", "h.example:o/r"},
		{"IPv6 URL user removed", "ssh://git@[::1]:2222/o/r", "ssh://[::1]:2222/o/r"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StripUserInfo(tc.in)
			if err != nil {
				t.Fatalf("StripUserInfo(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("StripUserInfo(%q) = %q, want %q", tc.in, got, tc.want)
			}
			checkKey(t, tc.in, mustKey(t, tc.in))
		})
	}
}

func TestKeyHelpers(t *testing.T) {
	cases := []struct{ in, host, path string }{
		{"https://github.com/o/r", "github.com", "o/r"},
		{"https://h.example:8443/g/sub/r", "h.example:8443", "g/sub/r"},
		{"ssh://[::1]:2222/o/r", "[::1]:2222", "o/r"},
	}
	for _, tc := range cases {
		k := mustKey(t, tc.in)
		if k.Host() != tc.host || k.Path() != tc.path || k.String() != string(k) {
			t.Errorf("key %q: Host %q Path %q String %q; want %q %q", k, k.Host(), k.Path(), k.String(), tc.host, tc.path)
		}
	}
	if Key("x").Host() != "x" || Key("x").Path() != "" {
		t.Errorf("helpers on a key without '/'")
	}
}

func TestErrorType(t *testing.T) {
	_, err := RepoURL("https://github.com/o/r?x=1")
	var e *Error
	if !errors.As(err, &e) || e.Reason != reasonQuery {
		t.Fatalf("error %v is not an *Error with the query reason", err)
	}
	if got, want := err.Error(), "invalid repository URL: query strings are not allowed"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalidURL) {
		t.Errorf("errors.Is(err, ErrInvalidURL) = false")
	}
	if errors.Is(err, errors.New("invalid repository URL")) {
		t.Errorf("matches an unrelated error")
	}
	// The domain mapping: 400 invalid_argument with the safe message.
	if c := repolock.ErrorCode(err); c != repolock.EInvalid {
		t.Errorf("repolock.ErrorCode = %q, want %q", c, repolock.EInvalid)
	}
	if m := repolock.ErrorMessage(err); m != err.Error() {
		t.Errorf("repolock.ErrorMessage = %q", m)
	}
	if !errors.Is(err, &repolock.Error{Code: repolock.EInvalid}) {
		t.Errorf("errors.Is(err, &repolock.Error{Code: EInvalid}) = false")
	}
}

func TestVersion(t *testing.T) {
	// Changing any key changes this test's expectations; bump Version then.
	if Version != 3 {
		t.Fatalf("Version = %d; update the golden cases and docs/normalization.md with it", Version)
	}
}

func mustKey(t *testing.T, in string) Key {
	t.Helper()
	k, err := RepoURL(in)
	if err != nil {
		t.Fatalf("RepoURL(%q): %v", in, err)
	}
	return k
}

// allReasons is every reason; an error message is "invalid repository URL: "
// plus exactly one of them, which is what guarantees no input is echoed.
var allReasons = map[string]bool{
	reasonEmpty: true, reasonTooLong: true, reasonKeyTooLong: true, reasonUTF8: true,
	reasonBOM: true, reasonControl: true, reasonSpace: true, reasonFormat: true,
	reasonHelper: true, reasonQuery: true, reasonFragment: true, reasonBackslash: true,
	reasonLocal: true, reasonFileScheme: true, reasonScheme: true, reasonNoSlashes: true,
	reasonMalformed: true, reasonMalformedScp: true, reasonScpChar: true, reasonScpIPv6: true,
	reasonUserAt: true, reasonUserInfo: true, reasonNoHost: true, reasonHost: true,
	reasonHostTooLong: true, reasonHostPercent: true, reasonIDNA: true, reasonIPv4: true,
	reasonIPv6: true, reasonIPv6Zone: true, reasonPortNaN: true, reasonPortRange: true,
	reasonNoPath: true, reasonPercent: true, reasonEncodedSlash: true, reasonEncodedControl: true,
	reasonPathUTF8: true, reasonDotDot: true, reasonRepoName: true, reasonPathAt: true,
	reasonVersion: true, reasonAzurePercent: true, reasonTildeUser: true, reasonGitUser: true, reasonSSHPassword: true, reasonKeySyntax: true, reasonAliasEndpoint: true, reasonAliasCanonical: true,
	reasonAliasSame: true, reasonAliasBuiltin: true, reasonAliasOverlap: true, reasonAliasChain: true,
}

type tb interface {
	Helper()
	Errorf(string, ...any)
	Fatalf(string, ...any)
}

// checkError asserts the error contract: ErrInvalidURL, *Error, fixed text.
func checkError(t tb, in string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalidURL) {
		t.Fatalf("RepoURL(%q) error %v does not match ErrInvalidURL", in, err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("RepoURL(%q) error %v is not an *Error", in, err)
	}
	if !allReasons[e.Reason] || err.Error() != "invalid repository URL: "+e.Reason {
		t.Fatalf("RepoURL(%q) error %q is not one of the fixed reasons", in, err)
	}
}

// checkKey asserts the key invariants, and that StripUserInfo agrees.
func checkKey(t tb, in string, k Key) {
	t.Helper()
	s := string(k)
	if s == "" || len(s) > MaxLength {
		t.Fatalf("RepoURL(%q) = %q: empty or longer than %d", in, s, MaxLength)
	}
	for i := 0; i < len(s); i++ {
		// Printable ASCII without space; and never a query or fragment.
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '\\' || c == '@' {
			t.Fatalf("RepoURL(%q) = %q: byte %q not allowed in a key", in, s, c)
		}
	}
	slash := strings.IndexByte(s, '/')
	if slash <= 0 || slash == len(s)-1 {
		t.Fatalf("RepoURL(%q) = %q: not host/path", in, s)
	}
	if strings.ContainsAny(s[:slash], "@%") {
		t.Fatalf("RepoURL(%q) = %q: user info or escape in the host part", in, s)
	}
	if s != strings.ToLower(s[:slash])+s[slash:] {
		t.Fatalf("RepoURL(%q) = %q: host not lower case", in, s)
	}
	for seg := range strings.SplitSeq(s[slash+1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			t.Fatalf("RepoURL(%q) = %q: empty or dot segment", in, s)
		}
	}
	if strings.HasSuffix(s, ".git") {
		t.Fatalf("RepoURL(%q) = %q: ends in .git", in, s)
	}
	k2, err := RepoURL(s)
	if err != nil || k2 != k {
		t.Fatalf("not idempotent: RepoURL(%q) = %q, RepoURL(%q) = %q, %v", in, k, s, k2, err)
	}
	if k4, err := ParseKey(s); err != nil || k4 != k {
		t.Fatalf("not a checkable key: RepoURL(%q) = %q, ParseKey(%q) = %q, %v", in, k, s, k4, err)
	}
	if strings.IndexByte(s[:slash], ':') >= 0 && s[0] != '[' {
		t.Fatalf("RepoURL(%q) = %q: ':' before the first '/' (git would read the key as scp-like)", in, s)
	}
	stripped, err := StripUserInfo(in)
	if err != nil {
		t.Fatalf("StripUserInfo(%q): %v (RepoURL accepted it)", in, err)
	}
	if k3, err := RepoURL(stripped); err != nil || k3 != k {
		t.Fatalf("StripUserInfo(%q) = %q, which normalizes to %q, %v; want %q", in, stripped, k3, err, k)
	}
	auth := stripped
	if _, rest, ok := strings.Cut(stripped, "://"); ok {
		auth = rest
	}
	if i := strings.IndexByte(auth, '/'); i >= 0 {
		auth = auth[:i]
	}
	if strings.IndexByte(auth, '@') >= 0 {
		t.Fatalf("StripUserInfo(%q) = %q still has user info", in, stripped)
	}
}
