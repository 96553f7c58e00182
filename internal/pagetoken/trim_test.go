package pagetoken_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/repolock/repolock/internal/pagetoken"
)

func TestTrim(t *testing.T) {
	t.Parallel()
	itoa := func(last int) string { return "after " + strconv.Itoa(last) }
	tests := []struct {
		name     string
		rows     []int
		size     int
		wantRows []int
		wantNext string
	}{
		{"nil rows", nil, 3, nil, ""},
		{"empty rows", []int{}, 3, []int{}, ""},
		{"fewer than size", []int{1, 2}, 3, []int{1, 2}, ""},
		{"exactly size", []int{1, 2, 3}, 3, []int{1, 2, 3}, ""},
		{"size+1", []int{1, 2, 3, 4}, 3, []int{1, 2, 3}, "after 3"},
		{"size 1, one row", []int{7}, 1, []int{7}, ""},
		{"size 1, two rows", []int{7, 8}, 1, []int{7}, "after 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			next := func(last int) string { calls++; return itoa(last) }
			rows, tok := pagetoken.Trim(tc.rows, tc.size, next)
			if !slices.Equal(rows, tc.wantRows) || (rows == nil) != (tc.wantRows == nil) || tok != tc.wantNext {
				t.Fatalf("Trim(%v, %d) = %v %q, want %v %q", tc.rows, tc.size, rows, tok, tc.wantRows, tc.wantNext)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.wantNext != ""]; calls != want {
				t.Fatalf("next called %d times, want %d", calls, want)
			}
		})
	}
	for _, rows := range [][]int{nil, {}, {1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("Trim(%v, 0) did not panic", rows)
				}
			}()
			pagetoken.Trim(rows, 0, itoa)
		}()
	}
}
