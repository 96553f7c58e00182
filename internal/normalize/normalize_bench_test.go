package normalize

import (
	"net/url"
	"testing"
	"time"
)

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

// benchRounds is how many times the harness walks the corpus.
const benchRounds = 20_000

// BenchmarkRepoURL is a harness: whatever b.N is (make bench runs it once),
// it normalizes the mixed corpus benchRounds times, and, as a floor in the
// same process, parses the same inputs with net/url.Parse, which does a
// small part of the work (no scp syntax, no IDNA, no path rules). It
// prints normalizations per second and the ratio to the floor.
func BenchmarkRepoURL(b *testing.B) {
	run := func(f func(string)) (perSec float64, perOp time.Duration) {
		n := benchRounds * len(benchCorpus)
		start := time.Now()
		for i := range n {
			f(benchCorpus[i%len(benchCorpus)])
		}
		el := time.Since(start)
		return float64(n) / el.Seconds(), el / time.Duration(n)
	}
	b.ReportAllocs()
	for b.Loop() {
		floor, floorOp := run(func(s string) { _, _ = url.Parse(s) })
		norm, normOp := run(func(s string) { _, _ = RepoURL(s) })
		b.Logf("%d inputs (mixed corpus of %d, valid and invalid)", benchRounds*len(benchCorpus), len(benchCorpus))
		b.Logf("%-28s %12.0f /s %10v /op", "net/url.Parse (floor)", floor, floorOp)
		b.Logf("%-28s %12.0f /s %10v /op", "normalize.RepoURL", norm, normOp)
		b.Logf("RepoURL/url.Parse throughput ratio %.3f (no target: it does far more work)", norm/floor)
		b.ReportMetric(norm, "norm/s")
		b.ReportMetric(floor, "urlparse/s")
		b.ReportMetric(norm/floor, "norm/urlparse")
	}
}
