package normalize_test

import (
	"errors"
	"fmt"

	"github.com/repolock/repolock/internal/normalize"
)

func ExampleRepoURL() {
	for _, in := range []string{
		"git@GITHUB.com:argoproj/test",
		"https://user:tok@github.com:443/argoproj/test.git/",
		"ssh://git@h.example:2222/o/r",
		"git@h.example:2222/o/r",
		"git@ssh.dev.azure.com:v3/ORG/PROJ/REPO",
	} {
		k, _ := normalize.RepoURL(in)
		fmt.Println(k)
	}
	_, err := normalize.RepoURL("https://user:tok@github.com/o/r?x=1")
	fmt.Println(errors.Is(err, normalize.ErrInvalidURL), err)
	// Output:
	// github.com/argoproj/test
	// github.com/argoproj/test
	// h.example+2222/o/r
	// h.example/2222/o/r
	// dev.azure.com/org/proj/_git/repo
	// true invalid repository URL: query strings are not allowed
}

func ExampleStripUserInfo() {
	for _, in := range []string{
		"https://user:tok@github.com/argoproj/test.git",
		"git@github.com:argoproj/test",
	} {
		s, _ := normalize.StripUserInfo(in)
		fmt.Println(s)
	}
	// Output:
	// https://github.com/argoproj/test.git
	// github.com:argoproj/test
}
