package normalize

import "testing"

// TestDisplayURL pins which user names the stored repo_url keeps (an ssh
// login name) and which it strips (anything that can be a secret), and
// that the key never changes.
func TestDisplayURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		// Kept: ssh and scp-like login names.
		{"git@github.com:o/r.git", "git@github.com:o/r.git"},
		{"ssh://git@github.com/o/r", "ssh://git@github.com/o/r"},
		{"ssh://git@github.com:22/o/r", "ssh://git@github.com:22/o/r"},
		{"git+ssh://deploy-bot@git.example.com/o/r.git", "git+ssh://deploy-bot@git.example.com/o/r.git"},
		{"org-123@ssh.dev.azure.com:v3/org/proj/repo", "org-123@ssh.dev.azure.com:v3/org/proj/repo"},
		{"APKAEIBAERJR2EXAMPLE@git-codecommit.us-east-2.amazonaws.com:v1/repos/r", "APKAEIBAERJR2EXAMPLE@git-codecommit.us-east-2.amazonaws.com:v1/repos/r"},
		{"  git@github.com:o/r.git  ", "git@github.com:o/r.git"},
		{"github.com:o/r.git", "github.com:o/r.git"},
		// Stripped: any user info of http(s).
		{"https://deployer@github.com/o/r", "https://github.com/o/r"},
		{"https://x-access-token:ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r.git", "https://github.com/o/r.git"},
		{"https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r", "https://github.com/o/r"},
		{"http://user:pw@git.example.com/o/r", "http://git.example.com/o/r"},
		// Stripped: token-shaped ssh users.
		{"ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com:o/r.git", "github.com:o/r.git"},
		{"ssh://glpat-abcdefghijklmnopqrst@gitlab.com/o/r", "ssh://gitlab.com/o/r"},
		{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl@github.com:o/r", "github.com:o/r"},
		{"a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2@github.com:o/r", "github.com:o/r"},
		// Stripped: users that are no login name.
		{"-oProxyCommand@github.com:o/r", "github.com:o/r"},
		{"us%65r@github.com:o/r", "github.com:o/r"},
	} {
		got, err := Default().DisplayURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("DisplayURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		k1, err1 := RepoURL(tc.in)
		k2, err2 := RepoURL(got)
		if err1 != nil || err2 != nil || k1 != k2 {
			t.Errorf("DisplayURL(%q) changed the key: %q %v → %q %v", tc.in, k1, err1, k2, err2)
		}
	}
	// It rejects what RepoURL rejects.
	for _, in := range []string{"ssh://u:pw@github.com/o/r", "file:///tmp/r", ""} {
		if _, err := Default().DisplayURL(in); err == nil {
			t.Errorf("DisplayURL(%q) accepted", in)
		}
	}
}

// TestSecretShaped pins the token shapes.
func TestSecretShaped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		kind string
	}{
		{"ghp_abcdefghijklmnopqrstuvwxyz0123456789", "a GitHub personal access token"},
		{"gho_abcdefghijklmnop", "a GitHub OAuth token"},
		{"ghs_abcdefghijklmnop", "a GitHub server-to-server token"},
		{"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "a GitHub fine-grained access token"},
		{"glpat-abcdefghijklmnopqrst", "a GitLab personal access token"},
		{"ATBBabcdefghijklmnopqrstuvwx", "a Bitbucket app password"},
		{"ATCTT3xFfGN0abcdefghijklmnop", "a Bitbucket access token"},
		{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "a JSON Web Token"},
		{"a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2", "a token"},
		{"git", ""}, {"deployer", ""}, {"ghp_", ""}, {"ghp_short", ""}, {"eyJ", ""},
		{"argocd-repo-creds-github-production-east", ""}, // letters only
		{"APKAEIBAERJR2EXAMPLE", ""},
	} {
		kind, ok := SecretShaped(tc.in)
		if kind != tc.kind || ok != (tc.kind != "") {
			t.Errorf("SecretShaped(%q) = %q, %v; want %q", tc.in, kind, ok, tc.kind)
		}
	}
}
