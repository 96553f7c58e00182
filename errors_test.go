package repolock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/repolock/repolock"
)

func opFails(cause error) (err error) {
	defer repolock.WrapOp(&err, "pkg.Fails")
	return cause
}

func opSucceeds() (n int, err error) {
	defer repolock.WrapOp(&err, "pkg.Succeeds")
	return 1, nil
}

func TestWrapOp(t *testing.T) {
	domain := repolock.Errorf(repolock.ENotFound, "lock %s not found", "x")
	tests := []struct {
		name      string
		cause     error
		wantText  string
		wantCode  repolock.Code
		wantMsg   string
		wantIsCtx bool
	}{
		{"domain error", domain, "pkg.Fails: not_found: lock x not found", repolock.ENotFound, "lock x not found", false},
		{"driver error", errors.New("pq: boom"), "pkg.Fails: pq: boom", repolock.EInternal, "internal error", false},
		{"wrapped context error", fmt.Errorf("query: %w", context.Canceled), "pkg.Fails: query: context canceled", repolock.EInternal, "internal error", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := opFails(tc.cause)
			if got := err.Error(); got != tc.wantText {
				t.Errorf("Error() = %q, want %q", got, tc.wantText)
			}
			if got := repolock.ErrorCode(err); got != tc.wantCode {
				t.Errorf("code %q, want %q", got, tc.wantCode)
			}
			if got := repolock.ErrorMessage(err); got != tc.wantMsg {
				t.Errorf("message %q, want %q (the op must not reach callers)", got, tc.wantMsg)
			}
			if got := repolock.Op(err); got != "pkg.Fails" {
				t.Errorf("Op = %q", got)
			}
			if !errors.Is(err, tc.cause) || errors.Is(err, context.Canceled) != tc.wantIsCtx {
				t.Errorf("errors.Is lost the cause")
			}
			if got := repolock.WithoutOps(err); got != tc.cause.Error() {
				t.Errorf("WithoutOps = %q, want %q", got, tc.cause.Error())
			}
		})
	}
	var e *repolock.Error
	if err := opFails(domain); !errors.As(err, &e) || e != domain {
		t.Fatal("errors.As does not reach the *Error")
	}
	if n, err := opSucceeds(); n != 1 || err != nil {
		t.Fatalf("nil error changed: %d %v", n, err)
	}
	// A recursive call does not stack the same op twice.
	if err := func() (err error) {
		defer repolock.WrapOp(&err, "pkg.Fails")
		return opFails(domain)
	}(); err.Error() != "pkg.Fails: not_found: lock x not found" {
		t.Fatalf("nested: %q", err.Error())
	}
}
