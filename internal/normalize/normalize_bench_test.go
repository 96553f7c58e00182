package normalize

import "testing"

// benchCorpus is a mix of what the service sees: scp-like, https with
// credentials, Azure DevOps, ssh with a port, IDN, and invalid input.
var benchCorpus = []string{
	"git@github.com:argoproj/argo-cd.git",
	"https://user:ghp_0123456789abcdef@github.com/argoproj/argo-cd.git",
	"https://github.com/argoproj/argo-cd",
	"https://ORG@dev.azure.com/ORG/PROJ/_git/REPO",
	"git@ssh.dev.azure.com:v3/ORG/PROJ/REPO",
	"ssh://git@gitlab.example.com:2222/group/sub/repo.git",
	"https://bücher.example/o/r",
	"https://gitlab.com/g/sub/r/",
	"https://github.com/o/r?x=1",
	"file:///tmp/r",
	"ext::sh -c x",
	"",
}

func BenchmarkRepoURL(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		_, _ = RepoURL(benchCorpus[n%len(benchCorpus)])
		n++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "norm/s")
}
